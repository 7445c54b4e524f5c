package sluice;

/** sluice_load_options: null strings and zeros are the defaults. */
public final class LoadOptions {
  /** null (the architecture's default), "embed", "classify", "score". */
  public String task;
  /** null/"auto" (the checkpoint's), "float32", "bfloat16", "float16". */
  public String dtype;
  /** null/"cpu", "cuda", "cuda:N". */
  public String device;
  /** CPU threads; 0 = all cores. */
  public int threads;
  /** Token budget of one packed batch; 0 = the device's default. */
  public long maxBatchTokens;
  /** Sequences per batch at most; 0 = the device's default. */
  public int maxNumSeqs;

  public LoadOptions task(String t) {
    task = t;
    return this;
  }

  public LoadOptions threads(int n) {
    threads = n;
    return this;
  }
}
