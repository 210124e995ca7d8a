/*
 * types.c — the public names of element types (minfer_type_name,
 * minfer_type_from_name), from the trait table in minfer/quant.h.
 */
#include <stdio.h>
#include <strings.h>

#include "minfer/minfer.h"
#include "minfer/quant.h"

MINFER_API const char *minfer_type_name(uint32_t type)
{
    static _Thread_local char buf[32];
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    if (t)
        return t->name;
    snprintf(buf, sizeof buf, "unknown(%u)", (unsigned)type);
    return buf;
}

MINFER_API bool minfer_type_from_name(const char *name, uint32_t *type)
{
    if (!name)
        return false;
    for (uint32_t i = 0; i < MINFER_TYPE_COUNT; i++) {
        const struct minfer_type_traits *t = minfer_type_traits_of(i);
        if (t && !strcasecmp(t->name, name)) {
            if (type)
                *type = i;
            return true;
        }
    }
    return false;
}
