/* A plugin of the first ABI (1.0, before IO processors): no sluice_plugin_abi_minor symbol.
 * It must still load, and see a host table that has the old fields. */
#include <sluice/plugin.h>

SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_version(void) { return 1u; }

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  if (host->abi_version != 1u || host->register_logits_processor == NULL || host->log == NULL) {
    return sluice_plugin_fail(err, "the host table lacks the ABI 1.0 fields");
  }
  host->log(host->context, 0, "a 1.0 plugin loaded");
  return 0;
}
