/* sluice plugin ABI: shared libraries that add batch-level logits processors to sluice,
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
 * sluice calls sluice_plugin_abi_version first and refuses a library whose version differs
 * from its own (start-up stops naming the file and both versions); then sluice_plugin_init
 * once. Every struct that crosses the boundary starts with its size (struct_size) so that
 * later minor additions append fields without breaking plugins built against this header.
 *
 * Logits processors follow vLLM V1's batch-level shape, with the events it lacks made
 * explicit. A processor instance (create) serves one generation engine (one loaded model);
 * the requests that name it (the request's "logits_processors") are its rows, numbered
 * densely [0, batch_size). Before every engine step sluice calls update_state once with the
 * rows that left (removed), joined (added) and changed index (moved), in that order, and the
 * rows still in partial (chunked) prefill; then fill_bitmask once per row that samples a token
 * this step, possibly on several threads at once (distinct rows). A preempted request is
 * removed, and re-added later with SLUICE_ROW_RESET and its full history; a row in partial
 * prefill is never sampled and its output does not change.
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
} sluice_logits_processor;

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
} sluice_plugin_host;

typedef uint32_t (*sluice_plugin_abi_version_fn)(void);
typedef int (*sluice_plugin_init_fn)(const sluice_plugin_host* host, sluice_plugin_error* err);

/* In exactly one source file of the plugin. */
#define SLUICE_PLUGIN_DECLARE_ABI()                               \
  SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_version(void) { \
    return SLUICE_PLUGIN_ABI_VERSION;                             \
  }

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_PLUGIN_H_ */
