/* A plugin built for another ABI version: sluice must refuse it before calling its init. */
#include <sluice/plugin.h>

SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_version(void) {
  return SLUICE_PLUGIN_ABI_VERSION + 1;
}

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  (void)host;
  return sluice_plugin_fail(err, "init must not run for a wrong ABI version");
}
