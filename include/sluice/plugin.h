/* sluice plugin ABI: shared libraries that add batch-level logits processors and IO processors
 * (request parsing and response writing around a pooling model) to sluice,
 * loaded at start-up with `--plugin path.so` (or a model's sluice.json "plugins" list), with
 * no fork and no rebuild of sluice. docs/plugins.md is the author's guide.
 *
 * Plain C (no C++ types cross the boundary); a plugin exports two symbols:
 *
 *   uint32_t sluice_plugin_abi_version(void);   returns SLUICE_PLUGIN_ABI_VERSION as the plugin
 *                                               was compiled (SLUICE_PLUGIN_DECLARE_ABI does it)
 *   int sluice_plugin_init(const sluice_plugin_host* host, sluice_plugin_error* err);
 *                                               registers the plugin's processors through host
 *
 * and, optionally (SLUICE_PLUGIN_DECLARE_ABI defines it),
 *   uint32_t sluice_plugin_abi_minor(void);     the minor version the plugin was compiled with
 *
 * sluice calls sluice_plugin_abi_version first and refuses a library whose version differs
 * from its own (start-up stops naming the file and both versions), and a library whose minor
 * version is newer than its own (it may call what this sluice lacks); a library without
 * sluice_plugin_abi_minor is minor 0. Then sluice_plugin_init once. Every struct that crosses the
 * boundary starts with its size (struct_size) so that later minor additions append fields without
 * breaking plugins built against this header.
 *
 * A plugin that uses a field appended in a later minor version tests for it first: a field of
 * the host table with SLUICE_PLUGIN_HOST_HAS, of sluice_io_call with SLUICE_IO_CALL_HAS, of
 * sluice_io_model with SLUICE_IO_MODEL_HAS (an older sluice passes the shorter struct; a plugin
 * built against an older header never reads past the struct it knows).
 *
 * Logits processors follow vLLM V1's batch-level shape, with the events it lacks made
 * explicit. A processor instance (create) serves one generation engine (one loaded model);
 * the requests that name it (the request's "logits_processors") are its rows, numbered
 * densely [0, batch_size). Before every engine step sluice calls update_state once with the
 * rows that left (removed), joined (added) and changed index (moved), in that order, and the
 * rows still in partial (chunked) prefill; then fill_bitmask once per row that samples a token
 * this step, possibly on several threads at once (distinct rows). A preempted request is
 * removed, and re-added later with SLUICE_ROW_RESET and its full history; a row in partial
 * prefill is never sampled and its output does not change. A processor with fill_allowed
 * (minor 3) is asked for a row's allowed token ids instead, falling back to fill_bitmask.
 */
#ifndef SLUICE_PLUGIN_H_
#define SLUICE_PLUGIN_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header. */
#define SLUICE_PLUGIN_ABI_VERSION 1u
/* Bumped on compatible additions (fields appended to structs, new host functions):
 *   0: logits processors;  1: IO processors (register_io_processor, sluice_io_*);
 *   2: IO processors on CLIP models: SLUICE_TASK_CLIP, sluice_io_call.add_image,
 *      sluice_io_model.model_dir (plugins of minor 0 and 1 load and behave as before);
 *   3: sparse allow-lists, sluice_logits_processor.fill_allowed (plugins of minor 0 to 2,
 *      whose struct ends at fill_bitmask, load and behave as before). */
#define SLUICE_PLUGIN_ABI_MINOR 3u

/* Whether *p (a struct of `type` that sluice passed, starting with struct_size) has `field`. */
#define SLUICE_STRUCT_HAS(p, type, field) \
  ((p)->struct_size >= offsetof(type, field) + sizeof((p)->field))

#if defined(__GNUC__)
#define SLUICE_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define SLUICE_PLUGIN_EXPORT
#endif

/* A message for the caller (NUL-terminated; longer ones are cut). A function that fails
 * returns non-zero and writes why here. */
typedef struct sluice_plugin_error {
  char message[512];
} sluice_plugin_error;

/* Formats a message into err and returns 1 (for `return sluice_plugin_fail(err, ...)`). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
sluice_plugin_fail(sluice_plugin_error* err, const char* fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return 1;
}

/* A read-only view of token ids owned by sluice. */
typedef struct sluice_token_view {
  const int32_t* ids;
  int64_t size;
} sluice_token_view;

/* What a request asked of the processor. */
typedef struct sluice_request_params {
  uint32_t struct_size;
  const char* request_id; /* NUL-terminated */
  const char* extra_args; /* the request's "extra_args" object as JSON text ("{}" if absent) */
  size_t extra_args_len;
  int32_t n;          /* completions of the request */
  int32_t index;      /* which of them this row is (0 in validate) */
  float temperature;  /* after the model's defaults; 0 = greedy */
  int32_t vocab_size; /* the model's vocabulary (mask width in tokens) */
} sluice_request_params;

/* Set in sluice_added_row.flags: the row is a request coming back after preemption; its
 * prompt and output views hold its full history (its earlier row was removed). */
#define SLUICE_ROW_RESET 1u

typedef struct sluice_added_row {
  int32_t row;
  uint32_t flags;
  const sluice_request_params* params; /* valid until the row is removed */
  sluice_token_view prompt;            /* valid until the row is removed */
  /* Live: sluice updates ids/size before every update_state; holds every output token so
   * far (a row added after n > 1 forked may already have some). Valid until removed. */
  const sluice_token_view* output;
} sluice_added_row;

#define SLUICE_MOVE_ONE_WAY 0u /* row `from` now lives at `to`; `from` is empty */
#define SLUICE_MOVE_SWAP 1u    /* rows `from` and `to` exchange places */

typedef struct sluice_moved_row {
  int32_t from;
  int32_t to;
  uint32_t kind;
} sluice_moved_row;

typedef struct sluice_batch_update {
  uint32_t struct_size;
  int32_t batch_size; /* rows [0, batch_size) are in use after this update */
  const int32_t* removed;
  int32_t num_removed;
  const sluice_added_row* added;
  int32_t num_added;
  const sluice_moved_row* moved;
  int32_t num_moved;
  /* Rows (after the moves) whose prompt (or, after preemption, history) has not fully run:
   * not sampled this step; their output is unchanged. */
  const int32_t* partial_prefill;
  int32_t num_partial_prefill;
} sluice_batch_update;

/* Passed to create. */
typedef struct sluice_processor_config {
  uint32_t struct_size;
  int32_t vocab_size;
  int32_t max_rows; /* batch_size never exceeds it */
} sluice_processor_config;

/* Bit of sluice_logits_processor.flags: filling the mask never changes the highest-logit
 * allowed token, so sluice skips fill_bitmask for greedy rows that ask for no logprobs. */
#define SLUICE_LP_ARGMAX_INVARIANT 1u

typedef struct sluice_logits_processor {
  uint32_t struct_size; /* sizeof(sluice_logits_processor) */
  const char* name;     /* what requests name in "logits_processors"; copied at registration */
  uint32_t flags;
  void* user_data; /* passed to validate and create */

  /* At admission, on a request thread (possibly several at once): 0 to accept the request's
   * params, else non-zero with the message the request's 400 carries. May be NULL. */
  int (*validate)(void* user_data, const sluice_request_params* params, sluice_plugin_error* err);
  /* One instance per generation engine; NULL with err set on failure (the model's load fails). */
  void* (*create)(void* user_data, const sluice_processor_config* config, sluice_plugin_error* err);
  void (*destroy)(void* instance);
  /* Before each step that has rows or changes, on the engine's thread. */
  void (*update_state)(void* instance, const sluice_batch_update* update);
  /* The allowed next tokens of `row`: `mask` has (vocab_size + 31) / 32 words, bit t % 32 of
   * word t / 32 for token t, all set on entry; clear the bits of forbidden tokens. Called for
   * distinct rows concurrently from a thread pool; non-zero (with err) fails only that row's
   * request. A mask with no bit left also fails the request. */
  int (*fill_bitmask)(void* instance, int32_t row, uint32_t* mask, sluice_plugin_error* err);
  /* ---- minor 3 (sluice reads it only from a struct whose struct_size covers it) ---- */
  /* Optional (NULL: fill_bitmask only). The allowed next tokens of `row` as a list of token
   * ids, for rows that allow few tokens: sluice applies the list to the row's logits without
   * building a (vocab_size + 31) / 32-word bitmask. Called instead of fill_bitmask, with the
   * same threading; *count is -1 on entry and `ids` has room for `capacity` ids (at least 1;
   * today (vocab_size + 31) / 32, so a list never takes more bytes than the bitmask).
   *   - a list: write at most capacity ids into ids, set *count to their number, return 0;
   *     duplicates are fine; an id outside [0, vocab_size) fails the row's request (naming
   *     the processor); an empty list (*count 0) fails it too (no token is allowed);
   *   - no list for this row (it needs more than capacity ids, or allows every token): leave
   *     *count at -1 or set it to the size it would need (> capacity); sluice then calls
   *     fill_bitmask for the row (ids is not read);
   *   - non-zero (with err) fails only the row's request, as fill_bitmask's.
   * A row that several processors constrain (its request names more than one, or a
   * structured output and a plugin) gets fill_bitmask of each (the intersection). */
  int (*fill_allowed)(void* instance, int32_t row, int32_t* ids, int32_t capacity, int32_t* count,
                      sluice_plugin_error* err);
} sluice_logits_processor;

/* ---- IO processors (minor 1) ----
 *
 * An IO processor serves a route of its own around a pooling model (POST /plugins/NAME, and
 * POST /pooling with "io_processor": "NAME"): parse reads the request body and adds the
 * sequences the model runs (token ids, or texts and text pairs that sluice tokenises with the
 * model's tokenizer); the engine runs them batched with every other request; respond gets
 * their outputs in the order they were added and writes the response body (JSON).
 *
 * Per-request state belongs to sluice: the plugin allocates it with call->alloc (optionally
 * with a cleanup function, e.g. a C++ destructor) and keeps the pointer in call->state; sluice
 * runs the cleanups and frees the memory when the request ends, whether it succeeded, failed
 * (in parse, in the engine or in respond) or its client went away, so nothing a request
 * allocates outlives it. parse and respond run on sluice's worker threads, several requests at
 * once: state shared between requests (user_data) must be read-only or synchronised. */

/* The task an IO processor needs of the served model (the model's task must be this one:
 * SLUICE_TASK_EMBED processors do not load on CLIP models, nor SLUICE_TASK_CLIP ones on text
 * embedding models). */
#define SLUICE_TASK_EMBED 1u          /* embeddings: values = the vector (rows x dim) */
#define SLUICE_TASK_CLASSIFY 2u       /* sequence classification: one score per label */
#define SLUICE_TASK_SCORE 3u          /* cross-encoder / reranker: one relevance score */
#define SLUICE_TASK_TOKEN_CLASSIFY 4u /* token classification: rows = tokens, dim = labels */
/* Minor 2: a CLIP model (image and text towers in one embedding space; sluice_io_model.task
 * "clip"). Images (add_image) run the vision tower, texts (add_text, add_tokens) the text
 * tower; every output is one row of projection_dim values (output_dim): values = the
 * projected embedding L2-normalised (so a dot product of two is their cosine similarity),
 * raw = the same projection before normalisation. */
#define SLUICE_TASK_CLIP 5u

/* The served model, as a processor sees it (valid while the model is loaded). */
typedef struct sluice_io_model {
  uint32_t struct_size;
  const char* name;      /* served model name */
  const char* task;      /* "embed" | "classify" | "score" | "token-classify" | "clip" */
  int32_t output_dim;    /* values per output row */
  int32_t has_tokenizer; /* 0: add_text fails; token ids only */
  int32_t max_inputs;    /* sequences one request may add (--max-inputs-per-request) */
  int32_t max_tokens;    /* tokens one sequence may have (--max-tokens-per-input) */
  int32_t num_labels;    /* classify / token-classify */
  const char* const* labels;
  /* ---- minor 2 (test with SLUICE_IO_MODEL_HAS(model, model_dir)) ---- */
  /* The loaded version's directory (NUL-terminated, no trailing '/'): check_model may read
   * the plugin's own files from it (a ranking head's weights). */
  const char* model_dir;
} sluice_io_model;

#define SLUICE_IO_MODEL_HAS(model, field) SLUICE_STRUCT_HAS(model, sluice_io_model, field)

/* The model's output for one sequence (views valid during respond only). */
typedef struct sluice_io_output {
  const float* values; /* rows * dim: the vector (embed), the activated scores (others) */
  const float* raw;    /* rows * dim before activation (score, classify) or normalisation
                        (clip); NULL when none */
  int32_t rows;        /* 1, or the tokens kept (token-level pooling, token-classify) */
  int32_t dim;
  const int32_t* token_indices; /* rows positions (step pooling), else NULL */
} sluice_io_output;

/* One request, passed to parse and respond (sluice owns it and every view in it). */
typedef struct sluice_io_call {
  uint32_t struct_size;
  const sluice_io_model* model;
  const char* processor; /* the processor's name */
  const char* route;     /* "/plugins/NAME" or "/pooling" */
  void* state;           /* the plugin's per-request pointer: NULL in parse, kept until respond */
  void* context;         /* sluice's */
  /* size bytes (zeroed, aligned for any type) that live until the request ends; then
   * cleanup(p) runs (if not NULL; in reverse order of allocation) and the memory is freed.
   * NULL when the request's allocations would pass 64 MiB in all. */
  void* (*alloc)(struct sluice_io_call* call, size_t size, void (*cleanup)(void* p));
  /* In parse: adds a sequence of token ids used verbatim (type_ids NULL = all 0). Returns
   * the sequence's index (its output's index in respond), or -1 with err set (over the
   * request's sequence or token limits). */
  int32_t (*add_tokens)(struct sluice_io_call* call, const int32_t* ids, int64_t n,
                        const int32_t* type_ids, sluice_plugin_error* err);
  /* In parse: adds a text (b NULL) or a text pair, tokenised with the model's tokenizer and
   * its special tokens (pairs with its pair template; a causal-LM reranker's prompt
   * template). truncate: 0 = a text over the limit is an error, -1 = cut to the limit,
   * n > 0 = cut to n tokens (pairs cut the second text). Returns the index or -1 with err.
   * On a CLIP model (minor 2): one text only (b NULL), tokenised with the CLIP tokenizer and
   * run through the text tower; add_tokens gives the text tower token ids. */
  int32_t (*add_text)(struct sluice_io_call* call, const char* a, size_t a_len, const char* b,
                      size_t b_len, int32_t truncate, sluice_plugin_error* err);
  /* In respond: appends to the response body (JSON; sluice refuses a body that is not). */
  void (*write)(struct sluice_io_call* call, const char* data, size_t len);
  /* In respond: appends s as a JSON string (quoted and escaped). */
  void (*write_string)(struct sluice_io_call* call, const char* s, size_t len);
  /* In respond: appends a number the way sluice writes floats (shortest round trip;
   * non-finite as null). */
  void (*write_float)(struct sluice_io_call* call, float v);
  /* ---- minor 2 (test with SLUICE_IO_CALL_HAS(call, add_image)) ---- */
  /* In parse, on a CLIP model (SLUICE_TASK_CLIP): adds an image, source (len bytes, not
   * NUL-terminated) as the CLIP routes take it: an http(s) URL, a data: URI or a local path
   * under --allowed-local-media-path, fetched after parse with the same SSRF guard, size
   * limits and feature cache as /v1/embeddings. Returns the index, or -1 with err set (not a
   * CLIP model, no vision tower, an empty source, over the request's sequence limit). A
   * source that cannot be fetched or decoded fails the request with a 400 naming it. */
  int32_t (*add_image)(struct sluice_io_call* call, const char* source, size_t len,
                       sluice_plugin_error* err);
} sluice_io_call;

#define SLUICE_IO_CALL_HAS(call, field) SLUICE_STRUCT_HAS(call, sluice_io_call, field)

/* Return values of parse and respond: 0, or the HTTP status of the error (its message in err):
 * 400, 404, 429, 500 or 503; any other non-zero value is 400 from parse and 500 from respond
 * (so `return sluice_plugin_fail(err, ...)` works in both). */
typedef struct sluice_io_processor {
  uint32_t struct_size; /* sizeof(sluice_io_processor) */
  const char* name;     /* the route's NAME; copied at registration */
  uint32_t task;        /* SLUICE_TASK_*: a model without it refuses the plugin at load */
  void* user_data;
  /* At load, once per served model that loads the plugin: non-zero (with err) refuses the
   * model (start-up stops). May be NULL. */
  int (*check_model)(void* user_data, const sluice_io_model* model, sluice_plugin_error* err);
  /* Reads body (not NUL-terminated; "/pooling": the request's "data" value), allocates its
   * state and adds the sequences (none is allowed). */
  int (*parse)(void* user_data, sluice_io_call* call, const char* body, size_t body_len,
               sluice_plugin_error* err);
  /* outputs[i] is the output of the sequence of index i. Writes the response body. */
  int (*respond)(void* user_data, sluice_io_call* call, const sluice_io_output* outputs,
                 int32_t num_outputs, sluice_plugin_error* err);
} sluice_io_processor;

typedef struct sluice_plugin_host {
  uint32_t struct_size;
  uint32_t abi_version; /* SLUICE_PLUGIN_ABI_VERSION of sluice */
  const char* sluice_version;
  const char* plugin_path; /* the file being loaded */
  void* context;
  /* Registers a processor (the struct is copied). Non-zero with err on a duplicate name, an
   * empty name or a missing function. */
  int (*register_logits_processor)(void* context, const sluice_logits_processor* processor,
                                   sluice_plugin_error* err);
  /* Writes a line to sluice's log (level 0 info, 1 warning, 2 error). */
  void (*log)(void* context, int level, const char* message);
  /* ---- minor 1 (test with SLUICE_PLUGIN_HOST_HAS(host, register_io_processor)) ---- */
  uint32_t abi_minor; /* SLUICE_PLUGIN_ABI_MINOR of sluice */
  /* Registers an IO processor (the struct is copied). Non-zero with err on a duplicate, empty
   * or malformed name, an unknown task or a missing function. */
  int (*register_io_processor)(void* context, const struct sluice_io_processor* processor,
                               sluice_plugin_error* err);
} sluice_plugin_host;

/* Whether a host table has `field` (a sluice of an older minor version has a shorter one). */
#define SLUICE_PLUGIN_HOST_HAS(host, field) SLUICE_STRUCT_HAS(host, sluice_plugin_host, field)

typedef uint32_t (*sluice_plugin_abi_version_fn)(void);
typedef uint32_t (*sluice_plugin_abi_minor_fn)(void);
typedef int (*sluice_plugin_init_fn)(const sluice_plugin_host* host, sluice_plugin_error* err);

/* In exactly one source file of the plugin. */
#define SLUICE_PLUGIN_DECLARE_ABI()                               \
  SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_version(void) { \
    return SLUICE_PLUGIN_ABI_VERSION;                             \
  }                                                               \
  SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_minor(void) { return SLUICE_PLUGIN_ABI_MINOR; }

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_PLUGIN_H_ */
