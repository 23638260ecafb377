/*
 * runtime/accelerator.c — the accelerator: MPI bootstrap and topology,
 * configuration, ownership of the program's objects, acx_prepare and the
 * micro-step / synchronization-boundary bookkeeping.
 *
 * What it leaves to others: storage and communication of parameters and
 * gradients (sharding/), collectives (collectives/), reading data (io/),
 * launcher detection (slurm/), the optimizer math (optimizer.c).
 *
 * Bootstrap order (DESIGN.md "Bootstrap and devices"):
 *   1. strip acx's options from argv; resolve the configuration (its
 *      outcome is agreed in step 4) and install the preemption handlers;
 *      MPI_Init_thread(FUNNELED) unless the program already initialized MPI
 *      (then the program finalizes it);
 *   2. rank and world size; the launcher check (N singletons is an error);
 *   3. node topology: MPI_Comm_split_type(SHARED) gives local rank/size;
 *      a node's index is the number of node leaders (local rank 0) with a
 *      lower world rank (MPI_Exscan), broadcast inside the node;
 *   4. agree on the configuration's outcome (every rank read the same
 *      sources; a bad file fails every rank the same way);
 *   5. choose the collective backend and build the world/node communicators.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/watchdog.h"
#include "device/device.h"
#include "device/ops.h"
#include "io/loader.h"
#include "runtime/coll_debug.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "base/settings.h"
#include "device/cache.h"
#include "base/mem_cache.h"
#include "runtime/preempt.h"
#include "runtime/project.h"
#include "sharding/model.h"
#include "launch/env.h"

#define ACX_MAX_OVERRIDES 64

/* ---- argv ---- */

typedef struct argv_opts {
    const char *config_file;
    int n_overrides;
    char *overrides[ACX_MAX_OVERRIDES]; /* "canonical.key=value", malloc'd */
} argv_opts_t;

static void argv_opts_free(argv_opts_t *o) {
    for (int i = 0; i < o->n_overrides; i++)
        free(o->overrides[i]);
    o->n_overrides = 0;
}

/* Remove --config FILE / --config=FILE / --acx-KEY=VALUE / --acx-KEY VALUE
 * from argv (keeping argv[argc] == NULL). */
static acx_status_t argv_strip(int *argc, char ***argv, argv_opts_t *o) {
    if (argc == NULL || argv == NULL || *argv == NULL) return ACX_OK;
    char **v = *argv;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = v[i];
        if (strcmp(a, "--") == 0) { /* the program's own options follow */
            while (i < *argc)
                v[out++] = v[i++];
            break;
        }
        if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
            if (a[8] == '=')
                o->config_file = a + 9;
            else if (i + 1 < *argc)
                o->config_file = v[++i];
            else
                return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "option --config needs a FILE argument");
            continue;
        }
        if (strcmp(a, "--debug") == 0) {
            if (o->n_overrides == ACX_MAX_OVERRIDES)
                return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "more than %d acx options",
                                 ACX_MAX_OVERRIDES);
            char *s = acx_malloc(sizeof "log_level=debug", "option");
            if (s == NULL) return ACX_ERR_NO_MEMORY;
            memcpy(s, "log_level=debug", sizeof "log_level=debug");
            o->overrides[o->n_overrides++] = s;
            continue;
        }
        if (strncmp(a, "--acx-", 6) == 0) {
            const char *key = a + 6, *eq = strchr(key, '=');
            size_t klen = eq ? (size_t)(eq - key) : strlen(key);
            /* --acx-KEY alone (last, or followed by another option) is
             * "KEY" with no value, which the config accepts for bool keys
             * (meaning true) and refuses, naming the key, for the others. */
            const char *value = NULL;
            if (eq)
                value = eq + 1;
            else if (i + 1 < *argc && strncmp(v[i + 1], "--", 2) != 0)
                value = v[++i];
            /* '.', '-' and '_' and case alike: --acx-dataloader-drop-last and
             * --acx-dataloader.drop_last both work */
            char given[256];
            const char *canon = NULL;
            if (klen < sizeof given) {
                memcpy(given, key, klen);
                given[klen] = '\0';
                canon = acx_config_key_name(acx_config_option_index(given));
            }
            if (canon == NULL)
                return ACX_ERROR(
                    ACX_ERR_INVALID_CONFIG,
                    "unknown option --acx-%.*s: no configuration key of that name "
                    "(see docs/config.md; e.g. --acx-seed=1, --acx-dataloader.drop_last=true)",
                    (int)klen, key);
            if (o->n_overrides == ACX_MAX_OVERRIDES)
                return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "more than %d --acx-* options",
                                 ACX_MAX_OVERRIDES);
            size_t n = strlen(canon) + (value ? strlen(value) : 0) + 2;
            char *s = acx_malloc(n, "option");
            if (s == NULL) return ACX_ERR_NO_MEMORY;
            if (value)
                snprintf(s, n, "%s=%s", canon, value);
            else
                snprintf(s, n, "%s", canon);
            o->overrides[o->n_overrides++] = s;
            continue;
        }
        v[out++] = v[i];
    }
    *argc = out;
    v[out] = NULL;
    return ACX_OK;
}

/* ---- topology ---- */

static acx_status_t discover_topology(acx_accelerator_t *acc) {
    MPI_Comm node;
    ACX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &acc->rank));
    ACX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &acc->world_size));
    ACX_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, acc->rank, MPI_INFO_NULL, &node));
    MPI_Comm_rank(node, &acc->local_rank);
    MPI_Comm_size(node, &acc->local_size);
    int leader = acc->local_rank == 0, before = 0;
    acx_status_t status = ACX_OK;
    ACX_MPI_CHECK_GOTO(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), status,
                       out);
    if (acc->rank == 0) before = 0; /* MPI_Exscan leaves rank 0's result undefined */
    ACX_MPI_CHECK_GOTO(MPI_Bcast(&before, 1, MPI_INT, 0, node), status, out);
    acc->node_rank = before;
    ACX_MPI_CHECK_GOTO(MPI_Allreduce(&leader, &acc->num_nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                       status, out);
out:
    MPI_Comm_free(&node);
    return status;
}

/* ranks_per_node > 0: pretend every `ranks_per_node` consecutive ranks are
 * one node (HYBRID_SHARD testing on one machine; also a way to group ranks
 * of a large node). Same result on every rank: it depends only on the
 * agreed config and the world size. */
static acx_status_t simulate_nodes(acx_accelerator_t *acc) {
    int rpn = acc->config.values.ranks_per_node;
    if (rpn <= 0) return ACX_OK;
    if (acc->world_size % rpn != 0) {
        const acx_config_origin_t *o = NULL;
        int k = acx_config_key_index("ranks_per_node");
        if (k >= 0) o = &acc->config.origin[k];
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "ranks_per_node=%d (from %s) does not divide the world size %d: every "
                         "simulated node needs the same number of ranks",
                         rpn, o == NULL || o->source == ACX_SRC_DEFAULT ? "default" : o->where,
                         acc->world_size);
    }
    acc->local_rank = acc->rank % rpn;
    acc->local_size = rpn;
    acc->node_rank = acc->rank / rpn;
    acc->num_nodes = acc->world_size / rpn;
    ACX_INFO(ACX_SUBSYS_INIT,
             "ranks_per_node=%d: simulating %d node(s); this rank is local rank %d of node %d", rpn,
             acc->num_nodes, acc->local_rank, acc->node_rank);
    return ACX_OK;
}

static const char *env_lookup(const char *name) { return getenv(name); }

/* Every rank must resolve the same configuration (a different ACX_* value
 * or config file on one rank would silently change, e.g., its data order).
 * Compare a hash of each key's value across ranks; on a mismatch every rank
 * reports its own value and origin for the first differing key. log_level
 * may differ per rank (debugging one rank is legitimate). Collective. */
static acx_status_t check_config_agrees(acx_accelerator_t *acc) {
    uint64_t h[ACX_CONFIG_MAX_KEYS], lo[ACX_CONFIG_MAX_KEYS], hi[ACX_CONFIG_MAX_KEYS];
    int nk = acx_config_num_keys();
    for (int k = 0; k < nk; k++) {
        char value[1024];
        acx_config_format_value(&acc->config, k, value, sizeof value);
        uint64_t x = 1469598103934665603ull;
        for (const char *p = value; *p; p++)
            x = (x ^ (unsigned char)*p) * 1099511628211ull;
        h[k] = strcmp(acx_config_key_name(k), "log_level") == 0 ? 0 : x;
    }
    ACX_MPI_CHECK(MPI_Allreduce(h, lo, nk, MPI_UINT64_T, MPI_MIN, acc->world->mpi));
    ACX_MPI_CHECK(MPI_Allreduce(h, hi, nk, MPI_UINT64_T, MPI_MAX, acc->world->mpi));
    for (int k = 0; k < nk; k++) {
        if (lo[k] == hi[k]) continue;
        char value[256];
        acx_config_format_value(&acc->config, k, value, sizeof value);
        const acx_config_origin_t *o = &acc->config.origin[k];
        return ACX_ERROR(
            ACX_ERR_INVALID_CONFIG,
            "ranks resolved different values for '%s' (rank %d has %s, from %s): every "
            "rank must see the same config file, ACX_* environment and --acx options",
            acx_config_key_name(k), acc->rank, value,
            o->source == ACX_SRC_DEFAULT ? "default" : o->where);
    }
    return ACX_OK;
}

/* Where model state lives (device_state): NULL (host memory), the CUDA
 * device table, or the emulated test device. auto is cuda with a backend
 * on device memory (NCCL), else host. With cuda and the MPI backend the
 * device is bound here (local rank modulo devices), as acx_coll_device_setup
 * (collectives/coll.h) does for NCCL. The emulated device goes with a host-memory backend (MPI
 * stages it) or with the NCCL test double (acx_coll_select picks it for
 * backend: nccl with device_state: emulated), never with the real NCCL.
 * Not collective (the caller agrees on the status). */
static acx_status_t select_device_state(acx_accelerator_t *acc) {
    int ds = acc->config.values.device_state;
    int on_device = acc->coll->device_memory;
    char why[256] = "";
    if (ds == ACX_DEVICE_STATE_AUTO) ds = on_device ? ACX_DEVICE_STATE_CUDA : ACX_DEVICE_STATE_HOST;
    acc->dev = NULL;
    switch (ds) {
    case ACX_DEVICE_STATE_HOST:
        if (on_device)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "device_state: host with backend: %s: that backend reduces device "
                             "memory only; use device_state: cuda (or auto), or backend: mpi",
                             acc->coll->name);
        return ACX_OK;
    case ACX_DEVICE_STATE_CUDA:
        if (acc->coll->emulated)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "device_state: cuda with backend: %s: the NCCL test double moves "
                             "the emulated device's memory only; use device_state: emulated",
                             acc->coll->name);
        acc->dev = acx_devops_cuda(why, sizeof why);
        if (acc->dev == NULL)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED, "device_state: cuda: %s", why);
        if (!on_device) ACX_CHECK(acx_device_use(acc->local_rank, acc->local_size));
        ACX_INFO(ACX_SUBSYS_INIT,
                 "device_state: cuda: parameters, gradients and optimizer state "
                 "in the memory of device %d",
                 acx_device_bound());
        return ACX_OK;
    case ACX_DEVICE_STATE_EMULATED:
        if (on_device && !acc->coll->emulated)
            return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                             "device_state: emulated with backend: %s: the emulated device is a "
                             "CPU test double that only a host-memory backend or the NCCL test "
                             "double can move; use backend: mpi, or backend: nccl (which picks "
                             "the double with device_state: emulated)",
                             acc->coll->name);
        acc->dev = &acx_devops_emulated;
        if (acc->rank == 0)
            ACX_WARN(ACX_SUBSYS_INIT,
                     "device_state: emulated: model state lives in the EMULATED device, a CPU "
                     "test double of the CUDA path (for testing device code without a GPU; slow, "
                     "not for training)");
        return ACX_OK;
    default:
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "device_state %d is not one of auto, host, cuda, "
                         "emulated",
                         ds);
    }
}

/* offload_optimizer: cpu moves the optimizer out of device memory. With
 * model state in host memory (device_state: host, e.g. an Accelerate FSDP
 * file with fsdp_offload_params: true run on CPU ranks) the master weights
 * and optimizer state are there already: the setting is satisfied as it
 * stands, and the log says so. The strategy (NO_SHARD only with device
 * state) is checked at acx_prepare with the device_state one
 * (sharding/model.c). Not collective. */
static acx_status_t check_offload(const acx_accelerator_t *acc) {
    if (acc->config.values.offload_optimizer != ACX_OFFLOAD_CPU) return ACX_OK;
    if (acc->dev == NULL) {
        if (acc->rank == 0)
            ACX_INFO(ACX_SUBSYS_INIT,
                     "offload_optimizer: cpu: model state is in host memory already "
                     "(device_state: %s%s), so there is nothing to offload; the step runs on "
                     "the CPU as it would anyway",
                     acx_device_state_name(acc->config.values.device_state),
                     acc->config.values.device_state == ACX_DEVICE_STATE_AUTO
                         ? ", which is host with this backend"
                         : "");
        return ACX_OK;
    }
    ACX_INFO(ACX_SUBSYS_INIT,
             "offload_optimizer: cpu: fp32 master weights and optimizer state "
             "in host memory, the step on the CPU; parameters and gradients "
             "in %s device memory",
             acc->dev->name);
    return ACX_OK;
}

/* ---- lifecycle ---- */

static void accelerator_free(acx_accelerator_t *acc);

ACX_API acx_status_t acx_init(int *argc, char ***argv, const acx_config_t *config,
                              acx_accelerator_t **acc_p) {
    acx_status_t status = ACX_OK;
    argv_opts_t opts = {0};
    if (acc_p == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_init: acc_p must not be NULL");
    if (config != NULL && config->size == 0)
        return ACX_ERROR(
            ACX_ERR_INVALID_ARG,
            "acx_init: config->size is 0: initialize the struct with ACX_CONFIG_DEFAULT");

    acx_accelerator_t *acc = acx_calloc(1, sizeof *acc, "accelerator");
    if (acc == NULL) return ACX_ERR_NO_MEMORY;
    acc->device = -1;
    if (gethostname(acc->host, sizeof acc->host) != 0) snprintf(acc->host, sizeof acc->host, "?");
    acc->host[sizeof acc->host - 1] = '\0';
    char *dot = strchr(acc->host, '.');
    if (dot) *dot = '\0';

    /* An argv error is reported after MPI is up, so every rank agrees. */
    acx_status_t argv_status = argv_strip(argc, argv, &opts);
    char argv_error[ACX_ERRMSG_MAX];
    snprintf(argv_error, sizeof argv_error, "%s", acx_last_error());

    /* The configuration needs no MPI: resolved now, its outcome agreed once
     * MPI is up. Preemption handlers go in before MPI_Init_thread, so a
     * signal during MPI's start is kept for the first boundary (preempt.c). */
    acx_status_t config_status =
        acx_config_resolve(config, opts.config_file, opts.n_overrides,
                           (const char *const *)opts.overrides, env_lookup, &acc->config);
    if (config_status == ACX_OK) config_status = acx_preempt_install(acc);
    char config_error[ACX_ERRMSG_MAX];
    snprintf(config_error, sizeof config_error, "%s", acx_last_error());
    acx_preempt_test_raise();

    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        int ret = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (ret != MPI_SUCCESS) {
            status = acx_error_mpi(ret, "MPI_Init_thread", __FILE__, __LINE__);
            goto err_free;
        }
        acc->mpi_owned = 1;
    }
    /* Return MPI errors as codes instead of aborting, so they become acx statuses. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ACX_CHECK_GOTO(discover_topology(acc), status, err_mpi);
    acx_log_setup(acc->rank, acc->world_size, ACX_LOG_WARN,
                  NULL); /* subsystems once the level is known */

    /* The world communicator exists before the config is known because the
     * config outcome is agreed over it; it speaks MPI, as agreement always does. */
    ACX_CHECK_GOTO(acx_comm_create(MPI_COMM_WORLD, &acx_coll_mpi_ops, &acc->world), status,
                   err_mpi);

    acx_launch_env_detect(env_lookup, &acc->launch);
    status = acx_launch_env_check(&acc->launch, acc->world_size);
    if (status == ACX_OK && argv_status != ACX_OK)
        status = acx_error_set_raw(argv_status, argv_error);
    if (status == ACX_OK && config_status != ACX_OK)
        status = acx_error_set_raw(config_status, config_error);
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, err_comm);

    const acx_config_t *c = &acc->config.values;
    acx_log_setup(acc->rank, acc->world_size, c->log_level, acx_env_text(ACX_ENV_LOG_SUBSYS));
    if (acc->rank == 0) acx_config_log_warnings(&acc->config, acc->world_size);
    ACX_CHECK_GOTO(check_config_agrees(acc), status, err_comm);
    /* An ACX_* variable no setting registers is most likely a typo
     * (ACX_SEEED), silently ignored otherwise: warn once, on the main process. */
    if (acc->rank == 0) acx_env_warn_unknown();
    /* agreed: a rank that sees no device must not leave while the others
     * go on to bootstrap NCCL */
    status = acx_coll_select((acx_backend_kind_t)c->backend, (acx_device_state_t)c->device_state,
                             &acc->coll);
    status = acx_coll_agree(acc->world, status);
    if (status != ACX_OK) goto err_comm;
    /* the device (device/device.c) before a device backend's communicators use it */
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, acx_coll_device_setup(acc->coll, acc->local_rank,
                                                                    acc->local_size)),
                   status, err_comm);
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, select_device_state(acc)), status, err_comm);
    acc->device = acx_device_bound();
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, check_offload(acc)), status, err_comm);
    /* a device-memory backend gets its own world; the MPI one stays for
     * host data */
    acc->world_host = acc->world;
    if (acc->coll->device_memory)
        ACX_CHECK_GOTO(acx_comm_create(MPI_COMM_WORLD, acc->coll, &acc->world), status, err_comm);
    /* the launcher's numbering is compared with MPI's real one, before
     * ranks_per_node may replace the local rank with a simulated one */
    char mismatch[512];
    if (acx_launch_env_check_rank(&acc->launch, acc->rank, acc->local_rank, mismatch,
                                  sizeof mismatch))
        ACX_WARN(ACX_SUBSYS_LAUNCH, "%s", mismatch);
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, simulate_nodes(acc)), status, err_comm);
    acx_scaler_init(&acc->scaler, c);
    if (c->collective_timeout > 0 && isfinite(c->collective_timeout))
        ACX_CHECK_GOTO(acx_coll_agree(acc->world, acx_watchdog_start(
                                                      c->collective_timeout, c->checkpoint_timeout,
                                                      acc->rank, acc->host, &acc->step)),
                       status, err_comm);
    ACX_CHECK_GOTO(acx_comm_split(acc->world, acc->node_rank, acc->local_rank, &acc->node), status,
                   err_comm);
    ACX_CHECK_GOTO(acx_coll_debug_init(acc), status, err_comm); /* ACX_DEBUG_MODE, agreed */

    if (acx_log_enabled(ACX_LOG_INFO, ACX_SUBSYS_LAUNCH)) {
        char line[2048];
        acx_launch_env_format(&acc->launch, line, sizeof line);
        ACX_INFO(ACX_SUBSYS_LAUNCH, "%s", line);
    } else if (acc->launch.warnings[0] != '\0') {
        ACX_WARN(ACX_SUBSYS_LAUNCH, "launcher environment: %s", acc->launch.warnings);
    }
    ACX_INFO(
        ACX_SUBSYS_INIT,
        "acx %s: rank %d/%d, local rank %d/%d, node %d/%d on %s; launcher %s; backend %s; MPI %s",
        acx_version(), acc->rank, acc->world_size, acc->local_rank, acc->local_size, acc->node_rank,
        acc->num_nodes, acc->host, acc->launch.launcher, acc->coll->name,
        acc->mpi_owned ? "initialized by acx" : "adopted from the program");
    if (acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_INIT)) {
        for (int k = 0; k < acx_config_num_keys(); k++) {
            char value[256];
            acx_config_format_value(&acc->config, k, value, sizeof value);
            const acx_config_origin_t *o = &acc->config.origin[k];
            ACX_DEBUG(ACX_SUBSYS_INIT, "config %s = %s (%s%s%s)", acx_config_key_name(k), value,
                      o->source == ACX_SRC_DEFAULT ? "default" : "from ", o->where, "");
        }
    }
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, acx_preempt_init(acc)), status, err_comm);
    argv_opts_free(&opts);
    acc->sync = 1;
    *acc_p = acc;
    return ACX_OK;

err_comm:
    acx_watchdog_stop();
    acx_comm_destroy(acc->node);
    if (acc->world_host != acc->world) acx_comm_destroy(acc->world_host);
    acx_comm_destroy(acc->world);
    acc->node = acc->world = acc->world_host = NULL;
err_mpi:
    if (acc->mpi_owned) MPI_Finalize();
err_free:
    acx_preempt_fini(acc);
    argv_opts_free(&opts);
    free(acc);
    return status;
}

static void accelerator_free(acx_accelerator_t *acc) {
    for (int i = acc->num_loaders - 1; i >= 0; i--)
        acx_loader_free(acc->loaders[i]);
    /* device state: the optimizer's last step may still run on the compute
     * stream, and the device table's free waits for nothing */
    for (int i = 0; acc->dev != NULL && i < acc->num_models; i++)
        (void)acc->dev->sync(acc->models[i]->ctx.stream);
    for (int i = acc->num_optimizers - 1; i >= 0; i--)
        acx_optimizer_free(acc->optimizers[i]);
    for (int i = acc->num_models - 1; i >= 0; i--)
        acx_model_free(acc->models[i]);
    acx_mem_cache_empty(); /* whatever was freed after the models, too */
    acx_devcache_empty();
    free(acc->loaders);
    free(acc->optimizers);
    free(acc->models);
    acx_checkpoint_free(acc);
    acx_project_free(acc); /* releases the project lock */
    acx_preempt_fini(acc);
    acx_comm_destroy(acc->node); /* the stall detector stops after: acx_finalize */
    if (acc->world_host != acc->world) acx_comm_destroy(acc->world_host);
    acx_comm_destroy(acc->world);
    free(acc);
}

/* Every wait of finalize has a limit: the barrier and the teardown under
 * the stall detector (a rank that never arrives is named), then the
 * detector's own teardown (the MPI_Win_free of its table) and MPI_Finalize
 * under a plain deadline of collective_timeout, whose line names the step
 * that did not complete. */
ACX_API acx_status_t acx_finalize(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_OK;
    acx_status_t status = ACX_OK;
    acx_watch_enter("acx_finalize");
    int pending = acx_requests_drain(acc);
    if (pending > 0)
        ACX_WARN(ACX_SUBSYS_COLL,
                 "acx_finalize: completed %d non-blocking collective(s) the program "
                 "never waited for (call acx_request_wait)",
                 pending);
    if (acc->world != NULL) status = acc->world->ops->barrier(acc->world);
    int owned = acc->mpi_owned, rank = acc->rank;
    double limit = acc->config.values.collective_timeout;
    char host[sizeof acc->host];
    memcpy(host, acc->host, sizeof host);
    accelerator_free(acc);
    acx_watch_exit();
    /* the test suite's: this rank stops past the watched part (stall_stopped.test) */
    int64_t stop;
    if (acx_env_int(ACX_ENV_TEST_FINALIZE_STOP_RANK, &stop) == 1 && stop == rank)
        kill(getpid(), SIGSTOP);
    int deadline =
        limit > 0 && isfinite(limit) &&
        acx_deadline_start(limit, "acx_finalize", "the stall detector's teardown (MPI_Win_free)",
                           rank, host) == ACX_OK;
    acx_watchdog_stop();
    if (owned) {
        acx_deadline_step("MPI_Finalize");
        int ret = MPI_Finalize();
        if (ret != MPI_SUCCESS && status == ACX_OK)
            status = acx_error_mpi(ret, "MPI_Finalize", __FILE__, __LINE__);
    }
    if (deadline) acx_deadline_stop();
    return status;
}

ACX_API void acx_abort(acx_accelerator_t *acc, int code, const char *message) {
    acx_log_write(ACX_LOG_ERROR, ACX_SUBSYS_ALL, "aborting the job (code %d): %s", code,
                  message ? message : "(no message)");
    acx_coll_abort_all(); /* live NCCL communicators: end their kernels */
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1); /* MPI_Abort does not return; without MPI there is nothing else */
}

/* ---- topology accessors ---- */

/* NULL gives -1 (0 for the predicates) rather than a crash: these are
 * called from printf-style code where a status check is unusual. */
ACX_API int acx_rank(const acx_accelerator_t *acc) { return acc ? acc->rank : -1; }
ACX_API int acx_world_size(const acx_accelerator_t *acc) { return acc ? acc->world_size : -1; }
ACX_API int acx_local_rank(const acx_accelerator_t *acc) { return acc ? acc->local_rank : -1; }
ACX_API int acx_local_size(const acx_accelerator_t *acc) { return acc ? acc->local_size : -1; }
ACX_API int acx_num_nodes(const acx_accelerator_t *acc) { return acc ? acc->num_nodes : -1; }
ACX_API int acx_node_rank(const acx_accelerator_t *acc) { return acc ? acc->node_rank : -1; }
ACX_API int acx_is_main_process(const acx_accelerator_t *acc) { return acc && acc->rank == 0; }
ACX_API int acx_is_local_main_process(const acx_accelerator_t *acc) {
    return acc && acc->local_rank == 0;
}
ACX_API int acx_device(const acx_accelerator_t *acc) { return acc ? acc->device : -1; }
ACX_API acx_device_state_t acx_device_state(const acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_DEVICE_STATE_AUTO;
    if (acc->dev == NULL) return ACX_DEVICE_STATE_HOST;
    return acc->dev->emulated ? ACX_DEVICE_STATE_EMULATED : ACX_DEVICE_STATE_CUDA;
}

ACX_API const acx_config_t *acx_get_config(const acx_accelerator_t *acc) {
    return acc ? &acc->config.values : NULL;
}

ACX_API acx_status_t acx_set_compute_stream(acx_accelerator_t *acc, void *stream) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_set_compute_stream: acc is NULL");
    if (acc->dev == NULL && stream != NULL)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_set_compute_stream: model state is in host memory (device_state: "
                         "host); a compute stream applies to device_state: cuda");
    /* the device work acx enqueues waits for what the program enqueued on
     * the old stream too: drain it before switching */
    for (int i = 0; acc->dev != NULL && i < acc->num_models; i++) {
        ACX_CHECK(acc->dev->sync(acc->models[i]->ctx.stream));
        /* drained: the device cache's blocks freed on it may serve the new
         * stream, and the old stream is never synchronized again (the
         * program may destroy it) */
        acx_devcache_stream_idle(acc->models[i]->ctx.stream);
    }
    /* every communicator acx_init made (the sharding layer's own splits,
     * e.g. NO_SHARD's checkpoint load groups, move host data over MPI) */
    ACX_CHECK(acx_coll_set_compute_stream(acc->world, stream));
    if (acc->node != NULL) ACX_CHECK(acx_coll_set_compute_stream(acc->node, stream));
    acc->compute_stream = stream;
    for (int i = 0; i < acc->num_models; i++)
        acc->models[i]->ctx.stream = stream;
    return ACX_OK;
}

/* ---- agreement of per-rank arguments ---- */

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
    return fnv_bytes(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

/* ACX_OK when every rank passed the same hash; otherwise an error on every
 * rank naming `what` and this rank's own `detail`, so each rank's message
 * shows what it had. Collective (two small all-reduces, watched: a rank
 * that never makes the call ends the job with the stall detector's line). */
static acx_status_t agree_on(acx_accelerator_t *acc, uint64_t h, const char *what,
                             const char *detail) {
    uint64_t lo, hi;
    ACX_MPI_CHECK(ACX_WATCHED("argument agreement",
                              MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, acc->world->mpi)));
    ACX_MPI_CHECK(ACX_WATCHED("argument agreement",
                              MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, acc->world->mpi)));
    if (lo == hi) return ACX_OK;
    return ACX_ERROR(ACX_ERR_INVALID_ARG,
                     "ranks passed different %s (rank %d: %s); every rank must make the same call",
                     what, acc->rank, detail);
}

/* ---- owned objects ---- */

static acx_status_t push(void ***arr, int *n, int *cap, void *obj) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 4;
        void **p = realloc(*arr, (size_t)nc * sizeof *p);
        if (p == NULL)
            return ACX_ERROR(ACX_ERR_NO_MEMORY, "cannot grow the accelerator's object list");
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = obj;
    return ACX_OK;
}

ACX_API acx_status_t acx_model_create(acx_accelerator_t *acc, acx_model_t **model_p) {
    if (acc == NULL || model_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_model_create: acc and model_p must not be NULL");
    const acx_config_t *c = &acc->config.values;
    acx_shard_context_t ctx = {
        .world = acc->world,
        .node = acc->node,
        .seed = (uint64_t)c->seed,
        .strategy = c->sharding_strategy,
        .bucket_bytes = (size_t)(c->bucket_size_mb * 1024.0 * 1024.0),
        .param_dtype = c->mixed_precision == ACX_MP_BF16   ? ACX_DTYPE_BFLOAT16
                       : c->mixed_precision == ACX_MP_FP16 ? ACX_DTYPE_FLOAT16
                                                           : ACX_DTYPE_FLOAT32,
        .reduce_dtype = c->reduce_dtype == ACX_REDUCE_BF16   ? ACX_DTYPE_BFLOAT16
                        : c->reduce_dtype == ACX_REDUCE_FP16 ? ACX_DTYPE_FLOAT16
                                                             : ACX_DTYPE_FLOAT32,
        .forward_prefetch = c->fsdp.forward_prefetch > 0,
        .backward_prefetch =
            c->fsdp.backward_prefetch >= 0 ? c->fsdp.backward_prefetch : ACX_BACKWARD_PRE,
        .limit_all_gathers = c->fsdp.limit_all_gathers >= 0 ? c->fsdp.limit_all_gathers : 2,
        .owner = acc,
        .dev = acc->dev,
        .stream = acc->compute_stream,
        /* with host state the optimizer is on the host already (check_offload) */
        .offload = c->offload_optimizer == ACX_OFFLOAD_CPU && acc->dev != NULL,
        /* ACX_DEBUG_MODE was read and agreed on at acx_init */
        .unit_check = acc->coll_debug == ACX_COLL_DEBUG_ON ? acx_coll_debug_unit_check : NULL,
    };
    if (ctx.bucket_bytes < sizeof(float)) ctx.bucket_bytes = sizeof(float);
    acx_model_t *m = NULL;
    ACX_CHECK(acx_model_new(&ctx, &m));
    acx_status_t status = push((void ***)&acc->models, &acc->num_models, &acc->cap_models, m);
    if (status != ACX_OK) {
        acx_model_free(m);
        return status;
    }
    *model_p = m;
    return ACX_OK;
}

/* Called by runtime/optimizer.c when an optimizer is created. */
acx_status_t acx_accelerator_adopt_optimizer(acx_accelerator_t *acc, acx_optimizer_t *opt) {
    return push((void ***)&acc->optimizers, &acc->num_optimizers, &acc->cap_optimizers, opt);
}

static int resolve_flag(int requested, int configured) {
    return requested == ACX_UNSET ? configured : requested;
}

/* The program's loader options with every ACX_UNSET flag replaced by the
 * accelerator's resolved dataloader.* config (sample and token loaders). */
static acx_dataloader_options_t resolve_options(const acx_accelerator_t *acc,
                                                const acx_dataloader_options_t *opts) {
    const acx_dataloader_config_t *dc = &acc->config.values.dataloader;
    acx_dataloader_options_t o = *opts;
    o.drop_last = resolve_flag(o.drop_last, dc->drop_last);
    o.even_batches = resolve_flag(o.even_batches, dc->even_batches);
    o.split_batches = resolve_flag(o.split_batches, dc->split_batches);
    o.prefetch = resolve_flag(o.prefetch, dc->prefetch);
    return o;
}

static acx_status_t dataloader_open(acx_accelerator_t *acc, const char *path, int num_datasets,
                                    const char *const *dataset_names,
                                    const acx_dataloader_options_t *opts,
                                    acx_dataloader_t **loader_p);
static acx_status_t open_resolved(acx_accelerator_t *acc, const char *path, int num_datasets,
                                  const char *const *dataset_names, int64_t seq_len,
                                  const acx_dataloader_options_t *opts,
                                  acx_dataloader_t **loader_p);

/* One watch with checkpoint.timeout over the open: its agreements follow
 * file I/O (collectives/watchdog.h). */
ACX_API acx_status_t acx_dataloader_open(acx_accelerator_t *acc, const char *path, int num_datasets,
                                         const char *const *dataset_names,
                                         const acx_dataloader_options_t *opts,
                                         acx_dataloader_t **loader_p) {
    acx_watch_enter_io("dataset open");
    acx_status_t status = dataloader_open(acc, path, num_datasets, dataset_names, opts, loader_p);
    acx_watch_exit();
    return status;
}

static acx_status_t dataloader_open(acx_accelerator_t *acc, const char *path, int num_datasets,
                                    const char *const *dataset_names,
                                    const acx_dataloader_options_t *opts,
                                    acx_dataloader_t **loader_p) {
    if (acc == NULL || loader_p == NULL || opts == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_dataloader_open: acc, opts and loader_p must not be NULL");
    acx_dataloader_options_t o = resolve_options(acc, opts);
    return open_resolved(acc, path, num_datasets, dataset_names, 0, &o, loader_p);
}

/* Agree on the arguments, open (a token loader when seq_len > 0), and
 * register the loader with acc. o: resolved. */
static acx_status_t open_resolved(acx_accelerator_t *acc, const char *path, int num_datasets,
                                  const char *const *dataset_names, int64_t seq_len,
                                  const acx_dataloader_options_t *opts,
                                  acx_dataloader_t **loader_p) {
    acx_dataloader_options_t o = *opts;
    /* A rank with another batch size or other datasets would silently
     * desynchronize every later collective: compare the arguments first.
     * The path may differ (node-local copies of the data are common); a
     * missing file on one rank is reported by the open itself. */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < num_datasets && dataset_names != NULL; i++)
        h = fnv_str(h, dataset_names[i]);
    int64_t args[9] = {num_datasets,    o.batch_size, o.shuffle, o.drop_last, o.even_batches,
                       o.split_batches, o.prefetch,   o.cycle,   seq_len};
    h = fnv_bytes(h, args, sizeof args);
    char detail[512];
    snprintf(detail, sizeof detail,
             "%d dataset(s), batch_size %lld, shuffle %d, drop_last %d, "
             "even_batches %d, split_batches %d, prefetch %d, cycle %d, seq_len %lld",
             num_datasets, (long long)o.batch_size, o.shuffle, o.drop_last, o.even_batches,
             o.split_batches, o.prefetch, o.cycle, (long long)seq_len);
    ACX_CHECK(agree_on(acc, h,
                       seq_len > 0 ? "arguments to acx_token_loader_open"
                                   : "arguments to acx_dataloader_open",
                       detail));
    acx_dataloader_t *l = NULL;
    uint64_t seed = (uint64_t)acc->config.values.seed;
    if (seq_len > 0)
        ACX_CHECK(
            acx_loader_open_tokens(acc->world, seed, path, dataset_names[0], seq_len, &o, &l));
    else
        ACX_CHECK(acx_loader_open(acc->world, seed, path, num_datasets, dataset_names, &o, &l));
    acx_status_t status = push((void ***)&acc->loaders, &acc->num_loaders, &acc->cap_loaders, l);
    if (status != ACX_OK) {
        acx_loader_free(l);
        return status;
    }
    *loader_p = l;
    return ACX_OK;
}

ACX_API acx_status_t acx_token_loader_open(acx_accelerator_t *acc, const char *path,
                                           const char *dataset, int64_t seq_len,
                                           const acx_dataloader_options_t *opts,
                                           acx_dataloader_t **loader_p) {
    if (acc == NULL || loader_p == NULL || opts == NULL || dataset == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_token_loader_open: acc, dataset, opts and "
                                              "loader_p must not be NULL");
    /* seq_len 0 would open a sample loader: refuse it here (the same on
     * every rank, so no agreement is needed) */
    if (seq_len < 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_token_loader_open: seq_len %lld for '%s': expected >= 1",
                         (long long)seq_len, path != NULL ? path : "(null)");
    acx_dataloader_options_t o = resolve_options(acc, opts);
    acx_watch_enter_io("dataset open");
    acx_status_t status =
        open_resolved(acc, path, 1, (const char *const[]){dataset}, seq_len, &o, loader_p);
    acx_watch_exit();
    return status;
}

ACX_API acx_status_t acx_dataloader_close(acx_dataloader_t *loader) {
    /* The loader stays registered with its accelerator until acx_finalize
     * (which frees it); closing stops its thread and releases its file now. */
    return acx_loader_close(loader);
}

/* ---- training ---- */

ACX_API acx_status_t acx_prepare(acx_accelerator_t *acc, acx_model_t *model,
                                 acx_optimizer_t *optimizer, acx_dataloader_t *loader) {
    if (acc == NULL || model == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_prepare: acc and model must not be NULL");
    if (model->ctx.owner != acc)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_prepare: the model belongs to another accelerator");
    if (acc->model != NULL)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_prepare was already called (one prepared model per accelerator)");
    if (optimizer != NULL && acx_optimizer_model(optimizer) != model)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_prepare: the optimizer was created for another model");
    /* Every rank must register the same model (the buckets and, later, the
     * shards are planned independently on each rank from it). */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < acx_model_num_params(model); i++) {
        acx_param_t *p = acx_model_param(model, i);
        h = fnv_str(h, acx_param_name(p));
        h = fnv_bytes(h, acx_param_shape(p), (size_t)acx_param_ndim(p) * sizeof(int64_t));
    }
    char detail[256];
    snprintf(detail, sizeof detail, "%d parameters, %lld elements", acx_model_num_params(model),
             (long long)acx_model_numel(model));
    ACX_CHECK(agree_on(acc, h, "models to acx_prepare (names or shapes differ)", detail));
    if (loader != NULL) {
        /* Gradient synchronization needs the same number of steps on every
         * rank; without even_batches (and drop_last) ranks can get one batch
         * more or less, and the extra step would wait forever for the others. */
        int64_t nb = acx_dataloader_num_batches(loader), lo, hi;
        ACX_MPI_CHECK(
            ACX_WATCHED("batch count agreement",
                        MPI_Allreduce(&nb, &lo, 1, MPI_INT64_T, MPI_MIN, acc->world->mpi)));
        ACX_MPI_CHECK(
            ACX_WATCHED("batch count agreement",
                        MPI_Allreduce(&nb, &hi, 1, MPI_INT64_T, MPI_MAX, acc->world->mpi)));
        if (lo != hi)
            return ACX_ERROR(
                ACX_ERR_INVALID_CONFIG,
                "the training loader gives ranks different numbers of batches per epoch "
                "(this rank %lld, others between %lld and %lld): gradient synchronization "
                "needs the same number of steps on every rank; use "
                "dataloader.even_batches=true (pads the last batches) or "
                "dataloader.drop_last=true",
                (long long)nb, (long long)lo, (long long)hi);
    }
    acx_status_t status = acx_model_prepare(model);
    if (status == ACX_OK && optimizer != NULL) status = acx_optimizer_bind(optimizer);
    /* Storage failures are local (out of memory on one rank): agree, so no
     * rank goes on to train alone. */
    ACX_CHECK(acx_coll_agree(acc->world, status));
    acc->model = model;
    acc->optimizer = optimizer;
    acc->loader = loader;
    /* step mode (max_steps > 0): the training loader cycles epochs */
    acx_loader_set_training(loader, acc->config.values.max_steps > 0);
    acc->sync = 1;
    model->sync = 1;
    model->grad_prescale = 1.0f / (float)acc->world_size;
    /* the project directory (lock, refusal to replace an earlier run's
     * checkpoints, resume_from), then resume: auto */
    ACX_CHECK(acx_project_prepare(acc));
    return acx_preempt_prepared(acc);
}

ACX_API acx_status_t acx_accumulate_begin(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_accumulate_begin: acc is NULL");
    if (acc->model == NULL)
        return ACX_ERROR(ACX_ERR_STATE, "acx_accumulate_begin before acx_prepare");
    if (acc->in_micro_step)
        return ACX_ERROR(ACX_ERR_STATE, "acx_accumulate_begin twice without acx_accumulate_end");
    int k = acc->config.values.gradient_accumulation_steps;
    acc->in_micro_step = 1;
    acc->grads_reduced = 0;
    acc->items_reduced = 0;
    acc->micro_step++;
    acc->micro_since_sync++;
    /* The end of the loader's epoch is a boundary too (Accelerate's
     * end_of_dataloader), so no gradients leak into the next epoch — except
     * for a cycling loader (step mode): its stream has no end, and a forced
     * boundary there would make optimizer steps drift from micro-steps / k
     * (5 batches per epoch, k = 2: 6 program steps became 7 optimizer
     * steps). */
    int end_of_data =
        acc->loader != NULL && !acx_loader_cycles(acc->loader) &&
        acx_dataloader_position(acc->loader) > 0 &&
        acx_dataloader_position(acc->loader) == acx_dataloader_num_batches(acc->loader);
    acc->sync = acc->micro_since_sync >= k || end_of_data;
    acc->model->sync = acc->sync;
    /* Mean over ranks and over the micro-steps actually accumulated (a short
     * last window at the end of data divides by its own length). */
    acc->model->grad_prescale = 1.0f / ((float)acc->world_size * (float)acc->micro_since_sync);
    return ACX_OK;
}

ACX_API acx_status_t acx_accumulate_end(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_accumulate_end: acc is NULL");
    if (!acc->in_micro_step)
        return ACX_ERROR(ACX_ERR_STATE, "acx_accumulate_end without acx_accumulate_begin");
    acc->in_micro_step = 0;
    if (acc->sync) {
        acc->micro_since_sync = 0;
        acc->items_local = 0;
        acc->items_micro = 0;
        acc->step++;
        ACX_CHECK(acx_checkpoint_step_end(acc)); /* checkpoint.save_every_steps */
        return acx_preempt_step_end(acc);        /* a preemption signal: save and stop */
    }
    return ACX_OK;
}

ACX_API int acx_sync_gradients(const acx_accelerator_t *acc) { return acc ? acc->sync : 0; }

ACX_API acx_status_t acx_accumulate_items(acx_accelerator_t *acc, int64_t items) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_accumulate_items: acc is NULL");
    if (!acc->in_micro_step)
        return ACX_ERROR(ACX_ERR_STATE,
                         "acx_accumulate_items outside acx_accumulate_begin/end: "
                         "report each micro-batch's items inside its micro-step, before backward");
    if (items < 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_accumulate_items: items %lld; expected >= 0",
                         (long long)items);
    if (acc->items_last_micro != acc->micro_step) {
        acc->items_micro++;
        acc->items_last_micro = acc->micro_step;
    }
    acc->items_local += items;
    if (!acc->sync) return ACX_OK; /* no communication between boundaries */
    /* The boundary: the total over the accumulated micro-steps of every
     * rank, in one all-reduce, and the gradients are scaled once by its
     * inverse (they are sums over items, so this is the item mean). */
    int64_t total = acc->items_local;
    ACX_MPI_CHECK(
        ACX_WATCHED("accumulate_items",
                    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, acc->world->mpi)));
    acc->items_total = total;
    acc->items_reduced = 1;
    /* 0 items everywhere: nothing to average; keep the gradients (zeros) */
    acc->model->grad_prescale = total > 0 ? (float)(1.0 / (double)total) : 1.0f;
    return ACX_OK;
}

ACX_API int64_t acx_accumulated_items(const acx_accelerator_t *acc) {
    return acc != NULL ? acc->items_total : 0;
}

ACX_API acx_status_t acx_backward_end(acx_accelerator_t *acc) {
    if (acc == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_backward_end: acc is NULL");
    if (acc->model == NULL) return ACX_ERROR(ACX_ERR_STATE, "acx_backward_end before acx_prepare");
    acx_status_t status = acx_model_backward_end(acc->model);
    /* Global normalization is all or nothing within a window: a micro-step
     * without acx_accumulate_items leaves its items out of the total, and a
     * boundary without it never all-reduces the total, so the gradients
     * fall back to the mean over ranks and micro-steps — silently wrong
     * either way. Every rank runs the same program, so every rank sees it. */
    if (status == ACX_OK && acc->model->sync && acc->items_micro > 0 &&
        (acc->items_micro < acc->micro_since_sync || !acc->items_reduced))
        status = ACX_ERROR(ACX_ERR_STATE,
                           "acx_backward_end: acx_accumulate_items was called in %d of the %d "
                           "micro-step(s) since the last boundary%s: with global normalization "
                           "call it in every micro-step, before backward, so these gradients "
                           "are not normalized by the item total",
                           acc->items_micro, acc->micro_since_sync,
                           acc->items_reduced ? "" : ", not in the boundary's");
    acc->grads_reduced = status == ACX_OK && acc->model->sync;
    return status;
}

ACX_API int64_t acx_step(const acx_accelerator_t *acc) { return acc ? acc->step : -1; }
ACX_API int64_t acx_micro_step(const acx_accelerator_t *acc) { return acc ? acc->micro_step : -1; }

/* ---- printing ---- */

ACX_API void acx_print(const acx_accelerator_t *acc, const char *fmt, ...) {
    if (acc != NULL && acc->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

ACX_API void acx_print_local(const acx_accelerator_t *acc, const char *fmt, ...) {
    if (acc != NULL && acc->local_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

#define ACX_PRINT_MAX (64 * 1024)

/* Gather every rank's text to the main process, which prints them in rank
 * order: the only way to get ordered output, since launchers forward each
 * rank's stdout independently. */
ACX_API acx_status_t acx_print_ordered(acx_accelerator_t *acc, const char *fmt, ...) {
    if (acc == NULL || fmt == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_print_ordered: acc and fmt must not be NULL");
    acx_status_t status = ACX_OK;
    char *text = acx_malloc(ACX_PRINT_MAX, "ordered print");
    char *mine = acx_malloc(2 * ACX_PRINT_MAX, "ordered print"), *all = NULL;
    int *lens = NULL, *displs = NULL, n = 0;
    if (text != NULL && mine != NULL) {
        va_list ap;
        va_start(ap, fmt);
        int len = vsnprintf(text, ACX_PRINT_MAX, fmt, ap);
        va_end(ap);
        if (len < 0) len = 0;
        if (len >= ACX_PRINT_MAX) len = ACX_PRINT_MAX - 1;
        /* each rank prefixes its own lines: only it knows its host */
        char prefix[ACX_HOST_MAX + 48];
        int plen = snprintf(prefix, sizeof prefix, "[rank %d/%d %s] ", acc->rank, acc->world_size,
                            acc->host);
        for (int i = 0; i < len && n < 2 * ACX_PRINT_MAX - plen - 2;) {
            memcpy(mine + n, prefix, (size_t)plen);
            n += plen;
            while (i < len && text[i] != '\n' && n < 2 * ACX_PRINT_MAX - 2)
                mine[n++] = text[i++];
            mine[n++] = '\n';
            if (i < len && text[i] == '\n') i++;
        }
    } else {
        status = ACX_ERR_NO_MEMORY;
    }
    MPI_Comm comm = acc->world->mpi;
    if (status == ACX_OK && acc->rank == 0) {
        lens = acx_malloc((size_t)acc->world_size * sizeof *lens, "ordered print lengths");
        displs = acx_malloc((size_t)acc->world_size * sizeof *displs, "ordered print offsets");
        if (lens == NULL || displs == NULL) status = ACX_ERR_NO_MEMORY;
    }
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    ACX_MPI_CHECK_GOTO(
        ACX_WATCHED("print_ordered gather", MPI_Gather(&n, 1, MPI_INT, lens, 1, MPI_INT, 0, comm)),
        status, out);
    long total = 0;
    if (acc->rank == 0) {
        for (int r = 0; r < acc->world_size; r++) {
            displs[r] = (int)total;
            total += lens[r];
        }
        if (total > INT_MAX)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_print_ordered: %ld bytes in all; too much",
                               total);
        else if ((all = acx_malloc((size_t)total + 1, "ordered print text")) == NULL)
            status = ACX_ERR_NO_MEMORY;
    }
    ACX_CHECK_GOTO(acx_coll_agree(acc->world, status), status, out);
    ACX_MPI_CHECK_GOTO(ACX_WATCHED("print_ordered gather", MPI_Gatherv(mine, n, MPI_CHAR, all, lens,
                                                                       displs, MPI_CHAR, 0, comm)),
                       status, out);
    if (acc->rank == 0) {
        fwrite(all, 1, (size_t)total, stdout);
        fflush(stdout);
    }
out:
    free(text);
    free(mine);
    free(all);
    free(lens);
    free(displs);
    return status;
}
