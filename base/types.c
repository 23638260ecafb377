/*
 * base/types.c — dtype sizes and names, and the library version.
 */
#include "acx/types.h"

static const struct {
    const char *name;
    size_t size;
} dtype_info[ACX_DTYPE_COUNT_] = {
    [ACX_DTYPE_FLOAT32] = {"float32", 4}, [ACX_DTYPE_FLOAT64] = {"float64", 8},
    [ACX_DTYPE_FLOAT16] = {"float16", 2}, [ACX_DTYPE_BFLOAT16] = {"bfloat16", 2},
    [ACX_DTYPE_INT8] = {"int8", 1},       [ACX_DTYPE_UINT8] = {"uint8", 1},
    [ACX_DTYPE_INT32] = {"int32", 4},     [ACX_DTYPE_INT64] = {"int64", 8},
    [ACX_DTYPE_UINT16] = {"uint16", 2},
};

ACX_API size_t acx_dtype_size(acx_dtype_t dtype) {
    if ((int)dtype < 0 || dtype >= ACX_DTYPE_COUNT_) return 0;
    return dtype_info[dtype].size;
}

ACX_API const char *acx_dtype_name(acx_dtype_t dtype) {
    if ((int)dtype < 0 || dtype >= ACX_DTYPE_COUNT_) return "invalid";
    return dtype_info[dtype].name;
}

ACX_API const char *acx_version(void) { return ACX_VERSION_STRING; }
