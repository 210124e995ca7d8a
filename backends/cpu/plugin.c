/*
 * plugin.c — the CPU backend's entry point (placeholder until the
 * foundation work fills in the table).
 */
#include "minfer/backend.h"

MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *
minfer_plugin_entry(uint32_t *abi, const struct minfer_host *host)
{
    (void)host;
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    return NULL;
}
