package sluice;

/** One input's classification, as `sluice classify` writes it. */
public final class Classification {
  /** Index and name of the highest probability. */
  public final int index;
  public final String label;
  public final float[] probs;
  public final float[] logits;
  /** Labels at or over their threshold (models with sluice.json thresholds), else empty. */
  public final String[] labels;

  Classification(int index, String label, float[] probs, float[] logits, String[] labels) {
    this.index = index;
    this.label = label;
    this.probs = probs;
    this.logits = logits;
    this.labels = labels;
  }
}
