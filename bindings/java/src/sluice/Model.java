package sluice;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A model loaded in-process through sluice's C API (libsluice.so, via libsluice_jni.so).
 * Results are those of {@code sluice score|embed|classify} bit for bit. Thread-safe: calls
 * from several threads share the model (sluice serialises them per model); {@link #close()}
 * waits for calls in progress, and calls after it throw IllegalStateException.
 */
public final class Model implements AutoCloseable {
  static {
    System.loadLibrary("sluice_jni");
  }

  /** One input: a text, a text pair (score: query and document), or token ids. */
  public static final class Input {
    final byte[] text;
    final byte[] pair;
    final int[] ids;
    final int[] typeIds;

    private Input(byte[] text, byte[] pair, int[] ids, int[] typeIds) {
      this.text = text;
      this.pair = pair;
      this.ids = ids;
      this.typeIds = typeIds;
    }

    public static Input text(String a) {
      return new Input(a.getBytes(StandardCharsets.UTF_8), null, null, null);
    }

    public static Input pair(String a, String b) {
      return new Input(
          a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8), null, null);
    }

    /** Token ids as they are (special tokens included); typeIds may be null (all 0). */
    public static Input ids(int[] ids, int[] typeIds) {
      if (typeIds != null && typeIds.length != ids.length) {
        throw new IllegalArgumentException("typeIds and ids differ in length");
      }
      return new Input(null, null, ids, typeIds);
    }
  }

  private static final int SCORE = 0, EMBED = 1, CLASSIFY = 2;
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private long handle;
  private final String task;
  private final String[] labels;
  private final boolean multiVector;

  private Model(long handle) {
    this.handle = handle;
    Object[] info = nativeInfo(handle);
    task = (String) info[0];
    labels = (String[]) info[1];
    multiVector = (Boolean) info[2];
  }

  public static Model load(String dir, LoadOptions o) {
    if (o == null) o = new LoadOptions();
    return new Model(
        nativeLoad(dir, o.task, o.dtype, o.device, o.threads, o.maxBatchTokens, o.maxNumSeqs));
  }

  /** The C API version of the library loaded (major * 1000 + minor). */
  public static int apiVersion() {
    return nativeApiVersion();
  }

  public String task() {
    return task;
  }

  public String[] labels() {
    return labels.clone();
  }

  /** Whether embeddings are rows of vectors per input (token-level pooling). */
  public boolean multiVector() {
    return multiVector;
  }

  public float[] scorePairs(String[] queries, String[] documents) {
    if (queries.length != documents.length) {
      throw new IllegalArgumentException("queries and documents differ in length");
    }
    Input[] in = new Input[queries.length];
    for (int i = 0; i < in.length; ++i) in[i] = Input.pair(queries[i], documents[i]);
    return score(in, false);
  }

  public float[] score(Input[] inputs, boolean truncate) {
    return (float[]) run(SCORE, inputs, truncate, -1, 0)[0];
  }

  /**
   * Per input, its rows of vectors (one row unless multiVector()). normalize: -1 the model's
   * default, 0 off, 1 on; dimensions: Matryoshka, 0 = all.
   */
  public float[][][] embed(Input[] inputs, int normalize, int dimensions, boolean truncate) {
    Object[] r = run(EMBED, inputs, truncate, normalize, dimensions);
    float[][] flat = (float[][]) r[0];
    int[] rows = (int[]) r[1];
    float[][][] out = new float[flat.length][][];
    for (int i = 0; i < flat.length; ++i) {
      int dim = rows[i] > 0 ? flat[i].length / rows[i] : 0;
      out[i] = new float[rows[i]][];
      for (int k = 0; k < rows[i]; ++k) {
        out[i][k] = java.util.Arrays.copyOfRange(flat[i], k * dim, (k + 1) * dim);
      }
    }
    return out;
  }

  public Classification[] classify(Input[] inputs, boolean truncate) {
    Object[] r = run(CLASSIFY, inputs, truncate, -1, 0);
    float[][] probs = (float[][]) r[0];
    float[][] logits = (float[][]) r[1];
    int[] best = (int[]) r[2];
    int[][] over = (int[][]) r[3];
    Classification[] out = new Classification[probs.length];
    for (int i = 0; i < out.length; ++i) {
      String[] names = new String[over[i].length];
      for (int k = 0; k < names.length; ++k) names[k] = labelName(over[i][k]);
      out[i] = new Classification(best[i], labelName(best[i]), probs[i], logits[i], names);
    }
    return out;
  }

  public Tokens tokenize(String text, String pair, boolean addSpecialTokens) {
    lock.readLock().lock();
    try {
      Object[] r =
          nativeTokenize(
              open(),
              text.getBytes(StandardCharsets.UTF_8),
              pair == null ? null : pair.getBytes(StandardCharsets.UTF_8),
              addSpecialTokens);
      byte[][] raw = (byte[][]) r[2];
      String[] tokens = new String[raw.length];
      for (int i = 0; i < raw.length; ++i) tokens[i] = new String(raw[i], StandardCharsets.UTF_8);
      return new Tokens((int[]) r[0], (int[]) r[1], tokens, (int[]) r[3]);
    } finally {
      lock.readLock().unlock();
    }
  }

  @Override
  public void close() {
    lock.writeLock().lock();
    try {
      if (handle != 0) nativeFree(handle);
      handle = 0;
    } finally {
      lock.writeLock().unlock();
    }
  }

  private String labelName(int k) {
    return k >= 0 && k < labels.length ? labels[k] : Integer.toString(k);
  }

  private long open() {
    if (handle == 0) throw new IllegalStateException("the model is closed");
    return handle;
  }

  private Object[] run(int kind, Input[] inputs, boolean truncate, int normalize, int dims) {
    int n = inputs.length;
    byte[][] texts = new byte[n][];
    byte[][] pairs = new byte[n][];
    int[][] ids = new int[n][];
    int[][] types = new int[n][];
    for (int i = 0; i < n; ++i) {
      texts[i] = inputs[i].text;
      pairs[i] = inputs[i].pair;
      ids[i] = inputs[i].ids;
      types[i] = inputs[i].typeIds;
    }
    lock.readLock().lock();
    try {
      return nativeRun(open(), kind, texts, pairs, ids, types, truncate, normalize, dims);
    } finally {
      lock.readLock().unlock();
    }
  }

  private static native int nativeApiVersion();

  private static native long nativeLoad(
      String dir, String task, String dtype, String device, int threads, long maxBatchTokens,
      int maxNumSeqs);

  private static native void nativeFree(long handle);

  /** {task, labels (String[]), multiVector (Boolean)}. */
  private static native Object[] nativeInfo(long handle);

  /**
   * score: {float[]}; embed: {float[][] values, int[] rows}; classify: {float[][] probs,
   * float[][] logits, int[] best, int[][] over threshold}.
   */
  private static native Object[] nativeRun(
      long handle, int kind, byte[][] texts, byte[][] pairs, int[][] ids, int[][] types,
      boolean truncate, int normalize, int dimensions);

  /** {int[] ids, int[] typeIds, byte[][] tokens, int[] offsets}. */
  private static native Object[] nativeTokenize(
      long handle, byte[] text, byte[] pair, boolean addSpecialTokens);
}
