/* A plugin whose init registers one processor and then fails: nothing of it may stay. */
#include <sluice/plugin.h>

SLUICE_PLUGIN_DECLARE_ABI()

static void* create(void* user, const sluice_processor_config* c, sluice_plugin_error* err) {
  (void)user;
  (void)c;
  (void)err;
  return NULL;
}
static void update(void* instance, const sluice_batch_update* u) {
  (void)instance;
  (void)u;
}
static int fill(void* instance, int32_t row, uint32_t* mask, sluice_plugin_error* err) {
  (void)instance;
  (void)row;
  (void)mask;
  (void)err;
  return 0;
}

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  sluice_logits_processor lp = {0};
  lp.struct_size = sizeof lp;
  lp.name = "half_registered";
  lp.create = create;
  lp.update_state = update;
  lp.fill_bitmask = fill;
  if (host->register_logits_processor(host->context, &lp, err) != 0) return 1;
  return sluice_plugin_fail(err, "no licence file found");
}
