/*
 * device/device.c — probing the CUDA devices, binding this rank's device at
 * acx_init, and the "device:" info line.
 *
 * Owns only the device choice; which backend runs, and so which memory it
 * needs, is collectives/coll.c's decision (it asks acx_device_count whether
 * a device is visible), and when to bind is runtime/accelerator.c's (after
 * the backend is chosen, before a device backend creates its
 * communicators, which use the current device). The accelerator's
 * acx_device() is runtime/accelerator.c's.
 *
 * The bound device is process state, like CUDA's own current device: one
 * accelerator per process, one device per rank. Without CUDA (configure
 * --without-cuda, or no CUDA found) the same functions compile to the host
 * answers.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/log.h"
#include "device/device.h"

#if ACX_HAVE_CUDA
#include "device/cuda_check.h"
#endif

static int bound_device = -1;

/* ---- probing ---- */

static struct {
    int probed, count;
    char why[256];
} probe;

#if ACX_HAVE_CUDA
/* cudaGetDeviceCount leaves the count untouched when it fails (no driver:
 * cudaErrorInsufficientDriver; no device: cudaErrorNoDevice), hence the 0. */
static void probe_devices(void) {
    int count = 0;
    cudaError_t ret = cudaGetDeviceCount(&count);
    if (ret != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it for later launch checks */
        snprintf(probe.why, sizeof probe.why, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(ret),
                 cudaGetErrorString(ret));
        count = 0;
    } else if (count == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(probe.why, sizeof probe.why, "no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)",
                 vis ? vis : "unset");
    }
    probe.count = count;
}
#else
static void probe_devices(void) {
    snprintf(probe.why, sizeof probe.why, "this build has no CUDA (configure --with-cuda)");
    probe.count = 0;
}
#endif

int acx_device_count(char *why, size_t why_len) {
    if (!probe.probed) {
        probe_devices();
        probe.probed = 1;
    }
    if (why != NULL && why_len > 0) snprintf(why, why_len, "%s", probe.count ? "" : probe.why);
    return probe.count;
}

/* ---- binding ---- */

#if ACX_HAVE_CUDA
/* local_rank % count, bound with cudaSetDevice (which also creates the
 * device's primary context, so a broken device fails here, named). `why`
 * ends the info line; shared_ok: ranks may share a device (the MPI backend
 * staging device buffers), else sharing is warned about (NCCL refuses it). */
static acx_status_t bind_device(int local_rank, int local_size, int count, const char *why,
                                int shared_ok) {
    int dev = local_rank % count;
    ACX_CUDA_CHECK(cudaSetDevice(dev));
    struct cudaDeviceProp prop;
    char pci[32] = "?";
    ACX_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (cudaDeviceGetPCIBusId(pci, (int)sizeof pci, dev) != cudaSuccess) cudaGetLastError();
    bound_device = dev;
    ACX_INFO(ACX_SUBSYS_INIT,
             "device: cuda:%d (%s, sm_%d%d, %.1f GiB, PCI %s) for local rank %d of %d; %d visible "
             "device%s%s",
             dev, prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1u << 30), pci,
             local_rank, local_size, count, count == 1 ? "" : "s", why);
    if (local_size > count && !shared_ok)
        ACX_WARN(ACX_SUBSYS_INIT,
                 "%d ranks on this node share %d CUDA device%s: NCCL refuses two ranks of one "
                 "communicator on the same device; start one rank per device (or set "
                 "CUDA_VISIBLE_DEVICES per rank)",
                 local_size, count, count == 1 ? "" : "s");
    return ACX_OK;
}
#else
static acx_status_t bind_device(int local_rank, int local_size, int count, const char *why,
                                int shared_ok) {
    (void)local_rank, (void)local_size, (void)count, (void)why, (void)shared_ok;
    return ACX_ERROR(ACX_ERR_INTERNAL, "device binding reached in a build without CUDA");
}
#endif

acx_status_t acx_device_select(acx_device_need_t need, const char *user, int local_rank,
                               int local_size) {
    if (user == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "device select: user is NULL");
    char why[256];
    int count = acx_device_count(why, sizeof why);
    bound_device = -1;
    switch (need) {
    case ACX_DEVICE_NEED_EMULATED: /* its device memory is the emulated device's: no CUDA device */
        ACX_INFO(ACX_SUBSYS_INIT,
                 "device: none bound (%s, a test double on the emulated "
                 "device); local rank %d of %d",
                 user, local_rank, local_size);
        return ACX_OK;
    case ACX_DEVICE_NEED_CUDA:
        if (count == 0)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "the %s needs a CUDA device, and this rank has none: %s", user, why);
        return bind_device(local_rank, local_size, count, "", 0);
    case ACX_DEVICE_NEED_HOST:
        if (count == 0)
            ACX_INFO(ACX_SUBSYS_INIT, "device: none bound (%s; %s); local rank %d of %d", user, why,
                     local_rank, local_size);
        else
            ACX_INFO(ACX_SUBSYS_INIT,
                     "device: none bound (%s, which works on host memory; %d CUDA device%s "
                     "visible, not used); local rank %d of %d",
                     user, count, count == 1 ? "" : "s", local_rank, local_size);
        return ACX_OK;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "device select: need %d is not one of host (0), cuda (1), emulated (2)",
                         (int)need);
    }
}

acx_status_t acx_device_use(int local_rank, int local_size) {
    char why[256];
    int count = acx_device_count(why, sizeof why);
    if (local_rank < 0 || local_size < 1 || local_rank >= local_size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "device use: local rank %d of %d", local_rank,
                         local_size);
    if (count == 0) return ACX_ERROR(ACX_ERR_NOT_SUPPORTED, "no CUDA device: %s", why);
    return bind_device(local_rank, local_size, count,
                       "; for device buffers the program brings (ranks may share a device)", 1);
}

int acx_device_bound(void) { return bound_device; }
