package sluice;

/** The model tokenizer's encoding of a text (or a text pair). */
public final class Tokens {
  public final int[] ids;
  public final int[] typeIds;
  public final String[] tokens;
  /** 2 per token: byte offsets [begin, end) into the UTF-8 text the token came from. */
  public final int[] offsets;

  Tokens(int[] ids, int[] typeIds, String[] tokens, int[] offsets) {
    this.ids = ids;
    this.typeIds = typeIds;
    this.tokens = tokens;
    this.offsets = offsets;
  }
}
