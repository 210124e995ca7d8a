/*
 * version.c — library version, the plugin ABI it offers, status texts.
 */
#include "minfer/backend.h"
#include "minfer/minfer.h"

const char *minfer_version(void)
{
    return MINFER_BUILD_VERSION;
}

void minfer_plugin_abi(int *major, int *minor)
{
    if (major)
        *major = MINFER_ABI_MAJOR;
    if (minor)
        *minor = MINFER_ABI_MINOR;
}

const char *minfer_status_str(minfer_status st)
{
    switch (st) {
    case MINFER_OK: return "ok";
    case MINFER_ERR_INVALID_ARG: return "invalid argument";
    case MINFER_ERR_NO_MEMORY: return "out of host memory";
    case MINFER_ERR_DEVICE_OOM: return "device out of memory";
    case MINFER_ERR_IO: return "I/O error";
    case MINFER_ERR_FORMAT: return "malformed file";
    case MINFER_ERR_UNSUPPORTED: return "unsupported";
    case MINFER_ERR_PLUGIN: return "plugin error";
    case MINFER_ERR_BACKEND: return "backend error";
    case MINFER_ERR_NOT_FOUND: return "not found";
    case MINFER_ERR_RANGE: return "value out of range";
    case MINFER_ERR_STATE: return "invalid state";
    case MINFER_ERR_FULL: return "cache full";
    }
    return "unknown status";
}
