/*
 * base/log.h — leveled, per-subsystem logging (library-private),
 * in the manner of NCCL_DEBUG / NCCL_DEBUG_SUBSYS.
 *
 * Lines go to stderr as
 *   [acx r3/8 node07] WARN  data: batch larger than the dataset ...
 * Level from the resolved config (ACX_LOG_LEVEL), subsystems from
 * ACX_LOG_SUBSYS (comma list of init,coll,shard,io,data,launch,optim, or
 * "all"; a leading '^' excludes). Errors and warnings are always printed
 * whatever the subsystem mask. Thread-safe (one write(2) per line).
 */
#ifndef ACX_BASE_LOG_H
#define ACX_BASE_LOG_H

#include "acx/config.h"

typedef enum acx_log_subsys {
    ACX_SUBSYS_INIT = 1u << 0,
    ACX_SUBSYS_COLL = 1u << 1,
    ACX_SUBSYS_SHARD = 1u << 2,
    ACX_SUBSYS_IO = 1u << 3,
    ACX_SUBSYS_DATA = 1u << 4,
    ACX_SUBSYS_LAUNCH = 1u << 5,
    ACX_SUBSYS_OPTIM = 1u << 6,
    ACX_SUBSYS_ALL = 0xffffffffu
} acx_log_subsys_t;

/* Set identity and filters. rank < 0 before MPI is up ("[acx host]").
 * subsys_spec: ACX_LOG_SUBSYS syntax, NULL = all. Not thread-safe; called
 * during init only. */
void acx_log_setup(int rank, int world_size, int level, const char *subsys_spec);

/* Whether a message at level/subsys would be printed. */
int acx_log_enabled(int level, unsigned subsys);

void acx_log_write(int level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A line the user should see without asking (what a save wrote where, what
 * retention removed): printed at the default level (warn) and above,
 * whatever the subsystem mask, labelled NOTE; log_level error hides it.
 * The caller decides which rank speaks (usually rank 0 only). */
void acx_log_note(unsigned subsys, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ACX_LOG(level, subsys, ...)                                                                \
    do {                                                                                           \
        if (acx_log_enabled((level), (subsys))) acx_log_write((level), (subsys), __VA_ARGS__);     \
    } while (0)
#define ACX_WARN(subsys, ...)    ACX_LOG(ACX_LOG_WARN, (subsys), __VA_ARGS__)
#define ACX_INFO(subsys, ...)    ACX_LOG(ACX_LOG_INFO, (subsys), __VA_ARGS__)
#define ACX_DEBUG(subsys, ...)   ACX_LOG(ACX_LOG_DEBUG, (subsys), __VA_ARGS__)
#define ACX_LOG_ERR(subsys, ...) ACX_LOG(ACX_LOG_ERROR, (subsys), __VA_ARGS__)

#endif /* ACX_BASE_LOG_H */
