/*
 * base/config_accelerate.c — reading an Accelerate default_config.yaml as
 * it is: which of its keys map onto acx's (distributed_type +
 * fsdp_config/deepspeed_config -> sharding_strategy, use_cpu -> backend,
 * ...), which are launch information (num_processes, main_process_ip, ...),
 * which acx ignores and which it cannot honour (collected into one
 * warning).
 *
 * Leaves to others: reading the YAML document and acx's own keys
 * (base/config.c, which hands over the Accelerate keys it meets), the keys
 * themselves (base/settings.c), and the documentation of the mapping with
 * its reasons (docs/config.md, "Accelerate config files": keep the two in
 * step). Adding an Accelerate key is adding a row to accel_table.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/config_file.h"
#include "base/error.h"

/* Whether a node is null, {} or []. */
static int is_empty_node(const yaml_node_t *node) {
    if (node->type == YAML_SEQUENCE_NODE)
        return node->data.sequence.items.top == node->data.sequence.items.start;
    if (node->type == YAML_MAPPING_NODE)
        return node->data.mapping.pairs.top == node->data.mapping.pairs.start;
    return acx_yaml_is_null(node);
}

/* ---- the Accelerate table ----
 *
 * Every key `accelerate config` writes (Accelerate 0.2x-1.x ClusterConfig,
 * plus the fsdp_config and deepspeed_config sub-keys), and what acx does
 * with it. docs/config.md has the same table with the reasons; keep the
 * two in step. A key is one of:
 *   ignored     meaningless for acx (Accelerate/torch machinery that acx
 *               does its own way, TPU settings, launcher details);
 *   info        launch information, kept read-only (acx_config_info_t);
 *   checked     its valid values are listed; those acx does not honour go
 *               to the warning ("cannot honour");
 *   false-only  a bool whose true acx cannot honour;
 *   empty-only  a mapping acx honours only when empty;
 *   section     fsdp_config / deepspeed_config: read only when
 *               distributed_type selects it, as Accelerate does;
 *   mapped      interpreted by its function onto acx's keys.
 */

typedef enum accel_kind {
    AK_IGNORED,
    AK_INFO,
    AK_CHECK,
    AK_FALSE,
    AK_EMPTY,
    AK_SECTION,
    AK_MAPPED
} accel_kind_t;

struct acx_yaml_ctx;
typedef acx_status_t (*accel_apply_fn)(struct acx_yaml_ctx *ctx, int ai, const char *text);

typedef struct accel_key {
    const char *name; /* "use_cpu", "fsdp_config.fsdp_offload_params" */
    accel_kind_t kind;
    const char *const *valid; /* AK_CHECK, AK_MAPPED: accepted spellings, any case; NULL = any */
    const char *const *fine;  /* AK_CHECK: the valid values acx honours; NULL = all of them */
    const char *target;       /* AK_INFO: the info row; AK_CHECK/FALSE/EMPTY: the warning's note */
    accel_apply_fn apply;     /* AK_MAPPED */
} accel_key_t;

static acx_status_t ah_distributed_type(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_use_cpu(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_strategy(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_reshard(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_zero_stage(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_ds_accumulation(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_backward_prefetch(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_forward_prefetch(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_limit(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_fsdp_offload(struct acx_yaml_ctx *ctx, int ai, const char *text);
static acx_status_t ah_ds_offload_optimizer(struct acx_yaml_ctx *ctx, int ai, const char *text);

/* distributed_type: data parallel on some device (acx picks the device
 * itself), the two sharded kinds, and what acx cannot run at all. */
/* clang-format off */
static const char *const dt_data_parallel[] = {
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_XPU",
    "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA", "MULTI_HPU", NULL};
static const char *const dt_unsupported[] = {"TPU", "XLA", "MEGATRON_LM", NULL};
static const char *const dt_valid[] = {
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_XPU",
    "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA", "MULTI_HPU",
    "FSDP", "DEEPSPEED", "TPU", "XLA", "MEGATRON_LM", NULL};
static const char *const compute_valid[] = {"LOCAL_MACHINE", "AMAZON_SAGEMAKER", NULL};
static const char *const compute_fine[] = {"LOCAL_MACHINE", NULL};
static const char *const all_fine[] = {"all", NULL};
static const char *const none_fine[] = {"none", NULL};
static const char *const offload_valid[] = {"none", "cpu", "nvme", NULL};
static const char *const fsdp_strategy_valid[] = {
    "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2",
    "1", "2", "3", "4", "5", NULL};
static const char *const state_dict_valid[] = {
    "FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT", "1", "2", "3", NULL};
static const char *const prefetch_valid[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH", NULL};
static const char *const zero_stage_valid[] = {"0", "1", "2", "3", NULL};

/* One row of each kind. */
#define AIGN(name)                 {name, AK_IGNORED, NULL, NULL, NULL, NULL}
#define AINFO(name, info, valid)   {name, AK_INFO, valid, NULL, info, NULL}
#define ACHECK(name, v, fine, why) {name, AK_CHECK, v, fine, why, NULL}
#define AFALSE(name, why)          {name, AK_FALSE, NULL, NULL, why, NULL}
#define AEMPTY(name, why)          {name, AK_EMPTY, NULL, NULL, why, NULL}
#define ASECTION(name)             {name, AK_SECTION, NULL, NULL, NULL, NULL}
#define AMAP(name, valid, fn)      {name, AK_MAPPED, valid, NULL, NULL, fn}
/* clang-format on */

#define NO_PARAM_OFFLOAD                                                                           \
    "ignored: acx keeps parameters in device memory (only the optimizer offloads: "                \
    "offload_optimizer)"

/* A section's rows follow each other, after the top-level rows. */
static const accel_key_t accel_table[] = {
    AIGN("command_file"),
    AIGN("commands"),
    ACHECK("compute_environment", compute_valid, compute_fine,
           "ignored: acx runs under mpirun, srun or acx launch"),
    AIGN("debug"),
    ASECTION("deepspeed_config"),
    AMAP("distributed_type", dt_valid, ah_distributed_type),
    AIGN("downcast_bf16"),
    AIGN("dynamo_backend"),
    AIGN("dynamo_config"),
    AIGN("enable_cpu_affinity"),
    AIGN("fp8_config"),
    ASECTION("fsdp_config"),
    ACHECK("gpu_ids", NULL, all_fine, "ignored: acx uses the devices the launcher makes visible"),
    AIGN("ipex_config"),
    AINFO("machine_rank", "machine_rank", NULL),
    AINFO("main_process_ip", "main_process_ip", NULL),
    AINFO("main_process_port", "main_process_port", NULL),
    AIGN("main_training_function"),
    AIGN("megatron_lm_config"),
    AIGN("mpirun_config"),
    AINFO("num_machines", "num_machines", NULL),
    AINFO("num_processes", "num_processes", NULL),
    AIGN("rdzv_backend"),
    AIGN("same_network"),
    AEMPTY("tp_config", "ignored: acx has no tensor parallelism"),
    AIGN("tpu_env"),
    AIGN("tpu_name"),
    AIGN("tpu_use_cluster"),
    AIGN("tpu_use_sudo"),
    AIGN("tpu_vm"),
    AIGN("tpu_zone"),
    AMAP("use_cpu", NULL, ah_use_cpu),

    AFALSE("fsdp_config.fsdp_activation_checkpointing",
           "ignored: the forward pass is the program's own code"),
    AIGN("fsdp_config.fsdp_auto_wrap_policy"),
    AMAP("fsdp_config.fsdp_backward_prefetch", prefetch_valid, ah_fsdp_backward_prefetch),
    AMAP("fsdp_config.fsdp_backward_prefetch_policy", prefetch_valid, ah_fsdp_backward_prefetch),
    AIGN("fsdp_config.fsdp_cpu_ram_efficient_loading"),
    AMAP("fsdp_config.fsdp_forward_prefetch", NULL, ah_fsdp_forward_prefetch),
    AMAP("fsdp_config.fsdp_limit_all_gathers", NULL, ah_fsdp_limit),
    AIGN("fsdp_config.fsdp_min_num_params"),
    AMAP("fsdp_config.fsdp_offload_params", NULL, ah_fsdp_offload),
    AMAP("fsdp_config.fsdp_reshard_after_forward", NULL, ah_fsdp_reshard),
    AMAP("fsdp_config.fsdp_sharding_strategy", fsdp_strategy_valid, ah_fsdp_strategy),
    ACHECK("fsdp_config.fsdp_state_dict_type", state_dict_valid, NULL, NULL),
    AIGN("fsdp_config.fsdp_sync_module_states"),
    AIGN("fsdp_config.fsdp_transformer_layer_cls_to_wrap"),
    AIGN("fsdp_config.fsdp_use_orig_params"),
    AIGN("fsdp_config.fsdp_version"),

    ACHECK("deepspeed_config.deepspeed_config_file", NULL, none_fine,
           "ignored: acx does not read DeepSpeed JSON files"),
    AIGN("deepspeed_config.deepspeed_exclusion_filter"),
    AIGN("deepspeed_config.deepspeed_hostfile"),
    AIGN("deepspeed_config.deepspeed_inclusion_filter"),
    AIGN("deepspeed_config.deepspeed_moe_layer_cls_names"),
    AIGN("deepspeed_config.deepspeed_multinode_launcher"),
    AMAP("deepspeed_config.gradient_accumulation_steps", NULL, ah_ds_accumulation),
    ACHECK("deepspeed_config.gradient_clipping", NULL, none_fine,
           "ignored: the program clips with acx_clip_grad_norm"),
    AMAP("deepspeed_config.offload_optimizer_device", offload_valid, ah_ds_offload_optimizer),
    AIGN("deepspeed_config.offload_optimizer_nvme_path"),
    ACHECK("deepspeed_config.offload_param_device", offload_valid, none_fine, NO_PARAM_OFFLOAD),
    AIGN("deepspeed_config.offload_param_nvme_path"),
    AIGN("deepspeed_config.zero3_init_flag"),
    AIGN("deepspeed_config.zero3_save_16bit_model"),
    AMAP("deepspeed_config.zero_stage", zero_stage_valid, ah_zero_stage),
};

#define NUM_ACCEL ((int)(sizeof accel_table / sizeof accel_table[0]))

_Static_assert(sizeof accel_table / sizeof accel_table[0] <= ACX_ACCEL_MAX_KEYS,
               "raise ACX_ACCEL_MAX_KEYS in config_file.h");

static int find_accel(const char *name) {
    for (int i = 0; i < NUM_ACCEL; i++)
        if (strcmp(accel_table[i].name, name) == 0) return i;
    return -1;
}

int acx_accel_find(const char *name) {
    return strchr(name, '.') == NULL ? find_accel(name) : -1; /* top level only */
}

void acx_accel_offer_keys(acx_name_match_t *m, const char *name) {
    for (int i = 0; i < NUM_ACCEL; i++)
        acx_name_match_offer(m, name, accel_table[i].name);
}

/* "one of: A, B, C" from a NULL-terminated list. */
static void describe_list(const char *const *list, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "one of:");
    for (int i = 0; list[i] != NULL && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s %s", i ? "," : "", list[i]);
}

/* A YAML 1.1 bool (true/false, yes/no, on/off, 1/0), or -1. */
static int parse_bool(const char *text) {
    static const acx_setting_t b = {.type = ACX_SETTING_BOOL};
    acx_setting_value_t v;
    return (text != NULL && acx_setting_parse(&b, text, &v)) ? (int)v.i : -1;
}

/* An Accelerate key carrying launch information. */
static acx_status_t info_set(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    const accel_key_t *r = &accel_table[ai];
    int ii = acx_config_info_index(r->target);
    if (ii < 0) return ACX_ERROR(ACX_ERR_INTERNAL, "no info row '%s'", r->target);
    return acx_config_file_set_info(ctx, ii, text, ctx->akey[ai], ctx->aval[ai], r->name);
}

/* Act on Accelerate row ai if the file has it. */
static acx_status_t accel_row(acx_yaml_ctx_t *ctx, int ai) {
    const accel_key_t *r = &accel_table[ai];
    yaml_node_t *k = ctx->akey[ai], *v = ctx->aval[ai];
    char accepted[512];
    if (k == NULL || r->kind == AK_IGNORED) return ACX_OK;
    if (r->kind == AK_SECTION) {
        if (v->type == YAML_MAPPING_NODE || acx_yaml_is_null(v)) return ACX_OK;
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key '%s' must be a mapping of its sub-keys, got %s", ctx->path,
                         acx_yaml_line(v), r->name, acx_yaml_kind(v));
    }
    if (r->kind == AK_EMPTY) {
        if (!is_empty_node(v)) acx_config_file_warn(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }
    if (acx_yaml_is_null(v)) return ACX_OK;
    const char *text = v->type == YAML_SCALAR_NODE ? acx_yaml_text(v) : NULL;
    if (r->kind == AK_CHECK && r->valid == NULL) { /* free-form: only `fine` is honoured */
        if (text == NULL || !acx_in_list(r->fine, text))
            acx_config_file_warn(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }

    if (r->valid != NULL)
        describe_list(r->valid, accepted, sizeof accepted);
    else if (r->kind == AK_INFO)
        acx_setting_describe(acx_config_info(acx_config_info_index(r->target)), accepted,
                             sizeof accepted);
    else if (r->kind == AK_FALSE)
        snprintf(accepted, sizeof accepted, "true or false");
    else
        snprintf(accepted, sizeof accepted, "a scalar");
    if (v->type != YAML_SCALAR_NODE)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s': expected %s, got %s", ctx->path,
                         acx_yaml_line(v), r->name, accepted, acx_yaml_kind(v));
    if (text == NULL || (r->valid != NULL && !acx_in_list(r->valid, text)))
        return acx_config_file_bad_value(ctx, r->name, v, text, accepted);

    switch (r->kind) {
    case AK_CHECK:
        if (r->fine != NULL && !acx_in_list(r->fine, text))
            acx_config_file_warn(ctx, r->name, k, v, r->target);
        return ACX_OK;
    case AK_FALSE: {
        int b = parse_bool(text);
        if (b < 0) return acx_config_file_bad_value(ctx, r->name, v, text, accepted);
        if (b) acx_config_file_warn(ctx, r->name, k, v, r->target);
        return ACX_OK;
    }
    case AK_INFO: return info_set(ctx, ai, text);
    case AK_MAPPED: return r->apply(ctx, ai, text);
    default: return ACX_OK;
    }
}

/* An unknown key of the file (full dotted name). In acx's own files it is
 * an error; an Accelerate file may carry keys of a newer Accelerate, so
 * there it goes to the warning, unless it looks like a typo of a known key. */

acx_status_t acx_accel_record(acx_yaml_ctx_t *ctx, int ai, yaml_node_t *knode, yaml_node_t *vnode) {
    if (ctx->akey[ai] != NULL)
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: key '%s' given twice (first at %s:%d)",
                         ctx->path, acx_yaml_line(knode), accel_table[ai].name, ctx->path,
                         acx_yaml_line(ctx->akey[ai]));
    ctx->akey[ai] = knode;
    ctx->aval[ai] = vnode;
    return ACX_OK;
}

/* Read the section `name` (fsdp_config, deepspeed_config): record its
 * keys, then act on them in table order. */
static acx_status_t accel_section(acx_yaml_ctx_t *ctx, const char *name) {
    int si = find_accel(name);
    yaml_node_t *map = si >= 0 ? ctx->aval[si] : NULL;
    size_t n = strlen(name);
    if (map != NULL && map->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
             pair < map->data.mapping.pairs.top; pair++) {
            yaml_node_t *knode = yaml_document_get_node(ctx->doc, pair->key);
            yaml_node_t *vnode = yaml_document_get_node(ctx->doc, pair->value);
            const char *ktext =
                knode && knode->type == YAML_SCALAR_NODE ? acx_yaml_text(knode) : NULL;
            if (ktext == NULL || vnode == NULL)
                return ACX_ERROR(ACX_ERR_INVALID_CONFIG, "%s:%d: expected a key name in '%s'",
                                 ctx->path, knode ? acx_yaml_line(knode) : 0, name);
            char full[300];
            snprintf(full, sizeof full, "%s.%s", name, ktext);
            int ai = find_accel(full);
            if (ai < 0)
                ACX_CHECK(acx_config_file_unknown(ctx, full, knode, vnode));
            else
                ACX_CHECK(acx_accel_record(ctx, ai, knode, vnode));
        }
    } else if (map != NULL && !acx_yaml_is_null(map)) {
        return accel_row(ctx, si); /* the "must be a mapping" error */
    }
    for (int ai = 0; ai < NUM_ACCEL; ai++)
        if (strncmp(accel_table[ai].name, name, n) == 0 && accel_table[ai].name[n] == '.')
            ACX_CHECK(accel_row(ctx, ai));
    return ACX_OK;
}

/* ---- the Accelerate mapping ---- */

static acx_status_t ah_distributed_type(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    yaml_node_t *v = ctx->aval[ai];
    if (acx_in_list(dt_data_parallel, text))
        return acx_config_file_set(ctx, "sharding_strategy", "no_shard", v, "distributed_type");
    if (acx_in_list(dt_unsupported, text))
        return ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                         "%s:%d: key 'distributed_type': acx cannot run '%s' (TPU/XLA and "
                         "Megatron-LM are not supported; acx runs data parallel (NO, MULTI_CPU, "
                         "MULTI_GPU, ...), FSDP and DEEPSPEED configurations)",
                         ctx->path, acx_yaml_line(v), text);
    if (strcasecmp(text, "FSDP") == 0) {
        ACX_CHECK(accel_section(ctx, "fsdp_config"));
        /* FULL_SHARD is Accelerate's default strategy. */
        if (!ctx->strategy_seen)
            return acx_config_file_set(ctx, "sharding_strategy", "full_shard", v,
                                       "distributed_type: FSDP");
        return ACX_OK;
    }
    /* DEEPSPEED: zero_stage, else Accelerate's default stage 2, unless a
     * DeepSpeed JSON file (which acx does not read) has the say. */
    ACX_CHECK(accel_section(ctx, "deepspeed_config"));
    int fi = find_accel("deepspeed_config.deepspeed_config_file");
    const yaml_node_t *f = ctx->aval[fi];
    int json = f != NULL && !acx_yaml_is_null(f) &&
               !(f->type == YAML_SCALAR_NODE && acx_yaml_text(f) &&
                 acx_in_list(none_fine, acx_yaml_text(f)));
    if (!ctx->strategy_seen && !json)
        return acx_config_file_set(ctx, "sharding_strategy", "shard_grad_op", v,
                                   "distributed_type: DEEPSPEED, ZeRO stage 2 by default");
    return ACX_OK;
}

static acx_status_t ah_use_cpu(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return acx_config_file_bad_value(ctx, "use_cpu", ctx->aval[ai], text, "true or false");
    return b ? acx_config_file_set(ctx, "backend", "mpi", ctx->aval[ai], "use_cpu") : ACX_OK;
}

/* FSDP's ShardingStrategy by name or by its number (1-5). */
static acx_status_t fsdp_strategy(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    static const struct {
        const char *name, *number, *acx;
    } map[] = {{"FULL_SHARD", "1", "full_shard"},
               {"SHARD_GRAD_OP", "2", "shard_grad_op"},
               {"NO_SHARD", "3", "no_shard"},
               {"HYBRID_SHARD", "4", "hybrid_shard"},
               {"HYBRID_SHARD_ZERO2", "5", NULL}};
    ctx->strategy_seen = 1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcasecmp(text, map[i].name) != 0 && strcmp(text, map[i].number) != 0) continue;
        if (map[i].acx != NULL)
            return acx_config_file_set(ctx, "sharding_strategy", map[i].acx, ctx->aval[ai],
                                       accel_table[ai].name);
        acx_config_file_warn(
            ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
            "ignored: acx has no HYBRID_SHARD_ZERO2; sharding_strategy not set from it");
        return ACX_OK;
    }
    return ACX_ERROR(ACX_ERR_INTERNAL, "fsdp strategy '%s' passed the check", text);
}

static acx_status_t ah_fsdp_strategy(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    return fsdp_strategy(ctx, ai, text);
}

/* FSDP2's bool (true: reshard = FULL_SHARD, false: SHARD_GRAD_OP), or, in
 * Accelerate's FSDP1 spelling, a strategy name. */
static acx_status_t ah_fsdp_reshard(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    if (acx_in_list(fsdp_strategy_valid, text) && parse_bool(text) < 0)
        return fsdp_strategy(ctx, ai, text);
    int b = parse_bool(text);
    if (b < 0)
        return acx_config_file_bad_value(
            ctx, accel_table[ai].name, ctx->aval[ai], text,
            "true, false, or a sharding strategy: FULL_SHARD, SHARD_GRAD_OP, "
            "NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2");
    ctx->strategy_seen = 1;
    return acx_config_file_set(ctx, "sharding_strategy", b ? "full_shard" : "shard_grad_op",
                               ctx->aval[ai], accel_table[ai].name);
}

/* ZeRO stages: 0 = DDP, 2 = gradients and optimizer state sharded, 3 =
 * parameters too. Stage 1 shards the optimizer state only; acx runs it as
 * stage 2, which computes the same update with the same traffic
 * (reduce-scatter + all-gather instead of all-reduce) and less memory. */
static acx_status_t ah_zero_stage(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    static const char *const acx[] = {"no_shard", "shard_grad_op", "shard_grad_op", "full_shard"};
    int stage = text[0] - '0'; /* one of "0".."3" (checked) */
    ctx->strategy_seen = 1;
    if (stage == 1)
        acx_config_file_warn(
            ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
            "runs as shard_grad_op (ZeRO-2), the nearest: same update and traffic, less "
            "memory");
    return acx_config_file_set(ctx, "sharding_strategy", acx[stage], ctx->aval[ai],
                               accel_table[ai].name);
}

static acx_status_t ah_ds_accumulation(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    if (strcasecmp(text, "auto") == 0) return ACX_OK; /* "whatever the program says" */
    const acx_setting_t *k = acx_config_key(acx_config_key_index("gradient_accumulation_steps"));
    acx_setting_value_t v;
    if (!acx_setting_parse(k, text, &v))
        return acx_config_file_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                                         "an integer >= 1, or auto");
    char canon[32];
    snprintf(canon, sizeof canon, "%" PRId64, v.i);
    return acx_config_file_set(ctx, "gradient_accumulation_steps", canon, ctx->aval[ai],
                               accel_table[ai].name);
}

/* FSDP's BackwardPrefetch by name (checked against prefetch_valid): the
 * acx enum takes the same names in any case. */
static acx_status_t ah_fsdp_backward_prefetch(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    const acx_setting_t *k = acx_config_key(acx_config_key_index("fsdp.backward_prefetch"));
    acx_setting_value_t v;
    if (!acx_setting_parse(k, text, &v))
        return ACX_ERROR(ACX_ERR_INTERNAL, "backward prefetch '%s' passed the check", text);
    return acx_config_file_set(ctx, k->name, acx_setting_enum_name(k->names, (int)v.i),
                               ctx->aval[ai], accel_table[ai].name);
}

static acx_status_t ah_fsdp_forward_prefetch(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return acx_config_file_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                                         "true or false");
    return acx_config_file_set(ctx, "fsdp.forward_prefetch", b ? "true" : "false", ctx->aval[ai],
                               accel_table[ai].name);
}

/* PyTorch's bool: true caps the units gathered at once (its rate limiter
 * lets two all-gathers run ahead of the frees), false leaves them
 * uncapped; acx's key is the cap itself, so true is 2 and false 0. */
static acx_status_t ah_fsdp_limit(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return acx_config_file_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                                         "true or false");
    return acx_config_file_set(ctx, "fsdp.limit_all_gathers", b ? "2" : "0", ctx->aval[ai],
                               accel_table[ai].name);
}

/* FSDP's CPUOffload(offload_params=True): parameters, gradients and the
 * optimizer step on the CPU. acx's nearest is offload_optimizer: cpu (the
 * fp32 master weights, the optimizer state and the step on the CPU; the
 * compute copy of the parameters and the gradients stay in device memory). */
static acx_status_t ah_fsdp_offload(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    int b = parse_bool(text);
    if (b < 0)
        return acx_config_file_bad_value(ctx, accel_table[ai].name, ctx->aval[ai], text,
                                         "true or false");
    return b ? acx_config_file_set(ctx, "offload_optimizer", "cpu", ctx->aval[ai],
                                   accel_table[ai].name)
             : ACX_OK;
}

/* DeepSpeed's ZeRO-Offload: cpu is offload_optimizer: cpu; nvme (ZeRO-
 * Infinity) is not done, and is reported as such. */
static acx_status_t ah_ds_offload_optimizer(acx_yaml_ctx_t *ctx, int ai, const char *text) {
    if (strcasecmp(text, "cpu") == 0)
        return acx_config_file_set(ctx, "offload_optimizer", "cpu", ctx->aval[ai],
                                   accel_table[ai].name);
    if (strcasecmp(text, "nvme") == 0)
        acx_config_file_warn(
            ctx, accel_table[ai].name, ctx->akey[ai], ctx->aval[ai],
            "ignored: acx does not offload to NVMe (offload_optimizer: cpu is the nearest)");
    return ACX_OK;
}

/* The second pass over an Accelerate file's keys, once all are known
 * (distributed_type decides whether fsdp_config/deepspeed_config count, and
 * Accelerate writes deepspeed_config before distributed_type). */
acx_status_t acx_accel_apply(acx_yaml_ctx_t *ctx) {
    for (int ai = 0; ai < NUM_ACCEL; ai++)
        if (strchr(accel_table[ai].name, '.') == NULL) ACX_CHECK(accel_row(ctx, ai));
    const acx_config_info_t *in = &ctx->cfg->info;
    if (in->machine_rank != ACX_UNSET && in->num_machines != ACX_UNSET &&
        in->machine_rank >= in->num_machines) {
        yaml_node_t *v = ctx->aval[find_accel("machine_rank")];
        return ACX_ERROR(ACX_ERR_INVALID_CONFIG,
                         "%s:%d: key 'machine_rank': invalid value '%d' (expected an integer "
                         "between 0 and num_machines - 1 = %d)",
                         ctx->path, acx_yaml_line(v), in->machine_rank, in->num_machines - 1);
    }
    return ACX_OK;
}
