// The Java client of tests/capi/parity.py (same job file and output as capi_parity_client.c),
// through the JNI binding (bindings/java). Checks first that errors arrive as SluiceException
// with the C API's code, and that a closed model refuses calls.
import java.io.BufferedReader;
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import sluice.Classification;
import sluice.LoadOptions;
import sluice.Model;
import sluice.SluiceException;
import sluice.Tokens;

public final class ParityClient {
  private static final StringBuilder out = new StringBuilder();

  private static String hex(float f) {
    return String.format("%08x", Float.floatToRawIntBits(f));
  }

  private static String unhex(String h) {
    if (h.equals("-")) return "";
    byte[] b = new byte[h.length() / 2];
    for (int i = 0; i < b.length; ++i) {
      b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
    }
    return new String(b, StandardCharsets.UTF_8);
  }

  private static String hexString(String s) {
    if (s.isEmpty()) return "-";
    StringBuilder sb = new StringBuilder();
    for (byte b : s.getBytes(StandardCharsets.UTF_8)) sb.append(String.format("%02x", b & 0xff));
    return sb.toString();
  }

  private static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  private static void selfTest(String anyModel) {
    check(Model.apiVersion() == 1000, "api version " + Model.apiVersion());
    try {
      Model.load("/nonexistent/model-dir", null);
      check(false, "loading a missing directory must fail");
    } catch (SluiceException e) {
      check(e.code() == 2 && e.status().equals("NOT_FOUND"), "code " + e.code());
      check(e.getMessage().contains("/nonexistent/model-dir"), e.getMessage());
    }
    LoadOptions bad = new LoadOptions();
    bad.dtype = "float8";
    try {
      Model.load(anyModel, bad);
      check(false, "dtype float8 must fail");
    } catch (SluiceException e) {
      check(e.code() == 1, "code " + e.code());
    }
    Model m = Model.load(anyModel, new LoadOptions().threads(2));
    m.close();
    m.close();  // twice is fine
    try {
      m.score(new Model.Input[0], false);
      check(false, "a closed model must refuse calls");
    } catch (IllegalStateException e) {
      // expected
    }
  }

  private static void run(int job, String model, String task, String device, int threads,
                          boolean truncate,
                          int normalize, int dimensions, List<Model.Input> inputs) {
    LoadOptions o = new LoadOptions().task(task).threads(threads);
    o.device = device;
    try (Model m = Model.load(model, o)) {
      Model.Input[] in = inputs.toArray(new Model.Input[0]);
      if (task.equals("score")) {
        float[] s = m.score(in, truncate);
        for (int i = 0; i < s.length; ++i) {
          out.append("V ").append(job).append(' ').append(i).append(" 1 1 ").append(hex(s[i]))
              .append('\n');
        }
      } else if (task.equals("embed")) {
        float[][][] e = m.embed(in, normalize, dimensions, truncate);
        for (int i = 0; i < e.length; ++i) {
          int dim = e[i].length > 0 ? e[i][0].length : 0;
          out.append("V ").append(job).append(' ').append(i).append(' ').append(e[i].length)
              .append(' ').append(dim);
          for (float[] row : e[i]) for (float v : row) out.append(' ').append(hex(v));
          out.append('\n');
        }
      } else {
        Classification[] c = m.classify(in, truncate);
        for (int i = 0; i < c.length; ++i) {
          out.append("V ").append(job).append(' ').append(i).append(" 1 ")
              .append(c[i].probs.length);
          for (float v : c[i].probs) out.append(' ').append(hex(v));
          out.append("\nL ").append(job).append(' ').append(i).append(' ')
              .append(hexString(c[i].label));
          for (float v : c[i].logits) out.append(' ').append(hex(v));
          out.append("\nT ").append(job).append(' ').append(i);
          for (String l : c[i].labels) out.append(' ').append(hexString(l));
          out.append('\n');
        }
      }
    }
  }

  private static final List<String[]> toks = new ArrayList<>();

  private static void tokenize(String model) {
    try (Model m = Model.load(model, null)) {
      for (int i = 0; i < toks.size(); ++i) {
        String[] t = toks.get(i);
        Tokens k =
            m.tokenize(unhex(t[0]), t[1].equals("~") ? null : unhex(t[1]), t[2].equals("1"));
        out.append("K ").append(i).append(' ').append(k.ids.length);
        for (int v : k.ids) out.append(' ').append(v);
        for (int v : k.typeIds) out.append(' ').append(v);
        for (int v : k.offsets) out.append(' ').append(v);
        out.append('\n');
      }
    }
    toks.clear();
  }

  public static void main(String[] args) throws Exception {
    String model = null, task = null, device = "cpu";
    int threads = 0, normalize = -1, dimensions = 0, job = 0;
    boolean truncate = false, tested = false;
    List<Model.Input> inputs = new ArrayList<>();
    try (BufferedReader r = new BufferedReader(new FileReader(args[0], StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        String[] p = line.split(" ");
        switch (p[0]) {
          case "model":
            model = line.substring(6);
            if (!tested) selfTest(model);
            tested = true;
            break;
          case "task":
            task = p[1];
            break;
          case "device":
            device = p[1];
            break;
          case "threads":
            threads = Integer.parseInt(p[1]);
            break;
          case "truncate":
            truncate = p[1].equals("1");
            break;
          case "normalize":
            normalize = Integer.parseInt(p[1]);
            break;
          case "dimensions":
            dimensions = Integer.parseInt(p[1]);
            break;
          case "ids": {
            int n = Integer.parseInt(p[1]);
            int[] ids = new int[n];
            for (int k = 0; k < n; ++k) ids[k] = Integer.parseInt(p[2 + k]);
            int nt = Integer.parseInt(p[2 + n]);
            int[] types = nt > 0 ? new int[nt] : null;
            for (int k = 0; k < nt; ++k) types[k] = Integer.parseInt(p[3 + n + k]);
            inputs.add(Model.Input.ids(ids, types));
            break;
          }
          case "text":
            inputs.add(Model.Input.text(unhex(p[1])));
            break;
          case "pair":
            inputs.add(Model.Input.pair(unhex(p[1]), unhex(p[2])));
            break;
          case "tok":
            toks.add(new String[] {p[1], p[2], p[3]});
            break;
          case "run":
            if (task.equals("tokenize")) {
              tokenize(model);
              break;
            }
            run(job++, model, task, device, threads, truncate, normalize, dimensions, inputs);
            inputs.clear();
            break;
          default:
            if (!line.isEmpty()) throw new IllegalArgumentException("bad job line: " + line);
        }
      }
    }
    System.out.print(out);
  }
}
