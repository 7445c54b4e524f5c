/* Scores query/document pairs in-process with sluice's C API (docs/c-api.md).
 *
 *   cc score_pairs.c $(pkg-config --cflags --libs sluice) -o score_pairs
 *   ./score_pairs models/demo-reranker "How do salmon swim up the river?" \
 *       "Salmon swim up the cold river every spring." "Traders sell shares at the busy market."
 *
 * Prints one line per document: its score (%.9g, as `sluice score` writes it) and the text. */
#include <sluice/sluice.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL_DIR QUERY DOCUMENT...\n", argv[0]);
    return 2;
  }
  sluice_load_options options;
  sluice_load_options_init(&options);
  options.threads = 2;
  sluice_model* model;
  if (sluice_model_load(argv[1], &options, &model) != SLUICE_OK) {
    fprintf(stderr, "error: %s\n", sluice_last_error());
    return 1;
  }
  const size_t n = (size_t)argc - 3;
  const char** queries = malloc(n * sizeof *queries);
  float* scores = malloc(n * sizeof *scores);
  for (size_t i = 0; i < n; ++i) queries[i] = argv[2];
  int rc = 0;
  if (sluice_score_pairs(model, queries, (const char* const*)argv + 3, n, scores) != SLUICE_OK) {
    fprintf(stderr, "error: %s\n", sluice_last_error());
    rc = 1;
  } else {
    for (size_t i = 0; i < n; ++i) printf("%.9g\t%s\n", (double)scores[i], argv[3 + i]);
  }
  free(queries);
  free(scores);
  sluice_model_free(model);
  return rc;
}
