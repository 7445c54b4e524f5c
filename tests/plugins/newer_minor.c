/* A plugin built against a newer minor version of the ABI than this sluice's: it may call
 * what this sluice lacks, so sluice must refuse it before calling its init. */
#include <sluice/plugin.h>

SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_version(void) { return SLUICE_PLUGIN_ABI_VERSION; }
SLUICE_PLUGIN_EXPORT uint32_t sluice_plugin_abi_minor(void) { return SLUICE_PLUGIN_ABI_MINOR + 1; }

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  (void)host;
  return sluice_plugin_fail(err, "init must not run for a newer minor version");
}
