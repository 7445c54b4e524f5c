/* A plugin that registers an IO processor under a built-in's name ("rerank"): the plugin
 * loads, but binding it to a model fails start-up naming the file and the reserved name
 * (plugins and built-ins share one registry per model). */
#include <sluice/plugin.h>

SLUICE_PLUGIN_DECLARE_ABI()

static int parse(void* user, sluice_io_call* call, const char* body, size_t len,
                 sluice_plugin_error* err) {
  (void)user;
  (void)call;
  (void)body;
  (void)len;
  (void)err;
  return 0;
}
static int respond(void* user, sluice_io_call* call, const sluice_io_output* outs, int32_t n,
                   sluice_plugin_error* err) {
  (void)user;
  (void)outs;
  (void)n;
  (void)err;
  call->write(call, "{}", 2);
  return 0;
}

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  sluice_io_processor p = {0};
  p.struct_size = sizeof p;
  p.name = "rerank";
  p.task = SLUICE_TASK_SCORE;
  p.parse = parse;
  p.respond = respond;
  return host->register_io_processor(host->context, &p, err);
}
