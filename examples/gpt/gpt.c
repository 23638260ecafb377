/*
 * examples/gpt/gpt.c — acx-gpt, the main job of issue 20: a small GPT
 * (GPT-2's architecture: token and position embeddings, pre-LayerNorm
 * blocks of causal multi-head attention and a GELU MLP, a final LayerNorm,
 * the output layer tied to the token embedding) trained on a token file
 * with AdamW, a cosine schedule with warmup and gradient clipping, written
 * the way a user writes a C trainer on acx. The model's arithmetic is in
 * gpt_model.c (no acx there); this file strings it through acx's units:
 *
 *   unit "embed" (wte, wpe), units "h.0".."h.L-1" (one per block),
 *   unit "final" (ln_f), shared unit "head" (the output layer's use of the
 *   tied wte, acx_model_add_shared_unit).
 *
 *   acx data import-text kjv.txt -o kjv.h5           bytes -> /train, /val tokens
 *   mpirun -np 2 acx-gpt --data kjv.h5 --steps 2000
 *
 * Every step: acquire -> forward -> release per unit in order, the loss,
 * then backward in reverse with acx_unit_grads_ready per unit, so each
 * unit's reduction overlaps the backward of the units below. Parameter and
 * gradient pointers are fetched between acquire and release only, so every
 * strategy (no_shard, shard_grad_op, full_shard, hybrid_shard) works.
 *
 * --device cpu (the default): gpt_model.c's kernels (CBLAS), with the model
 * state in host memory. --device cuda: the same model on the rank's GPU
 * (gpt_cuda.c: cuBLAS sgemm in float32 and small kernels) on the device
 * pointers acx_param_data/acx_param_grad return when acx keeps the state on
 * the device: --device cuda puts device_state: cuda into the program's
 * config (as acx-fmnist does), the kernels run on one stream that acx is
 * told about (acx_set_compute_stream), and each batch is copied in. Built
 * with CUDA and cuBLAS only (GPT_HAVE_CUDA, from Makefile.am); a build
 * without them refuses --device cuda with the reason.
 *
 * Batches: acx's token loader (acx_token_loader_open) on /train/tokens,
 * given to acx_prepare: window w is tokens[w*T .. w*T+T] (T+1 tokens:
 * inputs and the targets shifted by one), shuffled per epoch from the
 * config's seed and sharded over the ranks. The run is step-based
 * (max_steps = --steps): the loader cycles through epochs, and checkpoints
 * keep its position, so a resumed run — at any world size — continues with
 * the windows an uninterrupted run would have seen. Validation: a second
 * token loader on /val/tokens, in order, the first --eval-batches batches.
 *
 * Weight decay: the 2-D weights only (a "no_decay" parameter group holds
 * every 1-D parameter).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <acx/acx.h>

#include "gpt_model.h"

#ifndef GPT_HAVE_CUDA
#define GPT_HAVE_CUDA 0
#endif
/* The --device cuda path: this build's cuBLAS GPT and acx's device-resident
 * parameters and gradients (acx_set_compute_stream). */
#if GPT_HAVE_CUDA && defined(ACX_HAVE_DEVICE_STATE)
#define GPT_DEVICE_PATH 1
#include "gpt_cuda.h"
#else
#define GPT_DEVICE_PATH 0
#endif
struct gpt_cuda; /* the device workspace (gpt_cuda.h); NULL on the CPU path */

typedef struct options {
    const char *data, *save, *save_init, *init_from, *dump_batches, *prompt;
    int64_t layers, d_model, heads, seq_len, batch_size, steps, warmup, log_every, eval_every,
        eval_batches, sample_len;
    double lr, weight_decay, max_grad_norm, temperature;
    int64_t seed;
    int steps_set, quiet, memory_report;
    int cuda; /* --device cuda */
} options_t;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: acx-gpt --data FILE.h5 [options]\n"
        "Train a GPT on the byte tokens of FILE.h5 (/train/tokens, /val/tokens) on every rank;\n"
        "make FILE.h5 from a text with `acx data import-text TEXT -o FILE.h5`.\n\n"
        "model:\n"
        "  --layers N            transformer blocks (default 4)\n"
        "  --d-model N           embedding width (default 128)\n"
        "  --heads N             attention heads, divide --d-model (default 4)\n"
        "  --seq-len N           context length T (default 64)\n"
        "training:\n"
        "  --steps N             optimizer steps: the config's max_steps (default 1000)\n"
        "  --batch-size N        sequences per rank per micro-step (default 16)\n"
        "  --lr X                peak learning rate (default 1e-3)\n"
        "  --warmup N            linear warmup steps, then cosine decay to 0 (default 100)\n"
        "  --weight-decay X      AdamW decoupled weight decay of the 2-D weights (default 0.1;\n"
        "                        biases and LayerNorm weights: none)\n"
        "  --max-grad-norm X     clip the global gradient norm (default 1; 0 = no clipping)\n"
        "  --seed N              initialization, batch order and sampling (default: config, 42)\n"
        "  --init-from FILE      start from these weights (.safetensors, acx weights or a\n"
        "                        checkpoint; every parameter, by name: fine-tuning)\n"
        "  --gradient-accumulation-steps K, --mixed-precision no|bf16, --sharding-strategy S\n"
        "                        acx configuration keys (docs/config.md)\n"
        "  --device cpu|cuda     where the model computes (default cpu); cuda: cuBLAS on this\n"
        "                        rank's GPU, with acx's state in device memory (device_state:\n"
        "                        cuda; backend auto then picks NCCL when it is usable)\n"
        "evaluation and output:\n"
        "  --eval-every N        validation loss every N steps and at the end (default 100)\n"
        "  --eval-batches N      batches per rank of the validation split, from its start\n"
        "                        (default 8; 0 or more than it holds: all of it)\n"
        "  --log-every N         print the training loss every N steps (default 50)\n"
        "  --sample-len N        bytes to sample at the end (default 400; 0 = none)\n"
        "  --temperature X       sampling temperature (default 0.8)\n"
        "  --prompt TEXT         the sample's beginning (default \"And \")\n"
        "  --save FILE           final weights (acx_model_save_weights; FILE.safetensors:\n"
        "                        safetensors, else an acx weights file, HDF5)\n"
        "  --save-init FILE      the initial weights (step 0), for the PyTorch reference\n"
        "  --dump-batches FILE   each rank writes FILE.rR: one line per micro-step, \"STEP "
        "MICRO\"\n"
        "                        and the window index of each of its sequences\n"
        "  --project-dir DIR, --save-every N, --resume latest|PATH   checkpoints (as acx-fmnist)\n"
        "  --memory-report       model-state bytes per rank (measured peaks, the ZeRO\n"
        "                        formula) and activation bytes, at the end\n"
        "  --quiet               only the final lines\n"
        "  --config FILE, --acx-KEY=VALUE   acx configuration (see docs/config.md)\n");
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v_p) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "acx-gpt: invalid value '%s' for --%s: expected an integer in %lld..%lld\n",
                s, flag, (long long)lo, (long long)hi);
        return -1;
    }
    *v_p = v;
    return 0;
}

static int parse_f64(const char *flag, const char *s, double lo, double hi, double *v_p) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) || !(v >= lo) || !(v <= hi)) {
        fprintf(stderr, "acx-gpt: invalid value '%s' for --%s: expected a number in [%g, %g]\n", s,
                flag, lo, hi);
        return -1;
    }
    *v_p = v;
    return 0;
}

#define GPT_STEPS_MAX ((int64_t)1 << 40)

static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.layers = 4,
                     .d_model = 128,
                     .heads = 4,
                     .seq_len = 64,
                     .batch_size = 16,
                     .steps = 1000,
                     .warmup = 100,
                     .log_every = 50,
                     .eval_every = 100,
                     .eval_batches = 8,
                     .sample_len = 400,
                     .lr = 1e-3,
                     .weight_decay = 0.1,
                     .max_grad_norm = 1.0,
                     .temperature = 0.8,
                     .prompt = "And ",
                     .seed = 42};
    enum {
        O_DATA = 256,
        O_LAYERS,
        O_DMODEL,
        O_HEADS,
        O_SEQ,
        O_BATCH,
        O_STEPS,
        O_LR,
        O_WARMUP,
        O_WD,
        O_CLIP,
        O_SEED,
        O_EVAL_EVERY,
        O_EVAL_BATCHES,
        O_LOG_EVERY,
        O_SAMPLE_LEN,
        O_TEMP,
        O_PROMPT,
        O_SAVE,
        O_SAVE_INIT,
        O_DUMP,
        O_PROJECT,
        O_SAVE_EVERY,
        O_RESUME,
        O_MAKE,
        O_QUIET,
        O_INIT_FROM,
        O_MEMREPORT,
        O_DEVICE
    };
    static const struct option longopts[] = {{"data", required_argument, 0, O_DATA},
                                             {"layers", required_argument, 0, O_LAYERS},
                                             {"d-model", required_argument, 0, O_DMODEL},
                                             {"heads", required_argument, 0, O_HEADS},
                                             {"seq-len", required_argument, 0, O_SEQ},
                                             {"batch-size", required_argument, 0, O_BATCH},
                                             {"steps", required_argument, 0, O_STEPS},
                                             {"lr", required_argument, 0, O_LR},
                                             {"warmup", required_argument, 0, O_WARMUP},
                                             {"weight-decay", required_argument, 0, O_WD},
                                             {"max-grad-norm", required_argument, 0, O_CLIP},
                                             {"seed", required_argument, 0, O_SEED},
                                             {"eval-every", required_argument, 0, O_EVAL_EVERY},
                                             {"eval-batches", required_argument, 0, O_EVAL_BATCHES},
                                             {"log-every", required_argument, 0, O_LOG_EVERY},
                                             {"sample-len", required_argument, 0, O_SAMPLE_LEN},
                                             {"temperature", required_argument, 0, O_TEMP},
                                             {"prompt", required_argument, 0, O_PROMPT},
                                             {"save", required_argument, 0, O_SAVE},
                                             {"save-init", required_argument, 0, O_SAVE_INIT},
                                             {"dump-batches", required_argument, 0, O_DUMP},
                                             {"project-dir", required_argument, 0, O_PROJECT},
                                             {"save-every", required_argument, 0, O_SAVE_EVERY},
                                             {"resume", required_argument, 0, O_RESUME},
                                             {"make-tokens", required_argument, 0, O_MAKE},
                                             {"quiet", no_argument, 0, O_QUIET},
                                             {"init-from", required_argument, 0, O_INIT_FROM},
                                             {"memory-report", no_argument, 0, O_MEMREPORT},
                                             {"device", required_argument, 0, O_DEVICE},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c, idx = 0;
    int64_t v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (c) {
        case O_DATA: o->data = optarg; break;
        case O_LAYERS:
            if (parse_i64("layers", optarg, 1, 1024, &o->layers)) return -1;
            break;
        case O_DMODEL:
            if (parse_i64("d-model", optarg, 1, 65536, &o->d_model)) return -1;
            break;
        case O_HEADS:
            if (parse_i64("heads", optarg, 1, 1024, &o->heads)) return -1;
            break;
        case O_SEQ:
            if (parse_i64("seq-len", optarg, 1, 65536, &o->seq_len)) return -1;
            break;
        case O_BATCH:
            if (parse_i64("batch-size", optarg, 1, 1 << 20, &o->batch_size)) return -1;
            break;
        case O_STEPS:
            if (parse_i64("steps", optarg, 0, GPT_STEPS_MAX, &o->steps)) return -1;
            o->steps_set = 1;
            break;
        case O_LR:
            if (parse_f64("lr", optarg, 0.0, 1e3, &o->lr)) return -1;
            break;
        case O_WARMUP:
            if (parse_i64("warmup", optarg, 0, GPT_STEPS_MAX, &o->warmup)) return -1;
            break;
        case O_WD:
            if (parse_f64("weight-decay", optarg, 0.0, 1.0, &o->weight_decay)) return -1;
            break;
        case O_CLIP:
            if (parse_f64("max-grad-norm", optarg, 0.0, 1e30, &o->max_grad_norm)) return -1;
            break;
        case O_SEED:
            if (parse_i64("seed", optarg, INT64_MIN, INT64_MAX, &o->seed)) return -1;
            break;
        case O_EVAL_EVERY:
            if (parse_i64("eval-every", optarg, 0, GPT_STEPS_MAX, &o->eval_every)) return -1;
            break;
        case O_EVAL_BATCHES:
            if (parse_i64("eval-batches", optarg, 0, 1 << 20, &o->eval_batches)) return -1;
            break;
        case O_LOG_EVERY:
            if (parse_i64("log-every", optarg, 1, GPT_STEPS_MAX, &o->log_every)) return -1;
            break;
        case O_SAMPLE_LEN:
            if (parse_i64("sample-len", optarg, 0, 1 << 20, &o->sample_len)) return -1;
            break;
        case O_TEMP:
            if (parse_f64("temperature", optarg, 1e-3, 100.0, &o->temperature)) return -1;
            break;
        case O_PROMPT: o->prompt = optarg; break;
        case O_SAVE: o->save = optarg; break;
        case O_SAVE_INIT: o->save_init = optarg; break;
        case O_DUMP: o->dump_batches = optarg; break;
        case O_MAKE: /* the earlier flag: say what replaced it */
            fprintf(stderr,
                    "acx-gpt: --make-tokens is gone: write the token file with "
                    "`acx data import-text %s -o FILE.h5`\n",
                    optarg);
            return -1;
        case O_QUIET: o->quiet = 1; break;
        case O_MEMREPORT: o->memory_report = 1; break;
        case O_INIT_FROM: o->init_from = optarg; break;
        case O_DEVICE:
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
                fprintf(stderr, "acx-gpt: --device must be cpu or cuda, not '%s'\n", optarg);
                return -1;
            }
            o->cuda = strcmp(optarg, "cuda") == 0;
            break;
        case O_PROJECT: /* taken before acx_init (see run) */
        case O_RESUME:
            if (optarg[0] == '\0') {
                fprintf(stderr, "acx-gpt: invalid value '' for --%s\n",
                        c == O_PROJECT ? "project-dir" : "resume");
                return -1;
            }
            break;
        case O_SAVE_EVERY:
            if (parse_i64("save-every", optarg, 0, GPT_STEPS_MAX, &v)) return -1;
            break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "acx-gpt: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->data == NULL) {
        fprintf(stderr, "acx-gpt: --data FILE.h5 is required (make one with `acx data "
                        "import-text TEXT -o FILE.h5`)\n");
        return -1;
    }
#if !GPT_HAVE_CUDA
    if (o->cuda) {
        fprintf(stderr, "acx-gpt: --device cuda: this build has no CUDA and cuBLAS "
                        "(configure found none, or --without-cuda)\n");
        return -1;
    }
#elif !GPT_DEVICE_PATH
    if (o->cuda) {
        fprintf(stderr, "acx-gpt: --device cuda needs device-resident state (not in this build)\n");
        return -1;
    }
#endif
    if (o->d_model % o->heads != 0) {
        fprintf(stderr, "acx-gpt: --heads %lld does not divide --d-model %lld\n",
                (long long)o->heads, (long long)o->d_model);
        return -1;
    }
    if (o->warmup > o->steps) {
        fprintf(stderr, "acx-gpt: --warmup %lld is more than --steps %lld\n", (long long)o->warmup,
                (long long)o->steps);
        return -1;
    }
    return 0;
}

/* The sampling's random stream (splitmix64): a draw per sampled token. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the model as acx sees it ---- */

typedef struct model {
    gpt_config_t cfg;
    acx_model_t *m;
    acx_unit_t *embed, *final, *head, **block; /* head: the shared unit of embed (tied wte) */
    acx_param_t *wte, *wpe, *lnf_w, *lnf_b;
    acx_param_t *(*bp)[GPT_BLOCK_TENSORS]; /* [L][tensor] */
} model_t;

/* GPT-2's initialization: weights N(0, 0.02), the projections into the
 * residual stream (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2L)), biases 0,
 * LayerNorm weight 1 and bias 0. */
static acx_status_t model_register(acx_accelerator_t *acc, model_t *md) {
    const gpt_config_t *c = &md->cfg;
    md->block = calloc((size_t)c->layers, sizeof *md->block);
    md->bp = calloc((size_t)c->layers, sizeof *md->bp);
    if (md->block == NULL || md->bp == NULL) return ACX_ERR_NO_MEMORY;
    ACX_TRY(acx_model_create(acc, &md->m));
    ACX_TRY(acx_model_add_unit(md->m, "embed", &md->embed));
    ACX_TRY(acx_unit_add_param(md->embed, "wte.weight", 2, (int64_t[]){c->vocab, c->d_model},
                               ACX_INIT_SPEC_NORMAL(0.0, 0.02), &md->wte));
    ACX_TRY(acx_unit_add_param(md->embed, "wpe.weight", 2, (int64_t[]){c->seq_len, c->d_model},
                               ACX_INIT_SPEC_NORMAL(0.0, 0.02), &md->wpe));
    double proj_std = 0.02 / sqrt(2.0 * c->layers);
    for (int l = 0; l < c->layers; l++) {
        char name[ACX_MAX_NAME];
        snprintf(name, sizeof name, "h.%d", l);
        ACX_TRY(acx_model_add_unit(md->m, name, &md->block[l]));
        for (int i = 0; i < GPT_BLOCK_TENSORS; i++) {
            int64_t shape[2];
            int nd = gpt_block_tensor_shape(c, i, shape);
            acx_init_spec_t init = ACX_INIT_SPEC_ZEROS;
            if (i == GPT_LN1_W || i == GPT_LN2_W)
                init = ((acx_init_spec_t){.kind = ACX_INIT_ONES});
            else if (i == GPT_ATTPROJ_W || i == GPT_FCPROJ_W)
                init = ACX_INIT_SPEC_NORMAL(0.0, proj_std);
            else if (nd == 2)
                init = ACX_INIT_SPEC_NORMAL(0.0, 0.02);
            snprintf(name, sizeof name, "h.%d.%s", l, gpt_block_tensor_name(i));
            ACX_TRY(acx_unit_add_param(md->block[l], name, nd, shape, init, &md->bp[l][i]));
        }
    }
    ACX_TRY(acx_model_add_unit(md->m, "final", &md->final));
    ACX_TRY(acx_unit_add_param(md->final, "ln_f.weight", 1, (int64_t[]){c->d_model},
                               ((acx_init_spec_t){.kind = ACX_INIT_ONES}), &md->lnf_w));
    ACX_TRY(acx_unit_add_param(md->final, "ln_f.bias", 1, (int64_t[]){c->d_model},
                               ACX_INIT_SPEC_ZEROS, &md->lnf_b));
    /* the output layer: a second use of embed's wte, at its place in the
     * forward order (after ln_f), so sharded strategies gather wte for it
     * (and prefetch it after "final") and reduce wte's gradient once, after
     * both uses reported */
    ACX_TRY(acx_model_add_shared_unit(md->m, "head", md->embed, &md->head));
    return ACX_OK;
}

/* Pointers of block l's parameters (and gradients): inside acquire..release only. */
static void block_params(model_t *md, int l, gpt_block_params_t *p) {
    for (int i = 0; i < GPT_BLOCK_TENSORS; i++)
        p->t[i] = acx_param_data(md->bp[l][i]);
}

static void block_grads(model_t *md, int l, gpt_block_tensors_t *g) {
    for (int i = 0; i < GPT_BLOCK_TENSORS; i++)
        g->t[i] = acx_param_grad(md->bp[l][i]);
}

/* Set when the program itself printed the reason for a failure (acx's last
 * error then says nothing about it). */
static int reported;

#if GPT_DEVICE_PATH
static acx_status_t forward_cuda(model_t *md, gpt_cuda_t *gpu, const int32_t *in, const int32_t *tg,
                                 int B, int T, int keep_head);
static acx_status_t train_step_cuda(acx_accelerator_t *acc, model_t *md, gpt_cuda_t *gpu,
                                    const int32_t *in, const int32_t *tg, int B, int T,
                                    double *loss_p);
static acx_status_t cuda_failed(const gpt_cuda_t *gpu);
#endif

/* Forward through every unit: acquire, compute, release. Returns the mean
 * loss. keep_head: leave the head acquired for backward (train_step), which
 * saves gathering wte again under the sharded strategies. gpu: the device
 * workspace under --device cuda (forward_cuda; the loss is waited for
 * here), else NULL. */
static acx_status_t forward(model_t *md, gpt_workspace_t *ws, struct gpt_cuda *gpu,
                            const int32_t *in, const int32_t *tg, int B, int T, int keep_head,
                            double *loss_p) {
    gpt_block_params_t p;
#if GPT_DEVICE_PATH
    if (gpu != NULL) {
        ACX_TRY(forward_cuda(md, gpu, in, tg, B, T, keep_head));
        if (gpt_cuda_loss_value(gpu, loss_p) != 0) return cuda_failed(gpu);
        return ACX_OK;
    }
#else
    (void)gpu;
#endif
    ACX_TRY(acx_unit_acquire(md->embed));
    gpt_forward_embed(ws, acx_param_data(md->wte), acx_param_data(md->wpe), in, B, T);
    ACX_TRY(acx_unit_release(md->embed));
    for (int l = 0; l < md->cfg.layers; l++) {
        ACX_TRY(acx_unit_acquire(md->block[l]));
        block_params(md, l, &p);
        gpt_forward_block(ws, l, &p, B, T);
        ACX_TRY(acx_unit_release(md->block[l]));
    }
    ACX_TRY(acx_unit_acquire(md->final));
    gpt_forward_lnf(ws, acx_param_data(md->lnf_w), acx_param_data(md->lnf_b), B, T);
    ACX_TRY(acx_unit_release(md->final));
    ACX_TRY(acx_unit_acquire(md->head));
    *loss_p = gpt_forward_head(ws, acx_param_data(md->wte), tg, B, T);
    if (!keep_head) ACX_TRY(acx_unit_release(md->head));
    return ACX_OK;
}

/* One micro-step: forward, loss, backward unit by unit in reverse: the
 * head (wte's first gradient), final, the blocks, embed (wte's second). */
static acx_status_t train_step(acx_accelerator_t *acc, model_t *md, gpt_workspace_t *ws,
                               struct gpt_cuda *gpu, const int32_t *in, const int32_t *tg, int B,
                               int T, double *loss_p) {
#if GPT_DEVICE_PATH
    if (gpu != NULL) return train_step_cuda(acc, md, gpu, in, tg, B, T, loss_p);
#endif
    ACX_TRY(forward(md, ws, NULL, in, tg, B, T, 1, loss_p));
    acx_record_loss(acc, *loss_p);
    /* the seed of backward, dL/dlogits (fp16: acx multiplies by the loss scale) */
    ACX_TRY(acx_backward_begin(acc, ws->dlogits, (size_t)B * T * md->cfg.vocab));
    /* the head, still acquired from forward: wte's gradient buffer stays
     * until embed reports too, so both uses add into the same buffer */
    gpt_backward_head(ws, acx_param_data(md->wte), acx_param_grad(md->wte), B, T);
    ACX_TRY(acx_unit_grads_ready(md->head));
    ACX_TRY(acx_unit_release(md->head));
    ACX_TRY(acx_unit_acquire(md->final));
    gpt_backward_lnf(ws, acx_param_data(md->lnf_w), acx_param_grad(md->lnf_w),
                     acx_param_grad(md->lnf_b), B, T);
    ACX_TRY(acx_unit_grads_ready(md->final));
    ACX_TRY(acx_unit_release(md->final));
    for (int l = md->cfg.layers - 1; l >= 0; l--) {
        gpt_block_params_t p;
        gpt_block_tensors_t g;
        ACX_TRY(acx_unit_acquire(md->block[l]));
        block_params(md, l, &p);
        block_grads(md, l, &g);
        gpt_backward_block(ws, l, &p, &g, B, T);
        ACX_TRY(acx_unit_grads_ready(md->block[l]));
        ACX_TRY(acx_unit_release(md->block[l]));
    }
    ACX_TRY(acx_unit_acquire(md->embed));
    gpt_backward_embed(ws, acx_param_grad(md->wte), acx_param_grad(md->wpe), in, B, T);
    ACX_TRY(acx_unit_grads_ready(md->embed));
    ACX_TRY(acx_unit_release(md->embed));
    return acx_backward_end(acc);
}

#if GPT_DEVICE_PATH
/* A gpt_cuda call failed: say so (its message names the CUDA or cuBLAS
 * call and error) and fail the step. */
static acx_status_t cuda_failed(const gpt_cuda_t *gpu) {
    fprintf(stderr, "acx-gpt: --device cuda: %s\n", gpu->err);
    reported = 1;
    return ACX_ERR_CUDA;
}

/* forward on the device: the batch is copied in, each unit's kernels are
 * enqueued between its acquire and release (acx orders its own work on
 * the units' buffers after them on the stream it was given); the loss
 * stays on the device until gpt_cuda_loss_value. */
static acx_status_t forward_cuda(model_t *md, gpt_cuda_t *gpu, const int32_t *in, const int32_t *tg,
                                 int B, int T, int keep_head) {
    gpt_block_params_t p;
    if (gpt_cuda_load_batch(gpu, in, tg, B, T) != 0) return cuda_failed(gpu);
    ACX_TRY(acx_unit_acquire(md->embed));
    if (gpt_cuda_forward_embed(gpu, acx_param_data(md->wte), acx_param_data(md->wpe), B, T) != 0)
        return cuda_failed(gpu);
    ACX_TRY(acx_unit_release(md->embed));
    for (int l = 0; l < md->cfg.layers; l++) {
        ACX_TRY(acx_unit_acquire(md->block[l]));
        block_params(md, l, &p);
        if (gpt_cuda_forward_block(gpu, l, &p, B, T) != 0) return cuda_failed(gpu);
        ACX_TRY(acx_unit_release(md->block[l]));
    }
    ACX_TRY(acx_unit_acquire(md->final));
    if (gpt_cuda_forward_lnf(gpu, acx_param_data(md->lnf_w), acx_param_data(md->lnf_b), B, T) != 0)
        return cuda_failed(gpu);
    ACX_TRY(acx_unit_release(md->final));
    ACX_TRY(acx_unit_acquire(md->head));
    if (gpt_cuda_forward_head(gpu, acx_param_data(md->wte), B, T) != 0) return cuda_failed(gpu);
    if (!keep_head) ACX_TRY(acx_unit_release(md->head));
    return ACX_OK;
}

/* train_step on the device, unit by unit as there; acx_unit_grads_ready
 * follows each unit's backward launches (acx orders the reduction after
 * them on the device, the host does not wait). The loss is read back last,
 * so the step's only host wait is for the loss, not for the backward. */
static acx_status_t train_step_cuda(acx_accelerator_t *acc, model_t *md, gpt_cuda_t *gpu,
                                    const int32_t *in, const int32_t *tg, int B, int T,
                                    double *loss_p) {
    ACX_TRY(forward_cuda(md, gpu, in, tg, B, T, 1));
    /* the seed of backward on the device (fp16: scaled on acx's compute stream, gpu's) */
    ACX_TRY(acx_backward_begin(acc, gpu->dlogits, (size_t)B * T * md->cfg.vocab));
    if (gpt_cuda_backward_head(gpu, acx_param_data(md->wte), acx_param_grad(md->wte), B, T) != 0)
        return cuda_failed(gpu);
    ACX_TRY(acx_unit_grads_ready(md->head));
    ACX_TRY(acx_unit_release(md->head));
    ACX_TRY(acx_unit_acquire(md->final));
    if (gpt_cuda_backward_lnf(gpu, acx_param_data(md->lnf_w), acx_param_grad(md->lnf_w),
                              acx_param_grad(md->lnf_b), B, T) != 0)
        return cuda_failed(gpu);
    ACX_TRY(acx_unit_grads_ready(md->final));
    ACX_TRY(acx_unit_release(md->final));
    for (int l = md->cfg.layers - 1; l >= 0; l--) {
        gpt_block_params_t p;
        gpt_block_tensors_t g;
        ACX_TRY(acx_unit_acquire(md->block[l]));
        block_params(md, l, &p);
        block_grads(md, l, &g);
        if (gpt_cuda_backward_block(gpu, l, &p, &g, B, T) != 0) return cuda_failed(gpu);
        ACX_TRY(acx_unit_grads_ready(md->block[l]));
        ACX_TRY(acx_unit_release(md->block[l]));
    }
    ACX_TRY(acx_unit_acquire(md->embed));
    if (gpt_cuda_backward_embed(gpu, acx_param_grad(md->wte), acx_param_grad(md->wpe), B, T) != 0)
        return cuda_failed(gpu);
    ACX_TRY(acx_unit_grads_ready(md->embed));
    ACX_TRY(acx_unit_release(md->embed));
    if (gpt_cuda_loss_value(gpu, loss_p) != 0) return cuda_failed(gpu);
    acx_record_loss(acc, *loss_p);
    return acx_backward_end(acc);
}

/* --device cuda: the device workspace on acx's device, checked against
 * where acx keeps the parameters, and its stream handed to acx. Collective
 * (every rank learns whether all succeeded); on failure *ok_p = 0 and the
 * reason was printed. */
static acx_status_t cuda_setup(acx_accelerator_t *acc, model_t *md, gpt_cuda_t *gpu, int max_B,
                               int *ok_p) {
    double bad = 0.0;
    *ok_p = 0;
    /* acx bound the device at acx_init (-1: keep the current one) */
    if (gpt_cuda_init(gpu, &md->cfg, max_B, acx_device(acc), NULL, 0) != 0) {
        fprintf(stderr, "acx-gpt (rank %d): --device cuda: %s\n", acx_rank(acc), gpu->err);
        bad = 1.0;
    }
    /* agreed before the acquire below, which is collective under the sharded strategies */
    ACX_TRY(acx_reduce_scalar(acc, bad, ACX_OP_MAX, &bad));
    if (bad != 0.0) return ACX_OK;
    ACX_TRY(acx_unit_acquire(md->embed));
    int on_device = gpt_cuda_is_device_pointer(gpu, acx_param_data(md->wte));
    if (on_device == 1) on_device = gpt_cuda_is_device_pointer(gpu, acx_param_grad(md->wte));
    ACX_TRY(acx_unit_release(md->embed));
    if (on_device != 1) {
        fprintf(stderr, "acx-gpt (rank %d): --device cuda: %s\n", acx_rank(acc),
                on_device < 0 ? gpu->err
                              : "acx keeps the parameters and gradients in host memory; "
                                "device-resident state needs device_state: cuda (docs/gpu.md)");
        bad = 1.0;
    }
    ACX_TRY(acx_reduce_scalar(acc, bad, ACX_OP_MAX, &bad));
    if (bad != 0.0) return ACX_OK;
    ACX_TRY(acx_set_compute_stream(acc, gpt_cuda_stream(gpu)));
    *ok_p = 1;
    return ACX_OK;
}
#endif

/* A batch must hold at least one window (an empty one comes only from
 * dataloader.even_batches false). Token ids need no check here: the loader
 * checked every id of the file against its vocabulary at open, and main
 * compares that vocabulary with the model's. */
static int check_batch(const acx_batch_t *b, const char *path, const char *dataset, int vocab,
                       int T) {
    (void)vocab, (void)T;
    if (b->size < 1) {
        fprintf(stderr,
                "acx-gpt: %s:%s: an empty batch on this rank: acx-gpt needs "
                "dataloader.even_batches true (the default) or drop_last true\n",
                path, dataset);
        return -1;
    }
    return 0;
}

/* Mean loss over the first `batches` batches of the validation loader
 * (0: all of them), averaged over ranks. The loader reads the split in
 * order and drops an incomplete last global batch, so every rank runs the
 * same number of full batches (forward acquires units: collective under
 * the sharded strategies) and each batch weighs the same in the mean. */
static acx_status_t evaluate(acx_accelerator_t *acc, model_t *md, gpt_workspace_t *ws,
                             struct gpt_cuda *gpu, acx_dataloader_t *val, const char *path,
                             int64_t batches, int T, double *loss_p, int *bad_p) {
    double sum = 0.0;
    int64_t nb = 0, avail = acx_dataloader_num_batches(val);
    if (batches <= 0 || batches > avail) batches = avail;
    ACX_TRY(acx_dataloader_set_epoch(val, 0)); /* every evaluation: the same windows */
    for (; nb < batches; nb++) {
        const acx_batch_t *b;
        ACX_TRY(acx_dataloader_next(val, &b));
        if (b == NULL) break; /* not reached: batches <= num_batches on every rank */
        if (check_batch(b, path, "/val/tokens", md->cfg.vocab, T) != 0) {
            *bad_p = 1;
            return ACX_ERR_FORMAT;
        }
        double loss;
        ACX_TRY(forward(md, ws, gpu, b->tensors[0], b->tensors[1], (int)b->size, T, 0, &loss));
        sum += loss;
    }
    ACX_TRY(acx_reduce_scalar(acc, nb > 0 ? sum / (double)nb : 0.0, ACX_OP_AVG, loss_p));
    if (nb == 0) *loss_p = NAN;
    return ACX_OK;
}

/* The weights sampling reads, as plain pointers: acx's own copies
 * (NO_SHARD) or a private gathered copy (sharded strategies). */
typedef struct weights {
    const float *wte, *wpe, *lnf_w, *lnf_b;
    gpt_block_params_t *blk; /* [L] */
} weights_t;

/* Sample o->sample_len tokens after the prompt on rank 0 alone, from w,
 * and print them. Temperature t: p_j^(1/t) renormalized, i.e.
 * softmax(logits / t). No acx call: the other ranks are already waiting at
 * the next collective. */
static int sample_tokens(const gpt_config_t *cfg, gpt_workspace_t *ws, const weights_t *w,
                         const options_t *o) {
    int T = cfg->seq_len, V = cfg->vocab;
    size_t plen = strlen(o->prompt), total = plen + (size_t)o->sample_len;
    int32_t *seq = malloc((total > 0 ? total : 1) * sizeof *seq), *tg = calloc((size_t)T, 4);
    double *pw = malloc((size_t)V * sizeof *pw);
    if (seq == NULL || tg == NULL || pw == NULL) {
        free(seq), free(tg), free(pw);
        fprintf(stderr, "acx-gpt: out of memory for sampling\n");
        return -1;
    }
    for (size_t i = 0; i < plen; i++)
        seq[i] = (unsigned char)o->prompt[i] % V;
    size_t len = plen;
    if (len == 0) seq[len++] = '\n' % V;
    uint64_t s = (uint64_t)o->seed ^ 0x5deece66dull;
    while (len < total) {
        int t = len < (size_t)T ? (int)len : T;
        const int32_t *in = seq + len - t;
        gpt_forward_embed(ws, w->wte, w->wpe, in, 1, t);
        for (int l = 0; l < cfg->layers; l++)
            gpt_forward_block(ws, l, &w->blk[l], 1, t);
        gpt_forward_final(ws, w->lnf_w, w->lnf_b, w->wte, tg, 1, t);
        const float *p = ws->probs + (size_t)(t - 1) * V;
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += (pw[j] = p[j] > 0 ? exp(log((double)p[j]) / o->temperature) : 0.0);
        double u = (double)(splitmix64(&s) >> 11) / 9007199254740992.0 * sum, acc_w = 0.0;
        int next = V - 1;
        for (int j = 0; j < V; j++)
            if ((acc_w += pw[j]) > u) {
                next = j;
                break;
            }
        seq[len++] = next;
    }
    printf("---- sample (temperature %g, seed %lld) ----\n", o->temperature, (long long)o->seed);
    for (size_t i = 0; i < len; i++)
        putchar(seq[i] >= 32 || seq[i] == '\n' || seq[i] == '\t' ? seq[i] : '?');
    printf("\n---- end of sample ----\n");
    fflush(stdout);
    free(seq), free(tg), free(pw);
    return 0;
}

/* Sample at the end of training, once, on rank 0. NO_SHARD: rank 0 holds
 * every value already; it acquires every unit (no communication under
 * NO_SHARD: acquire only marks the values in use) and reads acx's copies
 * (under bf16 the rounded compute copy, what training computed with).
 * Sharded strategies: each parameter is gathered to rank 0 alone
 * (acx_param_gather_to, the fp32 master weights) into a private copy of
 * P floats; rank 0 samples from it while the others go on to the next
 * collective; so does --device cuda under every strategy (the copy is in
 * host memory, and sampling runs gpt_model.c's CPU kernels on it). Either
 * way no rank repeats the sampling. */
static acx_status_t sample(acx_accelerator_t *acc, model_t *md, gpt_workspace_t *ws,
                           const options_t *o) {
    const gpt_config_t *c = &md->cfg;
    /* "sharded": sample from a gathered host copy (device state: also under no_shard) */
    int root = acx_rank(acc) == 0,
        sharded = acx_get_config(acc)->sharding_strategy != ACX_NO_SHARD ||
                  acx_device_state(acc) != ACX_DEVICE_STATE_HOST;
    int np = acx_model_num_params(md->m);
    float *copy = NULL;
    weights_t w = {0};
    acx_status_t st = ACX_OK;
    if (sharded) {
        /* every rank takes part in every gather; out only on rank 0 (a
         * failed allocation there fails the gather on every rank alike) */
        if (root) copy = malloc((size_t)acx_model_numel(md->m) * sizeof *copy);
        int64_t off = 0;
        for (int i = 0; i < np && st == ACX_OK; i++) {
            acx_param_t *p = acx_model_param(md->m, i);
            st = acx_param_gather_to(p, 0, copy != NULL ? copy + off : NULL);
            off += acx_param_numel(p);
        }
        if (st != ACX_OK || !root) {
            free(copy);
            return st;
        }
    } else if (!root) {
        return ACX_OK;
    }
    /* rank 0 from here on */
    w.blk = calloc((size_t)c->layers, sizeof *w.blk);
    if (w.blk == NULL) {
        free(copy);
        return ACX_ERR_NO_MEMORY;
    }
    if (sharded) {
        /* the private copy in registration order: each parameter at its offset */
        int64_t off = 0;
        for (int i = 0; i < np; i++) {
            acx_param_t *p = acx_model_param(md->m, i);
            const float *v = copy + off;
            off += acx_param_numel(p);
            if (p == md->wte) w.wte = v;
            if (p == md->wpe) w.wpe = v;
            if (p == md->lnf_w) w.lnf_w = v;
            if (p == md->lnf_b) w.lnf_b = v;
            for (int l = 0; l < c->layers; l++)
                for (int k = 0; k < GPT_BLOCK_TENSORS; k++)
                    if (p == md->bp[l][k]) w.blk[l].t[k] = v;
        }
    } else {
        st = acx_unit_acquire(md->embed);
        for (int l = 0; l < c->layers && st == ACX_OK; l++)
            st = acx_unit_acquire(md->block[l]);
        if (st == ACX_OK) st = acx_unit_acquire(md->final);
        if (st != ACX_OK) {
            free(w.blk);
            return st;
        }
        w = (weights_t){.wte = acx_param_data(md->wte),
                        .wpe = acx_param_data(md->wpe),
                        .lnf_w = acx_param_data(md->lnf_w),
                        .lnf_b = acx_param_data(md->lnf_b),
                        .blk = w.blk};
        for (int l = 0; l < c->layers; l++)
            block_params(md, l, &w.blk[l]);
    }
    if (sample_tokens(c, ws, &w, o) != 0) st = ACX_ERR_NO_MEMORY;
    if (!sharded) {
        acx_status_t r = acx_unit_release(md->final);
        for (int l = c->layers - 1; l >= 0; l--)
            if (acx_unit_release(md->block[l]) != ACX_OK) r = ACX_ERR_STATE;
        if (acx_unit_release(md->embed) != ACX_OK) r = ACX_ERR_STATE;
        if (st == ACX_OK) st = r;
    }
    free(w.blk), free(copy);
    return st;
}

/* GPT's weight decay: none on the 1-D parameters (biases, LayerNorm
 * weights), a group of their own; the 2-D weights keep the default group. */
static acx_status_t add_no_decay_group(acx_model_t *m, acx_optimizer_t *opt) {
    int np = acx_model_num_params(m), n = 0;
    acx_param_t **list = malloc((size_t)np * sizeof *list);
    if (list == NULL) return ACX_ERR_NO_MEMORY;
    for (int i = 0; i < np; i++)
        if (acx_param_ndim(acx_model_param(m, i)) == 1) list[n++] = acx_model_param(m, i);
    acx_status_t st =
        n > 0 ? acx_optimizer_add_param_group(opt, "no_decay", 0.0, 1.0, n, list) : ACX_OK;
    free(list);
    return st;
}

/* The device workspace's bytes (the program's activations under --device cuda). */
static size_t device_bytes(const struct gpt_cuda *gpu) {
#if GPT_DEVICE_PATH
    return gpu->bytes;
#else
    (void)gpu;
    return 0;
#endif
}

/* --memory-report: the model state acx held per rank during training (the
 * largest rank's peaks, acx_memory_stats: host memory, or device memory
 * with device-resident state) against the ZeRO-3
 * figure, and the program's own activation buffers apart. Collective (the
 * peaks are maxima over the ranks). */
static acx_status_t memory_report(acx_accelerator_t *acc, model_t *md, size_t act_bytes,
                                  int act_B) {
    static const char *const cat[] = {"params", "grads", "master", "optimizer", "transient"};
    static const char *const strat[] = {"no_shard", "shard_grad_op", "full_shard", "hybrid_shard"};
    const acx_config_t *c = acx_get_config(acc);
    int world = acx_world_size(acc), s = c->sharding_strategy;
    /* the ranks sharing the shards: the world, a node under hybrid_shard */
    int64_t N = s == ACX_NO_SHARD                                ? 1
                : s == ACX_HYBRID_SHARD && c->ranks_per_node > 0 ? c->ranks_per_node
                                                                 : world;
    int64_t P = acx_model_numel(md->m), u1 = 0, u2 = 0;
    const char *n1 = "-", *n2 = "-"; /* "h.N": a block (all the same size) */
    int64_t final = acx_param_numel(md->lnf_w) + acx_param_numel(md->lnf_b);
    int64_t embed = acx_param_numel(md->wte) + acx_param_numel(md->wpe);
    /* the units with parameters and their elements; the two largest */
    for (int u = -1; u <= md->cfg.layers; u++) {
        int64_t e = 0;
        const char *name = u < 0 ? "embed" : u == md->cfg.layers ? "final" : "h.N";
        if (u < 0)
            e = embed;
        else if (u == md->cfg.layers)
            e = final;
        else
            for (int i = 0; i < GPT_BLOCK_TENSORS; i++)
                e += acx_param_numel(md->bp[u][i]);
        if (e > u1) {
            u2 = u1, n2 = n1;
            u1 = e, n1 = name;
        } else if (e > u2) {
            u2 = e, n2 = name;
        }
    }
    acx_memory_stats_t ms;
    ACX_TRY(acx_memory_stats(&ms));
    double peak[ACX_MEM_NUM_CATEGORIES], total;
    int dev = acx_device_state(acc) != ACX_DEVICE_STATE_HOST; /* the state is in device memory */
    for (int i = 0; i < ACX_MEM_NUM_CATEGORIES; i++)
        ACX_TRY(acx_reduce_scalar(acc, (double)(dev ? ms.device_peak[i] : ms.peak[i]), ACX_OP_MAX,
                                  &peak[i]));
    ACX_TRY(acx_reduce_scalar(acc, (double)(dev ? ms.device_peak_total : ms.peak_total), ACX_OP_MAX,
                              &total));
    if (dev) acx_print(acc, "memory: the model state is in device memory: device peaks below\n");
    /* ZeRO-3 with fp32 AdamW: 4 (fp32 master) + 4 (gradient shard) + 8 (m, v)
     * bytes per element, sharded over N; plus what FULL_SHARD holds in full
     * at its peak, in backward, four unit-sized float32 buffers: the unit
     * in use and its gradient buffer, the next unit's all-gather staging
     * (prefetched) and the reduce-scatter staging of the gradients handed
     * over. The stricter figure allows two. */
    double zero3 = 16.0 * (double)P / (double)N, units = 4.0 * (double)(u1 + u2);
    double formula = zero3 + units + units;
    acx_print(acc,
              "memory: %s, %d rank(s), shard group %lld; P = %lld parameters (%.3f MB fp32); "
              "largest units %s %lld and %s %lld elements; embed (tied wte, wpe) %lld\n",
              strat[s % 4], world, (long long)N, (long long)P, 4e-6 * (double)P, n1, (long long)u1,
              n2, (long long)u2, (long long)embed);
    for (int i = 0; i < ACX_MEM_NUM_CATEGORIES; i++)
        acx_print(acc, "memory: peak %-9s %12.0f bytes\n", cat[i], peak[i]);
    acx_print(acc, "memory: peak total     %12.0f bytes (the most held at one time)\n", total);
    acx_print(acc,
              "memory: formula 16*P/N + 4*(U1+U2) params + 4*(U1+U2) grads = %.0f + %.0f + %.0f = "
              "%.0f bytes; measured / formula = %.3f%s\n",
              zero3, units, units, formula, total / formula,
              s == ACX_FULL_SHARD || s == ACX_HYBRID_SHARD
                  ? ""
                  : " (the ZeRO-3 figure: full_shard and hybrid_shard only)");
    acx_print(acc, "memory: stricter 16*P/N + 4*(U1+U2) = %.0f bytes; measured / stricter = %.3f\n",
              zero3 + units, total / (zero3 + units));
    /* where the bytes above the sharded 16P/N go, in largest units' float32 bytes */
    double shard4 = 4.0 * (double)P / (double)N;
    acx_print(acc,
              "memory: above the shards: grads %.0f bytes (%.2f x 4*U1: full gradient buffers, "
              "with the tied embed's %lld bytes), transient %.0f bytes (%.2f x 4*U1: the unit "
              "in use, all-gather and reduce-scatter staging)\n",
              peak[ACX_MEM_GRADS] - shard4, (peak[ACX_MEM_GRADS] - shard4) / (4.0 * (double)u1),
              (long long)(4 * embed), peak[ACX_MEM_TRANSIENT],
              peak[ACX_MEM_TRANSIENT] / (4.0 * (double)u1));
    acx_print(acc,
              "memory: activations (the program's buffers, not acx's): %zu bytes for batch %d x "
              "%d\n",
              act_bytes, act_B, md->cfg.seq_len);
    return ACX_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Config keys the program takes as its own options: rewritten as
 * --acx-KEY=V so acx_init validates them. */
static void alias_acx_options(int *argc, char **argv) {
    static const char *const alias[][2] = {
        {"--sharding-strategy", "sharding_strategy"},
        {"--mixed-precision", "mixed_precision"},
        {"--gradient-accumulation-steps", "gradient_accumulation_steps"},
        {"--reduce-dtype", "reduce_dtype"}};
    static char storage[16][160];
    int used = 0;
    for (int i = 1; i < *argc && used < 16; i++) {
        int a = 0, na = (int)(sizeof alias / sizeof alias[0]);
        size_t len = 0;
        for (; a < na; a++) {
            len = strlen(alias[a][0]);
            if (strncmp(argv[i], alias[a][0], len) == 0 &&
                (argv[i][len] == '=' || argv[i][len] == '\0'))
                break;
        }
        if (a == na) continue;
        const char *v = argv[i][len] == '=' ? argv[i] + len + 1 : NULL;
        if (argv[i][len] == '\0' && i + 1 < *argc) {
            v = argv[i + 1];
            memmove(&argv[i + 1], &argv[i + 2], (size_t)(*argc - i - 1) * sizeof *argv);
            (*argc)--;
        }
        if (v == NULL) continue;
        snprintf(storage[used], sizeof storage[used], "--acx-%s=%s", alias[a][1], v);
        argv[i] = storage[used++];
    }
}

static int run(int argc, char **argv) {
    acx_config_t cfg = ACX_CONFIG_DEFAULT;
    acx_accelerator_t *acc = NULL;
    options_t o;
    /* --seed, --project-dir, --save-every, --resume and --steps go into the
     * config before acx_init (the program's choices; as acx-fmnist). --steps
     * is the config's max_steps (the program's field wins over every other
     * source); without it max_steps may come from --acx-max_steps, the
     * environment or a config file, else --steps' default. */
    for (int i = 1; i < argc; i++) {
        static const char *const keys[] = {"--seed", "--project-dir", "--save-every", "--resume",
                                           "--steps"};
        for (int k = 0; k < 5; k++) {
            size_t len = strlen(keys[k]);
            const char *v = strncmp(argv[i], keys[k], len) != 0    ? NULL
                            : argv[i][len] == '='                  ? argv[i] + len + 1
                            : argv[i][len] == '\0' && i + 1 < argc ? argv[i + 1]
                                                                   : NULL;
            char *end;
            if (v == NULL || *v == '\0') continue;
            if (k == 1) cfg.project_dir = v;
            if (k == 3) cfg.resume_from = v;
            if (k == 1 || k == 3) continue;
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (*end != '\0' || errno == ERANGE) continue; /* parse_options reports it */
            if (k == 0)
                cfg.seed = x;
            else if (x < 0 || x > GPT_STEPS_MAX)
                continue; /* parse_options reports it */
            else if (k == 2)
                cfg.checkpoint.save_every_steps = x;
            else
                cfg.max_steps = x;
        }
    }
    /* --device cuda: the model computes on the device, so acx keeps its
     * state there (the program's choice, like --seed); a build without the
     * device path refuses --device cuda after parsing, with its reason */
    int on_device = 0;
    for (int i = 1; GPT_DEVICE_PATH && i < argc; i++)
        if (strcmp(argv[i], "--device=cuda") == 0 ||
            (strcmp(argv[i], "--device") == 0 && i + 1 < argc && strcmp(argv[i + 1], "cuda") == 0))
            on_device = 1;
    if (on_device) {
        /* refuse a contradicting device_state from the command line or the
         * environment rather than override it silently (every rank sees
         * the same arguments) */
        const char *user = getenv("ACX_DEVICE_STATE");
        for (int i = 1; i < argc; i++) {
            static const char *const spell[] = {"--acx-device-state", "--acx-device_state"};
            for (int k = 0; k < 2; k++) {
                size_t len = strlen(spell[k]);
                if (strncmp(argv[i], spell[k], len) != 0) continue;
                if (argv[i][len] == '=')
                    user = argv[i] + len + 1;
                else if (argv[i][len] == '\0' && i + 1 < argc)
                    user = argv[i + 1];
            }
        }
        if (user != NULL && strcasecmp(user, "cuda") != 0 && strcasecmp(user, "auto") != 0) {
            fprintf(stderr,
                    "acx-gpt: --device cuda computes on the GPU and needs device_state: cuda, "
                    "but device_state is '%s' (command line or ACX_DEVICE_STATE); leave it "
                    "unset, or use --device cpu\n",
                    user);
            return 2;
        }
        cfg.device_state = ACX_DEVICE_STATE_CUDA;
    }
    alias_acx_options(&argc, argv);
    acx_status_t st = acx_init(&argc, &argv, &cfg, &acc);
    if (st != ACX_OK) {
        fprintf(stderr, "acx-gpt: %s%s\n", on_device ? "--device cuda: " : "", acx_last_error());
        return 1;
    }
    int parsed = parse_options(argc, argv, &o);
    if (parsed == 0 && !o.steps_set && acx_get_config(acc)->max_steps > 0) {
        /* max_steps from the config: the loop's and the schedule's length */
        o.steps = acx_get_config(acc)->max_steps;
        if (o.warmup > o.steps) {
            fprintf(stderr, "acx-gpt: --warmup %lld is more than max_steps %lld\n",
                    (long long)o.warmup, (long long)o.steps);
            parsed = -1;
        }
    }
    if (parsed != 0) {
        acx_finalize(acc);
        return parsed < 0 ? 2 : 0;
    }
    const acx_config_t *c = acx_get_config(acc);
    o.seed = c->seed;
    if (!o.cuda && acx_device_state(acc) != ACX_DEVICE_STATE_HOST) {
        /* the CPU kernels (gpt_model.c) read acx_param_data and add into
         * acx_param_grad with the CPU, which device-resident state (device
         * pointers) does not allow */
        if (acx_is_main_process(acc))
            fprintf(stderr,
                    "acx-gpt: --device cpu computes on the host: it needs the model state in "
                    "host memory (device_state host), not on a device; use --device cuda%s\n",
                    GPT_DEVICE_PATH ? "" : " (in a build with CUDA and cuBLAS)");
        acx_finalize(acc);
        return 2;
    }
    int rc = 1, training = 0, agreed = 0;
    int rank = acx_rank(acc), world = acx_world_size(acc);
    int B = (int)o.batch_size, T = (int)o.seq_len;
    int64_t accum = c->gradient_accumulation_steps;
    model_t md = {.cfg = {.vocab = 256,
                          .seq_len = T,
                          .d_model = (int)o.d_model,
                          .heads = (int)o.heads,
                          .layers = (int)o.layers}};
    gpt_workspace_t ws = {0};
    struct gpt_cuda *gpu = NULL; /* --device cuda: &gpu_ws once set up */
#if GPT_DEVICE_PATH
    gpt_cuda_t gpu_ws = {0};
#endif
    acx_optimizer_t *opt = NULL;
    acx_scheduler_t *sched = NULL;
    acx_dataloader_t *train = NULL, *val = NULL;
    FILE *dump = NULL;
    double bad = 0.0;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((st = (call)) != ACX_OK) goto fail;                                                    \
    } while (0)

    /* The training windows: acx's token loader, shuffled per epoch from the
     * config's seed, sharded over the ranks; given to acx_prepare, it cycles
     * through epochs (step mode) and checkpoints keep its position. cycle 1:
     * the loop counts steps also when no source set max_steps (then --steps'
     * default, 1000, is the length; max_steps 0 from --steps 0 runs none).
     * Validation: the split in order, an incomplete last global batch
     * dropped (equal batches on every rank), not cycling. Both opens are
     * collective and fail on every rank alike, naming the file. */
    acx_dataloader_options_t lo_train = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo_train.batch_size = B;
    lo_train.cycle = 1;
    if ((st = acx_token_loader_open(acc, o.data, "/train/tokens", T, &lo_train, &train)) != ACX_OK)
        goto fail_data;
    acx_dataloader_options_t lo_val = ACX_DATALOADER_OPTIONS_DEFAULT;
    lo_val.batch_size = B;
    lo_val.shuffle = 0;
    lo_val.drop_last = 1;
    lo_val.cycle = 0;
    if ((st = acx_token_loader_open(acc, o.data, "/val/tokens", T, &lo_val, &val)) != ACX_OK)
        goto fail_data;
    /* The model's vocabulary is bytes: a file of another tokenizer (ids up
     * to 50256 for GPT-2's) would index past wte. The loaders' vocabularies
     * are agreed over the ranks, so every rank stops here together. */
    for (int i = 0; i < 2; i++) {
        int64_t fv = acx_dataloader_vocab_size(i == 0 ? train : val);
        if (fv > md.cfg.vocab) {
            if (acx_is_main_process(acc))
                fprintf(stderr,
                        "acx-gpt: %s:%s holds token ids up to %lld: the model's vocabulary is "
                        "%d byte tokens (acx data import-text TEXT)\n",
                        o.data, i == 0 ? "/train/tokens" : "/val/tokens", (long long)fv - 1,
                        md.cfg.vocab);
            goto fail_quiet;
        }
    }

    CHECK(model_register(acc, &md));
    acx_adam_hparams_t hp = ACX_ADAMW_DEFAULT;
    hp.lr = o.lr;
    hp.beta2 = 0.95;
    hp.weight_decay = o.weight_decay;
    CHECK(acx_adamw_create(md.m, &hp, &opt));
    /* GPT's recipe: weight decay on the 2-D weights only. The biases and
     * LayerNorm weights (every parameter of ndim 1) go into a group without
     * decay; the matrices (wte, wpe, the block weights) stay in the default
     * group with --weight-decay. */
    CHECK(add_no_decay_group(md.m, opt));
    CHECK(acx_scheduler_create(opt, ACX_SCHED_COSINE, o.warmup, o.steps, 0.5, &sched));
    CHECK(acx_prepare(acc, md.m, opt, train));
    if (acx_step(acc) > 0) {
        acx_print(acc, "acx-gpt: resumed at step %lld\n", (long long)acx_step(acc));
        if (o.init_from != NULL)
            acx_print(acc, "acx-gpt: --init-from %s not used: the checkpoint's weights win\n",
                      o.init_from);
    } else {
        if (o.init_from != NULL) {
            /* strict: every parameter from the file, every tensor of it used */
            acx_load_options_t lo = {.strict = 1};
            CHECK(acx_model_load_weights(md.m, o.init_from, &lo));
            acx_print(acc, "acx-gpt: initial weights from %s\n", o.init_from);
        }
        if (o.save_init != NULL) CHECK(acx_model_save_weights(md.m, o.save_init));
    }

    /* --device cuda: the host workspace serves sampling only (one sequence) */
    bad = gpt_workspace_init(&ws, &md.cfg, o.cuda ? 1 : B) != 0;
    if (bad != 0.0) fprintf(stderr, "acx-gpt (rank %d): out of memory\n", rank);
    if (o.dump_batches != NULL && bad == 0.0) {
        char path[4096];
        snprintf(path, sizeof path, "%s.r%d", o.dump_batches, rank);
        if ((dump = fopen(path, acx_step(acc) > 0 ? "a" : "w")) == NULL) {
            fprintf(stderr, "acx-gpt: cannot write '%s': %s\n", path, strerror(errno));
            bad = 1.0;
        }
    }
    CHECK(acx_reduce_scalar(acc, bad, ACX_OP_MAX, &bad));
    if (bad != 0.0) goto fail_quiet;
#if GPT_DEVICE_PATH
    if (o.cuda) {
        int ok;
        CHECK(cuda_setup(acc, &md, &gpu_ws, B, &ok));
        if (!ok) goto fail_quiet;
        gpu = &gpu_ws;
    }
#endif

    static const char *const mp_names[] = {"fp32", "bf16", "fp16"};
    acx_print(acc,
              "acx-gpt: %d rank(s), %lld params (L %d, d_model %d, heads %d, T %d, vocab %d), "
              "%lld train / %lld val windows of %d+1 tokens, batch %d x %d per rank x %lld "
              "micro-steps (%lld tokens per step), %lld steps, lr %g warmup %lld cosine, "
              "seed %lld, %s%s\n",
              world, (long long)acx_model_numel(md.m), md.cfg.layers, md.cfg.d_model, md.cfg.heads,
              T, md.cfg.vocab, (long long)acx_dataloader_num_samples(train),
              (long long)acx_dataloader_num_samples(val), T, B, T, (long long)accum,
              (long long)B * T * world * accum, (long long)o.steps, o.lr, (long long)o.warmup,
              (long long)o.seed, mp_names[c->mixed_precision % 3],
              gpu != NULL ? ", on the GPU (--device cuda)" : "");

    training = 1;
    acx_memory_reset_peak(); /* --memory-report: the peaks of training, not of set-up */
    double t0 = now_s(), tw = t0, window_loss = 0.0, step_loss = 0.0, val_loss = NAN;
    int64_t window = 0, tokens = 0, window_tokens = 0, k = 0, first_step = acx_step(acc);
    while (acx_step(acc) < o.steps) {
        double loss;
        const acx_batch_t *b;
        CHECK(acx_dataloader_next(train, &b)); /* never NULL: the loader cycles */
        if (check_batch(b, o.data, "/train/tokens", md.cfg.vocab, T) != 0) goto fail_quiet;
        int64_t micro = acx_step(acc) * accum + k;
        if (dump != NULL) {
            fprintf(dump, "%lld %lld", (long long)acx_step(acc), (long long)micro);
            for (int64_t i = 0; i < b->size; i++)
                fprintf(dump, " %lld", (long long)b->indices[i]);
            fputc('\n', dump);
        }
        CHECK(acx_accumulate_begin(acc));
        CHECK(train_step(acc, &md, &ws, gpu, b->tensors[0], b->tensors[1], (int)b->size, T, &loss));
        step_loss += loss;
        k++;
        int boundary = acx_sync_gradients(acc);
        if (boundary) {
            if (o.max_grad_norm > 0) CHECK(acx_clip_grad_norm(acc, o.max_grad_norm, 2.0, NULL));
            if ((st = acx_optimizer_step(opt)) != ACX_OK) {
                agreed = st == ACX_ERR_STATE;
                goto fail;
            }
            CHECK(acx_scheduler_step(sched));
            CHECK(acx_optimizer_zero_grad(opt));
        }
        if ((st = acx_accumulate_end(acc)) != ACX_OK) goto fail;
        if (acx_preempted(acc)) goto preempted;
        if (!boundary) continue;
        /* the mean over the step's micro-batches and the ranks (equal token counts) */
        double mean;
        CHECK(acx_reduce_scalar(acc, step_loss / (double)k, ACX_OP_AVG, &mean));
        step_loss = 0.0;
        k = 0;
        window_loss += mean;
        window++;
        tokens += (int64_t)B * T * world * accum;
        window_tokens += (int64_t)B * T * world * accum;
        int64_t s = acx_step(acc);
        if (s % o.log_every == 0 || s == o.steps) {
            double t = now_s();
            if (!o.quiet)
                acx_print(acc, "step %lld loss %.9g lr %.6g tokens/s %.0f\n", (long long)s,
                          o.log_every == 1 ? mean : window_loss / (double)window,
                          acx_optimizer_lr(opt), (double)window_tokens / (t - tw));
            window_loss = 0.0;
            window = 0;
            window_tokens = 0;
            tw = t;
        }
        if ((o.eval_every > 0 && s % o.eval_every == 0) || s == o.steps) {
            double te = now_s();
            int vbad = 0;
            st = evaluate(acc, &md, &ws, gpu, val, o.data, o.eval_batches, T, &val_loss, &vbad);
            if (vbad) goto fail_quiet;
            CHECK(st);
            if (!o.quiet) acx_print(acc, "step %lld val_loss %.6f\n", (long long)s, val_loss);
            t0 += now_s() - te; /* tokens/s counts training only */
            tw += now_s() - te;
        }
    }
    double train_time = now_s() - t0;
#if GPT_DEVICE_PATH
    if (gpu != NULL && gpt_cuda_sync(gpu) != 0) {
        st = cuda_failed(gpu);
        goto fail;
    }
#endif
    if (o.memory_report)
        CHECK(memory_report(acc, &md, gpu != NULL ? device_bytes(gpu) : ws.bytes,
                            gpu != NULL ? B : ws.max_B));
    if (o.save != NULL) CHECK(acx_model_save_weights(md.m, o.save));
    if (o.sample_len > 0) CHECK(sample(acc, &md, &ws, &o));
    acx_print(acc, "acx-gpt: %lld steps in %.1f s, %.0f tokens/s; final val_loss %.6f\n",
              (long long)(acx_step(acc) - first_step), train_time,
              train_time > 0 ? (double)tokens / train_time : 0.0, val_loss);
    rc = 0;
    goto done;

preempted:
    acx_print(acc, "acx-gpt: preempted at step %lld: checkpoint saved; exit %d and resume\n",
              (long long)acx_step(acc), ACX_EXIT_PREEMPTED);
    rc = ACX_EXIT_PREEMPTED;
    goto done;

fail_data: /* the loader's "samples" are the windows of T+1 tokens */
    if (acx_is_main_process(acc))
        fprintf(stderr, "acx-gpt: cannot load %s:%s as windows of %d+1 tokens, %d per rank: %s\n",
                o.data, train == NULL ? "/train/tokens" : "/val/tokens", T, B, acx_last_error());
    goto fail_quiet;
fail:
    if (!reported) fprintf(stderr, "acx-gpt (rank %d): %s\n", rank, acx_last_error());
fail_quiet:
    rc = 1;
done:
    if (dump != NULL) fclose(dump);
    gpt_workspace_free(&ws);
#if GPT_DEVICE_PATH
    if (gpu != NULL) (void)acx_set_compute_stream(acc, NULL); /* before the stream goes */
    if (o.cuda) gpt_cuda_free(&gpu_ws);
#endif
    acx_dataloader_close(val);
    acx_dataloader_close(train);
    free(md.block), free(md.bp);
    if (rc != 0 && rc != ACX_EXIT_PREEMPTED && training && !agreed)
        acx_abort(acc, rc, "acx-gpt failed");
    st = acx_finalize(acc);
    return st == ACX_OK ? rc : 1;
#undef CHECK
}

int main(int argc, char **argv) { return run(argc, argv); }
