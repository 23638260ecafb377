/*
 * acx/types.h — basic types shared by every public acx header: the export
 * macro, element types (dtypes), reduction operations and the opaque handles.
 *
 * Public headers never depend on build options: the same header serves a
 * CUDA-enabled and a CPU-only libacx.
 */
#ifndef ACX_TYPES_H
#define ACX_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols marked ACX_API are exported from libacx.so; everything else is hidden. */
#if defined(__GNUC__) && !defined(ACX_STATIC_BUILD)
#define ACX_API __attribute__((visibility("default")))
#else
#define ACX_API
#endif

/* Element types. Values are stored in checkpoints and dataset metadata:
 * never renumber them. */
typedef enum acx_dtype {
    ACX_DTYPE_FLOAT32 = 0,
    ACX_DTYPE_FLOAT64 = 1,
    ACX_DTYPE_FLOAT16 = 2,
    ACX_DTYPE_BFLOAT16 = 3,
    ACX_DTYPE_INT8 = 4,
    ACX_DTYPE_UINT8 = 5,
    ACX_DTYPE_INT32 = 6,
    ACX_DTYPE_INT64 = 7,
    ACX_DTYPE_UINT16 = 8, /* token ids (GPT-2's 50257 fit) */
    ACX_DTYPE_COUNT_      /* not a type */
} acx_dtype_t;

/* Reduction operations for collectives. ACX_OP_AVG is a sum divided by the
 * number of participating ranks (NCCL's ncclAvg). */
typedef enum acx_red_op {
    ACX_OP_SUM = 0,
    ACX_OP_AVG = 1,
    ACX_OP_MAX = 2,
    ACX_OP_MIN = 3,
    ACX_OP_PROD = 4,
    ACX_OP_COUNT_
} acx_red_op_t;

/* Opaque handles. */
typedef struct acx_accelerator acx_accelerator_t; /* one per process: ranks, backend, config */
typedef struct acx_model acx_model_t;             /* parameters, grouped into units */
typedef struct acx_unit acx_unit_t;               /* an FSDP wrap unit: gathered/reduced together */
typedef struct acx_param acx_param_t;             /* one named tensor with its gradient */
typedef struct acx_optimizer acx_optimizer_t;     /* SGD, Adam, AdamW over a model's local shard */
typedef struct acx_scheduler acx_scheduler_t;     /* learning-rate schedule of one optimizer */
typedef struct acx_dataloader acx_dataloader_t;   /* distributed loader over HDF5 datasets */

/* Size in bytes of one element of dtype, or 0 for an invalid dtype. */
ACX_API size_t acx_dtype_size(acx_dtype_t dtype);

/* Lower-case name ("float32", "bfloat16", ...), or "invalid". Static storage. */
ACX_API const char *acx_dtype_name(acx_dtype_t dtype);

/* The library version as "MAJOR.MINOR.PATCH". Static storage. */
ACX_API const char *acx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* ACX_TYPES_H */
