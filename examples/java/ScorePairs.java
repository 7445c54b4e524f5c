// Scores query/document pairs in-process through sluice's C API over JNI (docs/c-api.md).
//
//   javac -cp build/release/bindings/java/sluice.jar -d /tmp examples/java/ScorePairs.java
//   java -Djava.library.path=build/release/bindings/java \
//       -cp build/release/bindings/java/sluice.jar:/tmp ScorePairs models/demo-reranker \
//       "How do salmon swim up the river?" "Salmon swim up the cold river every spring." \
//       "Traders sell shares at the busy market."
import sluice.LoadOptions;
import sluice.Model;

public final class ScorePairs {
  public static void main(String[] args) {
    if (args.length < 3) {
      System.err.println("usage: ScorePairs MODEL_DIR QUERY DOCUMENT...");
      System.exit(2);
    }
    String[] docs = java.util.Arrays.copyOfRange(args, 2, args.length);
    String[] queries = new String[docs.length];
    java.util.Arrays.fill(queries, args[1]);
    try (Model model = Model.load(args[0], new LoadOptions().threads(2))) {
      float[] scores = model.scorePairs(queries, docs);
      for (int i = 0; i < docs.length; ++i) {
        System.out.println(String.format("%.9g", scores[i]) + "\t" + docs[i]);
      }
    }
  }
}
