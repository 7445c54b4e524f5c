/* sluice in-process C API (libsluice.so / libsluice.a; pkg-config sluice).
 *
 * Loads a Hugging Face model directory into the calling process and scores pairs
 * (cross-encoders, rerankers), embeds, classifies and tokenizes, with exactly the results
 * of the offline CLI (`sluice score|embed|classify`): both run the same code path
 * (src/io/offline.h). docs/c-api.md is the reference; the contracts in short:
 *
 * - Errors: every function that can fail returns a sluice_status (SLUICE_OK = 0). The
 *   message of the calling thread's last failed call is sluice_last_error(); a call that
 *   succeeds clears it. No C++ exception crosses this boundary.
 * - Ownership: objects returned through an out-parameter (sluice_model, sluice_result,
 *   sluice_tokens) belong to the caller and are released with their _free function (NULL
 *   is accepted). Pointers read from an object stay valid until it is freed. Strings and
 *   arrays passed in are only read during the call.
 * - Threads: a sluice_model may be used from any number of threads at once; calls on one
 *   model are serialised (each runs on the model's own threads), calls on different models
 *   run in parallel. sluice_model_free must not race with other calls on the same model.
 *   sluice_result and sluice_tokens are immutable: read them from any thread.
 * - Versions: SLUICE_API_VERSION is the version this header describes; sluice_api_version()
 *   the version of the library loaded. Options structs carry the caller's api_version
 *   (set by sluice_*_options_init); a library refuses a major version other than its own or
 *   a newer minor version (SLUICE_ERROR_VERSION).
 */
#ifndef SLUICE_SLUICE_H_
#define SLUICE_SLUICE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define SLUICE_API __attribute__((visibility("default")))
#else
#define SLUICE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------ */

#define SLUICE_API_VERSION_MAJOR 1
#define SLUICE_API_VERSION_MINOR 0
/* major * 1000 + minor. The major version changes with any incompatible change to this
 * header's functions or structs (and is libsluice.so's SONAME version); the minor version
 * when functions or trailing struct fields are added. */
#define SLUICE_API_VERSION (SLUICE_API_VERSION_MAJOR * 1000 + SLUICE_API_VERSION_MINOR)

/* SLUICE_API_VERSION of the library loaded. */
SLUICE_API uint32_t sluice_api_version(void);
/* The library's release and build, e.g. "0.1.0 (Release, CPU only)". Static storage. */
SLUICE_API const char* sluice_version(void);

/* ---- errors -------------------------------------------------------------------------- */

typedef enum sluice_status {
  SLUICE_OK = 0,
  SLUICE_ERROR_INVALID_ARGUMENT = 1,    /* bad input: argument, option, text, token id */
  SLUICE_ERROR_NOT_FOUND = 2,           /* missing model directory, file or tensor */
  SLUICE_ERROR_FAILED_PRECONDITION = 3, /* the model cannot do what is asked (e.g. its task) */
  SLUICE_ERROR_OUT_OF_RANGE = 4,        /* an input longer than the model's limit */
  SLUICE_ERROR_RESOURCE_EXHAUSTED = 5,  /* out of memory */
  SLUICE_ERROR_UNAVAILABLE = 6,         /* e.g. device not available */
  SLUICE_ERROR_UNSUPPORTED = 7,         /* a known format or feature sluice refuses */
  SLUICE_ERROR_INTERNAL = 8,            /* a bug in sluice */
  SLUICE_ERROR_VERSION = 9              /* options of an incompatible api_version */
} sluice_status;

/* The calling thread's last error message ("" after a successful call). Thread-local
 * storage: valid until this thread's next sluice call. Never NULL. */
SLUICE_API const char* sluice_last_error(void);
/* "SLUICE_OK", "SLUICE_ERROR_INVALID_ARGUMENT", ...; "SLUICE_ERROR_UNKNOWN" otherwise. */
SLUICE_API const char* sluice_status_name(int status);

/* ---- models -------------------------------------------------------------------------- */

typedef struct sluice_model sluice_model;

typedef struct sluice_load_options {
  uint32_t api_version;     /* SLUICE_API_VERSION the caller was built with */
  const char* dtype;        /* NULL/"auto" (the checkpoint's), "float32", "bfloat16", "float16",
                             * "int8" (CPU: linear layers int8 per-channel, activations
                             * quantised per token; the rest f32) */
  const char* device;       /* NULL/"cpu", "cuda", "cuda:N" (CUDA builds) */
  const char* task;         /* NULL (the architecture's default), "embed", "classify", "score" */
  int32_t threads;          /* CPU threads; 0 = all cores the process may use */
  int64_t max_batch_tokens; /* token budget of one packed batch; 0 = device default */
  int32_t max_num_seqs;     /* sequences per batch at most; 0 = device default */
} sluice_load_options;

static inline void sluice_load_options_init(sluice_load_options* o) {
  memset(o, 0, sizeof *o);
  o->api_version = SLUICE_API_VERSION;
}

/* Loads `model_dir` (config.json, *.safetensors, tokenizer.json, ...). options: NULL =
 * defaults. On success *out is a new model; on failure *out is NULL. */
SLUICE_API sluice_status sluice_model_load(const char* model_dir,
                                           const sluice_load_options* options, sluice_model** out);
SLUICE_API void sluice_model_free(sluice_model* model);

typedef struct sluice_model_info {
  const char* task;            /* "embed", "classify", "score" or "token-classify" */
  const char* architecture;    /* config.json architectures[0] */
  const char* dtype;           /* compute dtype: "float32", "bfloat16", "float16", "int8" */
  const char* device;          /* the backend, as the CLI logs it */
  int32_t output_dim;          /* embed: vector size; classify/score: number of outputs */
  int32_t num_labels;          /* labels named by the head (sluice_model_label) */
  int32_t max_sequence_length; /* tokens per input at most (0: no limit known) */
  int32_t has_tokenizer;       /* 1 when text inputs and sluice_tokenize work */
  int32_t multi_vector; /* embed: 1 when each input gives rows of vectors (token-level pooling) */
} sluice_model_info;

/* Fills *info; its strings belong to the model. */
SLUICE_API sluice_status sluice_model_get_info(const sluice_model* model, sluice_model_info* info);
/* The name of label k of a classifier, or NULL past num_labels. Owned by the model. */
SLUICE_API const char* sluice_model_label(const sluice_model* model, size_t k);

/* ---- inputs and results -------------------------------------------------------------- */

/* One input: a text (a text pair when text_pair is set; score: query and document) through
 * the model's tokenizer with its special tokens, or, when text is NULL, token ids as they
 * are (special tokens included). */
typedef struct sluice_input {
  const char* text;      /* UTF-8, NUL-terminated; NULL for token ids */
  const char* text_pair; /* NULL, or the second text of a pair */
  const int32_t* ids;    /* token ids, when text is NULL */
  size_t num_ids;
  const int32_t* type_ids; /* NULL (all 0) or num_ids token type ids (a model without token
                              types, type_vocab_size <= 1, refuses any but 0) */
} sluice_input;

typedef struct sluice_run_options {
  uint32_t api_version; /* SLUICE_API_VERSION the caller was built with */
  int32_t truncate;     /* texts: cut to the model's limit (pairs: the second text)
                           instead of failing with SLUICE_ERROR_OUT_OF_RANGE */
  int32_t normalize;    /* embed: L2-normalise; -1 = the model's default (sluice.json
                           "normalize", else on), 0 off, 1 on */
  int32_t dimensions;   /* embed: keep the first N dimensions (Matryoshka models); 0 = all */
} sluice_run_options;

static inline void sluice_run_options_init(sluice_run_options* o) {
  memset(o, 0, sizeof *o);
  o->api_version = SLUICE_API_VERSION;
  o->normalize = -1;
}

typedef struct sluice_result sluice_result;

/* Scores n inputs (a model of task "score"): scores[i] = the activated score of input i,
 * the `score` field of `sluice score`. options: NULL = defaults. */
SLUICE_API sluice_status sluice_score(sluice_model* model, const sluice_input* inputs, size_t n,
                                      const sluice_run_options* options, float* scores);
/* The same for n text pairs (queries[i], documents[i]). */
SLUICE_API sluice_status sluice_score_pairs(sluice_model* model, const char* const* queries,
                                            const char* const* documents, size_t n, float* scores);
/* Embeds n inputs (task "embed"); *out holds one vector (or, for token-level pooling, rows
 * of vectors) per input, as the `embedding`/`embeddings` of `sluice embed`. */
SLUICE_API sluice_status sluice_embed(sluice_model* model, const sluice_input* inputs, size_t n,
                                      const sluice_run_options* options, sluice_result** out);
/* Classifies n inputs (task "classify"); *out holds per input the probabilities, logits and
 * best label of `sluice classify`. */
SLUICE_API sluice_status sluice_classify(sluice_model* model, const sluice_input* inputs, size_t n,
                                         const sluice_run_options* options, sluice_result** out);

SLUICE_API size_t sluice_result_count(const sluice_result* result);
/* Input i's values: embed: rows x dim floats (rows = 1 for one vector per input);
 * classify: the probabilities (rows = 1, dim = number of labels). NULL past the count. */
SLUICE_API const float* sluice_result_values(const sluice_result* result, size_t i, size_t* rows,
                                             size_t* dim);
/* classify: input i's logits (after calibration, before the activation); NULL for embed. */
SLUICE_API const float* sluice_result_logits(const sluice_result* result, size_t i, size_t* n);
/* classify: input i's best label (index of the highest probability); -1 for embed. */
SLUICE_API int32_t sluice_result_label(const sluice_result* result, size_t i);
/* classify with thresholds (sluice.json): the labels at or over their threshold. */
SLUICE_API const int32_t* sluice_result_labels_over_threshold(const sluice_result* result, size_t i,
                                                              size_t* n);
SLUICE_API void sluice_result_free(sluice_result* result);

/* ---- tokenizer ----------------------------------------------------------------------- */

typedef struct sluice_tokens sluice_tokens;

/* Encodes text (and text_pair, when not NULL) with the model's tokenizer, as `sluice
 * tokenize`: with the special tokens when add_special_tokens is non-zero. */
SLUICE_API sluice_status sluice_tokenize(const sluice_model* model, const char* text,
                                         const char* text_pair, int add_special_tokens,
                                         sluice_tokens** out);
SLUICE_API size_t sluice_tokens_count(const sluice_tokens* tokens);
SLUICE_API const int32_t* sluice_tokens_ids(const sluice_tokens* tokens);
SLUICE_API const int32_t* sluice_tokens_type_ids(const sluice_tokens* tokens);
/* 2 * count values: each token's byte offsets [begin, end) into the text it came from (text
 * or text_pair; special tokens: 0, 0). */
SLUICE_API const uint32_t* sluice_tokens_offsets(const sluice_tokens* tokens);
/* Token i's string (NUL-terminated), NULL past the count. */
SLUICE_API const char* sluice_tokens_token(const sluice_tokens* tokens, size_t i);
SLUICE_API void sluice_tokens_free(sluice_tokens* tokens);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_SLUICE_H_ */
