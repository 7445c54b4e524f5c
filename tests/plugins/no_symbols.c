/* A shared library that is not a sluice plugin (no sluice_plugin_abi_version). */
int not_a_plugin(void);
int not_a_plugin(void) { return 42; }
