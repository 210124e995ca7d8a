/*
 * types.c — names of element types (placeholder; the quant work replaces
 * this with the full trait table).
 */
#include <stdint.h>

const char *minfer_quant_placeholder(void);
const char *minfer_quant_placeholder(void)
{
    return "quant";
}
