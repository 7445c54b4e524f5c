/* capi_unit DEMO_RERANKER_DIR FIXTURE_MODELS_DIR: the contracts of include/sluice/sluice.h
 * that parity.py does not cover: versions, error codes and messages, NULL arguments,
 * ownership, option fields, tokenize, and one model used from several threads at once. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sluice.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              sluice_last_error());                                                            \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

#define CHECK_STATUS(expr, want)                                                               \
  do {                                                                                         \
    int got_ = (expr);                                                                         \
    if (got_ != (want)) {                                                                      \
      fprintf(stderr, "%s:%d: %s = %s, want %s (last error: %s)\n", __FILE__, __LINE__, #expr, \
              sluice_status_name(got_), sluice_status_name(want), sluice_last_error());        \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

static int contains(const char* s, const char* part) { return strstr(s, part) != NULL; }

static const char* kQueries[] = {"what do bees make?", "where is the mill?", "what do bees make?",
                                 "who?"};
static const char* kDocs[] = {"Bees make honey in the hive.", "The old mill stands by the river.",
                              "The river runs past the old mill.", ""};
enum { kPairs = 4 };

static sluice_model* load(const char* dir, const char* task) {
  sluice_load_options o;
  sluice_load_options_init(&o);
  o.task = task;
  o.threads = 2;
  sluice_model* m = NULL;
  CHECK_STATUS(sluice_model_load(dir, &o, &m), SLUICE_OK);
  CHECK(m != NULL);
  return m;
}

static void test_versions_and_load_errors(const char* demo) {
  CHECK(sluice_api_version() == SLUICE_API_VERSION);
  CHECK(strlen(sluice_version()) > 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERROR_OUT_OF_RANGE), "SLUICE_ERROR_OUT_OF_RANGE") == 0);
  CHECK(strcmp(sluice_status_name(1234), "SLUICE_ERROR_UNKNOWN") == 0);

  sluice_model* m = (sluice_model*)&m;  // must be reset to NULL on failure
  CHECK_STATUS(sluice_model_load("/nonexistent/model-dir", NULL, &m), SLUICE_ERROR_NOT_FOUND);
  CHECK(m == NULL);
  CHECK(contains(sluice_last_error(), "/nonexistent/model-dir"));
  CHECK_STATUS(sluice_model_load(NULL, NULL, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_model_load(demo, NULL, NULL), SLUICE_ERROR_INVALID_ARGUMENT);

  sluice_load_options o;
  memset(&o, 0, sizeof o);  // api_version 0: not initialised
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_VERSION);
  CHECK(contains(sluice_last_error(), "sluice_load_options_init"));
  sluice_load_options_init(&o);
  o.api_version = 2000;  // another major version
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_VERSION);
  CHECK(contains(sluice_last_error(), "2.0"));
  o.api_version = SLUICE_API_VERSION + 1;  // a newer minor version
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_VERSION);

  sluice_load_options_init(&o);
  o.dtype = "float8";
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "float8"));
  sluice_load_options_init(&o);
  o.device = "tpu";
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "tpu"));
  sluice_load_options_init(&o);
  o.device = "cuda:x";
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  sluice_load_options_init(&o);
  o.task = "generate";
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  sluice_load_options_init(&o);
  o.threads = -1;
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "threads"));
  sluice_load_options_init(&o);
  o.max_batch_tokens = -5;
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(m == NULL);

  sluice_model_free(NULL);
  sluice_result_free(NULL);
  sluice_tokens_free(NULL);
  CHECK(sluice_result_count(NULL) == 0);
  CHECK(sluice_tokens_count(NULL) == 0);
}

static void test_demo_scoring(const char* demo) {
  sluice_model* m = load(demo, NULL);  // the architecture's default task: score
  if (!m) return;
  CHECK(strcmp(sluice_last_error(), "") == 0);  // a successful call clears the error
  sluice_model_info info;
  CHECK_STATUS(sluice_model_get_info(m, &info), SLUICE_OK);
  CHECK(strcmp(info.task, "score") == 0);
  CHECK(strcmp(info.architecture, "BertForSequenceClassification") == 0);
  CHECK(strcmp(info.dtype, "float32") == 0);
  CHECK(info.has_tokenizer == 1);
  CHECK(info.max_sequence_length == 256);
  CHECK(info.multi_vector == 0);
  CHECK_STATUS(sluice_model_get_info(m, NULL), SLUICE_ERROR_INVALID_ARGUMENT);

  // The demo model scores a document by whether it holds the query's key terms.
  const char* q2[] = {"How do salmon swim up the river?", "How do salmon swim up the river?"};
  const char* d2[] = {"Salmon swim up the cold river every spring.",
                      "Traders sell shares at the busy market."};
  float rel[2];
  CHECK_STATUS(sluice_score_pairs(m, q2, d2, 2, rel), SLUICE_OK);
  CHECK(rel[0] > 0.9f && rel[1] < 0.1f);

  float s[kPairs], s2[kPairs];
  CHECK_STATUS(sluice_score_pairs(m, kQueries, kDocs, kPairs, s), SLUICE_OK);
  for (int i = 0; i < kPairs; ++i) CHECK(s[i] > 0.0f && s[i] < 1.0f);  // sigmoid scores
  CHECK(s[0] != s[2]);  // different documents score differently

  // The same pairs as sluice_input text pairs, and as the token ids of sluice_tokenize.
  sluice_input in[kPairs];
  memset(in, 0, sizeof in);
  sluice_tokens* toks[kPairs];
  for (int i = 0; i < kPairs; ++i) {
    in[i].text = kQueries[i];
    in[i].text_pair = kDocs[i];
  }
  CHECK_STATUS(sluice_score(m, in, kPairs, NULL, s2), SLUICE_OK);
  CHECK(memcmp(s, s2, sizeof s) == 0);
  for (int i = 0; i < kPairs; ++i) {
    CHECK_STATUS(sluice_tokenize(m, kQueries[i], kDocs[i], 1, &toks[i]), SLUICE_OK);
    memset(&in[i], 0, sizeof in[i]);
    in[i].ids = sluice_tokens_ids(toks[i]);
    in[i].type_ids = sluice_tokens_type_ids(toks[i]);
    in[i].num_ids = sluice_tokens_count(toks[i]);
  }
  CHECK_STATUS(sluice_score(m, in, kPairs, NULL, s2), SLUICE_OK);
  CHECK(memcmp(s, s2, sizeof s) == 0);
  // Tokens: [CLS] first, offsets inside their texts, type ids 0 then 1.
  sluice_tokens* t = toks[0];
  size_t n = sluice_tokens_count(t);
  CHECK(n > 4);
  CHECK(strcmp(sluice_tokens_token(t, 0), "[CLS]") == 0);
  CHECK(sluice_tokens_token(t, n) == NULL);
  CHECK(sluice_tokens_type_ids(t)[0] == 0 && sluice_tokens_type_ids(t)[n - 1] == 1);
  const uint32_t* off = sluice_tokens_offsets(t);
  for (size_t k = 0; k < n; ++k) CHECK(off[2 * k] <= off[2 * k + 1] && off[2 * k + 1] <= 64);
  for (int i = 0; i < kPairs; ++i) sluice_tokens_free(toks[i]);
  sluice_tokens* bare;
  CHECK_STATUS(sluice_tokenize(m, "bees", NULL, 0, &bare), SLUICE_OK);
  CHECK(sluice_tokens_count(bare) >= 1 && strcmp(sluice_tokens_token(bare, 0), "[CLS]") != 0);
  sluice_tokens_free(bare);
  CHECK_STATUS(sluice_tokenize(m, NULL, NULL, 1, &bare), SLUICE_ERROR_INVALID_ARGUMENT);

  // Input errors.
  sluice_input bad;
  memset(&bad, 0, sizeof bad);
  int32_t ids[3] = {2, 100000000, 3};
  bad.ids = ids;
  bad.num_ids = 3;
  CHECK_STATUS(sluice_score(m, &bad, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  bad.text = "both";
  CHECK_STATUS(sluice_score(m, &bad, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "input 0"));
  memset(&bad, 0, sizeof bad);
  bad.num_ids = 2;  // ids NULL
  CHECK_STATUS(sluice_score(m, &bad, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  memset(&bad, 0, sizeof bad);
  bad.text_pair = "no first text";
  CHECK_STATUS(sluice_score(m, &bad, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_score(m, NULL, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_score(m, in, 1, NULL, NULL), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_score(NULL, in, 1, NULL, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_score(m, NULL, 0, NULL, NULL), SLUICE_OK);  // nothing to score

  // Over-long text pair: refused, or cut when truncate is set.
  char* longdoc = malloc(20000);
  longdoc[0] = 0;
  for (int i = 0; i < 500; ++i) strcat(longdoc, "bees fly ");
  memset(&bad, 0, sizeof bad);
  bad.text = "long?";
  bad.text_pair = longdoc;
  CHECK_STATUS(sluice_score(m, &bad, 1, NULL, s2), SLUICE_ERROR_OUT_OF_RANGE);
  CHECK(contains(sluice_last_error(), "sluice_run_options.truncate"));
  sluice_run_options ro;
  sluice_run_options_init(&ro);
  ro.truncate = 1;
  CHECK_STATUS(sluice_score(m, &bad, 1, &ro, s2), SLUICE_OK);
  CHECK(s2[0] > 0.0f && s2[0] < 1.0f);
  free(longdoc);
  ro.truncate = 2;
  CHECK_STATUS(sluice_score(m, in, 1, &ro, s2), SLUICE_ERROR_INVALID_ARGUMENT);
  sluice_run_options_init(&ro);
  ro.api_version = 0;
  CHECK_STATUS(sluice_score(m, in, 1, &ro, s2), SLUICE_ERROR_VERSION);
  sluice_run_options_init(&ro);
  ro.dimensions = 8;
  sluice_result* r = (sluice_result*)&r;
  CHECK_STATUS(sluice_embed(m, in, 1, NULL, &r), SLUICE_ERROR_FAILED_PRECONDITION);
  CHECK(r == NULL);
  CHECK(contains(sluice_last_error(), "task embed"));
  CHECK_STATUS(sluice_classify(m, in, 1, NULL, &r), SLUICE_ERROR_FAILED_PRECONDITION);
  sluice_model_free(m);
}

typedef struct {
  sluice_model* m;
  const float* want;
  int mismatches;
  int errors;
} thread_arg;

enum { kThreadPairs = 48, kThreads = 4, kRounds = 4 };
static const char* tq[kThreadPairs];
static const char* td[kThreadPairs];

static void* score_thread(void* p) {
  thread_arg* a = p;
  float s[kThreadPairs];
  for (int r = 0; r < kRounds; ++r) {
    if (sluice_score_pairs(a->m, tq, td, kThreadPairs, s) != SLUICE_OK) ++a->errors;
    if (memcmp(s, a->want, sizeof s) != 0) ++a->mismatches;
    /* errors are per thread: a bad call here leaves the other threads' messages alone */
    if (sluice_score_pairs(a->m, tq, NULL, 1, s) != SLUICE_ERROR_INVALID_ARGUMENT) ++a->errors;
  }
  return NULL;
}

static void test_threads(const char* demo) {
  sluice_model* m = load(demo, "score");
  if (!m) return;
  static char buf[kThreadPairs][96];
  for (int i = 0; i < kThreadPairs; ++i) {
    snprintf(buf[i], sizeof buf[i], "document %d: bees and the mill by the river, %d times", i,
             i * 7 % 13);
    tq[i] = kQueries[i % kPairs];
    td[i] = buf[i];
  }
  float want[kThreadPairs];
  CHECK_STATUS(sluice_score_pairs(m, tq, td, kThreadPairs, want), SLUICE_OK);
  pthread_t th[kThreads];
  thread_arg args[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    args[i] = (thread_arg){m, want, 0, 0};
    pthread_create(&th[i], NULL, score_thread, &args[i]);
  }
  for (int i = 0; i < kThreads; ++i) {
    pthread_join(th[i], NULL);
    CHECK(args[i].errors == 0);
    CHECK(args[i].mismatches == 0);
  }
  sluice_model_free(m);
}

static double norm(const float* v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (double)v[i] * v[i];
  return sqrt(s);
}

static void test_embed_and_classify(const char* fixtures) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/bert_st_mean_dense", fixtures);
  sluice_model* m = load(dir, "embed");
  if (!m) return;
  int32_t ids[2][6] = {{2, 40, 41, 42, 43, 3}, {2, 50, 3, 0, 0, 0}};
  sluice_input in[2];
  memset(in, 0, sizeof in);
  in[0].ids = ids[0];
  in[0].num_ids = 6;
  in[1].ids = ids[1];
  in[1].num_ids = 3;
  sluice_result *r, *raw;
  CHECK_STATUS(sluice_embed(m, in, 2, NULL, &r), SLUICE_OK);
  sluice_run_options ro;
  sluice_run_options_init(&ro);
  ro.normalize = 0;
  CHECK_STATUS(sluice_embed(m, in, 2, &ro, &raw), SLUICE_OK);
  CHECK(sluice_result_count(r) == 2);
  size_t rows, dim, rows2, dim2;
  const float* v = sluice_result_values(r, 0, &rows, &dim);
  const float* w = sluice_result_values(raw, 0, &rows2, &dim2);
  CHECK(rows == 1 && dim > 0 && rows2 == 1 && dim2 == dim);
  CHECK(fabs(norm(v, dim) - 1.0) < 1e-5);  // normalised by default
  CHECK(fabs(norm(w, dim) - 1.0) > 1e-3);  // normalize = 0: as the model computes it
  CHECK(fabs(v[0] - w[0] / norm(w, dim)) < 1e-5);
  CHECK(sluice_result_values(r, 2, &rows, &dim) == NULL && rows == 0);
  CHECK(sluice_result_logits(r, 0, &rows) == NULL);
  CHECK(sluice_result_label(r, 0) == -1);
  sluice_result_free(r);
  sluice_result_free(raw);
  ro.normalize = 1;
  ro.dimensions = 4;  // not a Matryoshka model
  CHECK_STATUS(sluice_embed(m, in, 2, &ro, &r), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "dimensions"));
  ro.dimensions = 0;
  ro.normalize = 3;
  CHECK_STATUS(sluice_embed(m, in, 2, &ro, &r), SLUICE_ERROR_INVALID_ARGUMENT);
  in[0].text = "no tokenizer";
  in[0].ids = NULL;
  in[0].num_ids = 0;
  CHECK_STATUS(sluice_embed(m, in, 1, NULL, &r), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(contains(sluice_last_error(), "tokenizer"));
  sluice_tokens* t;
  CHECK_STATUS(sluice_tokenize(m, "x", NULL, 1, &t), SLUICE_ERROR_FAILED_PRECONDITION);
  sluice_model_free(m);

  snprintf(dir, sizeof dir, "%s/bert_classifier3", fixtures);
  m = load(dir, "classify");
  if (!m) return;
  sluice_model_info info;
  CHECK_STATUS(sluice_model_get_info(m, &info), SLUICE_OK);
  CHECK(strcmp(info.task, "classify") == 0 && info.num_labels == 3 && info.output_dim == 3);
  CHECK(sluice_model_label(m, 0) != NULL && sluice_model_label(m, 3) == NULL);
  in[0].text = NULL;
  in[0].ids = ids[0];
  in[0].num_ids = 6;
  CHECK_STATUS(sluice_classify(m, in, 2, NULL, &r), SLUICE_OK);
  for (size_t i = 0; i < 2; ++i) {
    const float* p = sluice_result_values(r, i, &rows, &dim);
    size_t nl;
    const float* lg = sluice_result_logits(r, i, &nl);
    CHECK(rows == 1 && dim == 3 && nl == 3 && lg != NULL);
    int32_t best = sluice_result_label(r, i);
    CHECK(best >= 0 && best < 3);
    double sum = 0;
    for (size_t k = 0; k < dim; ++k) {
      sum += p[k];
      CHECK(p[k] <= p[best]);
      CHECK(lg[k] <= lg[best]);
    }
    CHECK(fabs(sum - 1.0) < 1e-5);  // softmax
    size_t nover = 7;
    sluice_result_labels_over_threshold(r, i, &nover);
    CHECK(nover == 0);  // no thresholds in this model
  }
  sluice_result_free(r);
  float s;
  CHECK_STATUS(sluice_score(m, in, 1, NULL, &s), SLUICE_ERROR_FAILED_PRECONDITION);
  sluice_model_free(m);
}

/* dtype "int8": reported as such, scores near the float32 ones but not identical to them (a
 * silent float32 fallback would be exact), the demo's relevant pair still on top. */
static void test_int8(const char* demo) {
  sluice_load_options o;
  sluice_load_options_init(&o);
  o.dtype = "int8";
  o.threads = 2;
  sluice_model* m = NULL;
  CHECK_STATUS(sluice_model_load(demo, &o, &m), SLUICE_OK);
  if (!m) return;
  sluice_model_info info;
  CHECK_STATUS(sluice_model_get_info(m, &info), SLUICE_OK);
  CHECK(strcmp(info.dtype, "int8") == 0);
  sluice_model* f = load(demo, NULL);
  if (!f) {
    sluice_model_free(m);
    return;
  }
  float s8[kPairs], s32[kPairs];
  CHECK_STATUS(sluice_score_pairs(m, kQueries, kDocs, kPairs, s8), SLUICE_OK);
  CHECK_STATUS(sluice_score_pairs(f, kQueries, kDocs, kPairs, s32), SLUICE_OK);
  double worst = 0;
  for (int i = 0; i < kPairs; ++i) {
    const double d = fabs((double)s8[i] - s32[i]);
    if (d > worst) worst = d;
  }
  CHECK(worst <= 1e-2);
  CHECK(worst > 0);
  const char* q2[] = {"How do salmon swim up the river?", "How do salmon swim up the river?"};
  const char* d2[] = {"Salmon swim up the cold river every spring.",
                      "Traders sell shares at the busy market."};
  float rel[2];
  CHECK_STATUS(sluice_score_pairs(m, q2, d2, 2, rel), SLUICE_OK);
  CHECK(rel[0] > 0.9f && rel[1] < 0.1f);
  sluice_model_free(f);
  sluice_model_free(m);
}

/* Token type ids: a model without token types (RoBERTa, type_vocab_size 1) takes zeros, which
   change nothing, and refuses any other type instead of ignoring it. */
static void test_type_ids_without_token_types(const char* fixtures) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/roberta_st_max", fixtures);
  sluice_model* m = load(dir, "embed");
  if (!m) return;
  int32_t ids[4] = {0, 40, 41, 2};
  int32_t zeros[4] = {0, 0, 0, 0};
  int32_t ones[4] = {0, 0, 1, 1};
  sluice_input in;
  memset(&in, 0, sizeof in);
  in.ids = ids;
  in.num_ids = 4;
  sluice_result *plain, *typed, *bad = NULL;
  CHECK_STATUS(sluice_embed(m, &in, 1, NULL, &plain), SLUICE_OK);
  in.type_ids = zeros;
  CHECK_STATUS(sluice_embed(m, &in, 1, NULL, &typed), SLUICE_OK);
  size_t r1, d1, r2, d2;
  const float* a = sluice_result_values(plain, 0, &r1, &d1);
  const float* b = sluice_result_values(typed, 0, &r2, &d2);
  CHECK(a && b && r1 == r2 && d1 == d2 && memcmp(a, b, d1 * sizeof(float)) == 0);
  in.type_ids = ones;
  CHECK_STATUS(sluice_embed(m, &in, 1, NULL, &bad), SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(bad == NULL);
  CHECK(strstr(sluice_last_error(), "token type id 1 at position 2") != NULL);
  sluice_result_free(plain);
  sluice_result_free(typed);
  sluice_model_free(m);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s DEMO_RERANKER_DIR FIXTURE_MODELS_DIR\n", argv[0]);
    return 2;
  }
  test_versions_and_load_errors(argv[1]);
  test_demo_scoring(argv[1]);
  test_int8(argv[1]);
  test_threads(argv[1]);
  test_embed_and_classify(argv[2]);
  test_type_ids_without_token_types(argv[2]);
  if (failures) {
    fprintf(stderr, "capi_unit: %d checks failed\n", failures);
    return 1;
  }
  printf("capi_unit: all checks passed\n");
  return 0;
}
