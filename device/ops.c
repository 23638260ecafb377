/*
 * device/ops.c — the parts of device/ops.h shared by every device:
 * accounted allocation (acx_memory_stats' device counters), which device
 * owns a buffer (the one place that lists the tables), and the "none"
 * answer of acx_devops_cuda in builds without CUDA.
 *
 * Compiled in every build; the CUDA table itself is device/ops_cuda.c
 * (CUDA builds only), the test double device/ops_emulated.c.
 */
#include <stdio.h>

#include "device/memory.h"
#include "device/ops.h"
#include "base/error.h"
#include "base/memstat.h"

acx_status_t acx_devops_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                              const char *what, void **p_p) {
    void *p = NULL;
    ACX_CHECK(dev->alloc(bytes, what, &p));
    acx_mem_note(cat, (int64_t)bytes, 1);
    *p_p = p;
    return ACX_OK;
}

void acx_devops_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes) {
    if (p == NULL) return;
    dev->free(p);
    acx_mem_note(cat, -(int64_t)bytes, 1);
}

acx_status_t acx_devops_host_alloc(const acx_devops_t *dev, acx_mem_category_t cat, size_t bytes,
                                   const char *what, void **p_p) {
    void *p = NULL;
    ACX_CHECK(dev->host_alloc(bytes, what, &p));
    acx_mem_note(cat, (int64_t)bytes, 0);
    *p_p = p;
    return ACX_OK;
}

void acx_devops_host_free(const acx_devops_t *dev, acx_mem_category_t cat, void *p, size_t bytes) {
    if (p == NULL) return;
    dev->host_free(p);
    acx_mem_note(cat, -(int64_t)bytes, 0);
}

/* ---- which device owns a buffer ---- */

acx_status_t acx_devops_owner(const void *p, size_t bytes, const acx_devops_t **dev_p) {
    int owns = 0;
    if (p == NULL || bytes == 0) {
        *dev_p = NULL;
        return ACX_OK;
    }
    ACX_CHECK(acx_devops_emulated.owns(p, bytes, &owns));
    if (owns) {
        *dev_p = &acx_devops_emulated;
        return ACX_OK;
    }
    const acx_devops_t *cuda = acx_devops_cuda(NULL, 0); /* NULL: no CUDA, or no device */
    if (cuda != NULL) ACX_CHECK(cuda->owns(p, bytes, &owns));
    *dev_p = owns ? cuda : NULL;
    return ACX_OK;
}

size_t acx_devops_stage_trim(void) { return acx_cuda_pinned_trim(); }

#if !ACX_HAVE_CUDA
const acx_devops_t *acx_devops_cuda(char *why, size_t why_len) {
    if (why != NULL && why_len > 0) snprintf(why, why_len, "this build has no CUDA");
    return NULL;
}
#endif
