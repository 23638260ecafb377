/*
 * tests/unit/test_config.c — configuration resolution: defaults, YAML file
 * (nested and dotted keys), environment, --acx-* options and the program's
 * struct in precedence order, the origin of every value, the choice of the
 * file, errors (file:line, key, bad value, accepted values), and the YAML
 * rendering reading back to the same values.
 *
 * The environment is a fake lookup table, so the test never depends on the
 * caller's ACX_* variables or $HOME.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx_test.h"
#include "runtime/base/config_resolve.h"

/* ---- fixtures ---- */

#define MAX_ENV 16
static const char *env_names[MAX_ENV], *env_values[MAX_ENV];
static int env_count;

static void env_clear(void) { env_count = 0; }
static void env_set(const char *name, const char *value) {
    env_names[env_count] = name;
    env_values[env_count++] = value;
}
static const char *fake_env(const char *name) {
    for (int i = 0; i < env_count; i++)
        if (strcmp(env_names[i], name) == 0) return env_values[i];
    return NULL;
}

#define MAX_TMP 64
static char tmp_files[MAX_TMP][64];
static int tmp_count;

/* Write text to a fresh /tmp/acx_cfg_XXXXXX.yaml; returns its path. */
static const char *write_yaml(const char *text) {
    if (tmp_count == MAX_TMP) exit(99);
    char *path = tmp_files[tmp_count++];
    snprintf(path, 64, "/tmp/acx_cfg_XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    if (fd < 0) {
        perror("mkstemps");
        exit(99);
    }
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len) {
        perror("write");
        exit(99);
    }
    close(fd);
    return path;
}

static int key_index(const char *name) {
    for (int i = 0; i < acx_config_num_keys(); i++)
        if (strcmp(acx_config_key_name(i), name) == 0) return i;
    fprintf(stderr, "no key %s\n", name);
    exit(99);
}

static const acx_config_origin_t *origin(const acx_resolved_config_t *c, const char *key) {
    return &c->origin[key_index(key)];
}

static int has_value(const acx_resolved_config_t *c, const char *key, const char *want) {
    char buf[256];
    acx_config_format_value(c, key_index(key), buf, sizeof buf);
    if (strcmp(buf, want) != 0) {
        fprintf(stderr, "\n%s = '%s', expected '%s'\n", key, buf, want);
        return 0;
    }
    return 1;
}

static acx_resolved_config_t cfg; /* large: keep off the stack */

static acx_status_t resolve(const acx_config_t *program, const char *file, int n,
                            const char *const *ov) {
    return acx_config_resolve(program, file, n, ov, fake_env, &cfg);
}

/* ---- tests ---- */

static int test_table(void) {
    TESTING("key table, names, formatting");
    CHECK(acx_config_num_keys() == 13);
    CHECK(strcmp(acx_config_key_name(0), "mixed_precision") == 0);
    CHECK(acx_config_key_name(-1) == NULL);
    CHECK(acx_config_key_name(acx_config_num_keys()) == NULL);
    CHECK(strcmp(acx_sharding_strategy_name(ACX_NO_SHARD), "no_shard") == 0);
    CHECK(strcmp(acx_sharding_strategy_name(ACX_SHARD_GRAD_OP), "shard_grad_op") == 0);
    CHECK(strcmp(acx_sharding_strategy_name(ACX_FULL_SHARD), "full_shard") == 0);
    CHECK(strcmp(acx_sharding_strategy_name(ACX_HYBRID_SHARD), "hybrid_shard") == 0);
    CHECK(strcmp(acx_mixed_precision_name(ACX_MP_BF16), "bf16") == 0);
    CHECK(strcmp(acx_mixed_precision_name(ACX_MP_FP16), "fp16") == 0);
    CHECK(strcmp(acx_backend_name(ACX_BACKEND_NCCL), "nccl") == 0);
    CHECK(strcmp(acx_backend_name(99), "invalid") == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_defaults(void) {
    TESTING("defaults (no file, no environment)");
    env_clear();
    CHECK_OK(resolve(NULL, NULL, 0, NULL));
    CHECK(cfg.values.size == sizeof(acx_config_t));
    CHECK(cfg.values.mixed_precision == ACX_MP_NO);
    CHECK(cfg.values.sharding_strategy == ACX_NO_SHARD);
    CHECK(cfg.values.gradient_accumulation_steps == 1);
    CHECK(cfg.values.seed == 42);
    CHECK(strcmp(cfg.values.project_dir, ".") == 0);
    CHECK(cfg.values.project_dir == cfg.project_dir);
    CHECK(cfg.values.log_level == ACX_LOG_WARN);
    CHECK(cfg.values.collective_timeout == 600.0);
    CHECK(cfg.values.bucket_size_mb == 25.0);
    CHECK(cfg.values.backend == ACX_BACKEND_AUTO);
    CHECK(cfg.values.dataloader.drop_last == 0);
    CHECK(cfg.values.dataloader.even_batches == 1);
    CHECK(cfg.values.dataloader.split_batches == 0);
    CHECK(cfg.values.dataloader.prefetch == 1);
    CHECK(cfg.config_file[0] == '\0' && cfg.values.config_file == NULL);
    for (int i = 0; i < acx_config_num_keys(); i++)
        CHECK(cfg.origin[i].source == ACX_SRC_DEFAULT && cfg.origin[i].where[0] == '\0');
    CHECK(has_value(&cfg, "mixed_precision", "no"));
    CHECK(has_value(&cfg, "seed", "42"));
    CHECK(has_value(&cfg, "collective_timeout", "600"));
    CHECK(has_value(&cfg, "bucket_size_mb", "25"));
    CHECK(has_value(&cfg, "dataloader.even_batches", "true"));
    CHECK(has_value(&cfg, "project_dir", "."));

    /* $HOME without ~/.config/acx/default_config.yaml: skipped silently. */
    char home[] = "/tmp/acx_home_XXXXXX";
    CHECK(mkdtemp(home) != NULL);
    env_set("HOME", home);
    CHECK_OK(resolve(NULL, NULL, 0, NULL));
    CHECK(cfg.config_file[0] == '\0');

    /* ... and with it: read, origin FILE. */
    char dir[128], path[192];
    snprintf(dir, sizeof dir, "%s/.config", home);
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(dir, sizeof dir, "%s/.config/acx", home);
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof path, "%s/default_config.yaml", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("# per-user defaults\nseed: 7\n", f);
    fclose(f);
    CHECK_OK(resolve(NULL, NULL, 0, NULL));
    CHECK(cfg.values.seed == 7);
    CHECK(strcmp(cfg.config_file, path) == 0);
    CHECK(cfg.values.config_file == cfg.config_file);
    char where[256];
    snprintf(where, sizeof where, "%s:2", path);
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_FILE);
    CHECK(strcmp(origin(&cfg, "seed")->where, where) == 0);
    unlink(path);
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/.config", home);
    rmdir(dir);
    rmdir(home);
    env_clear();
    PASSED();
    return 0;
error:
    env_clear();
    FAILED();
    return 1;
}

static const char *full_yaml = "# a complete config\n"             /* 1 */
                               "mixed_precision: bf16\n"           /* 2 */
                               "sharding_strategy: FULL_SHARD\n"   /* 3 */
                               "gradient_accumulation_steps: 4\n"  /* 4 */
                               "seed: -7\n"                        /* 5 */
                               "project_dir: \"/scratch/run 1\"\n" /* 6 */
                               "log_level: Info\n"                 /* 7 */
                               "collective_timeout: 30.5\n"        /* 8 */
                               "bucket_size_mb: 1e2\n"             /* 9 */
                               "backend: mpi\n"                    /* 10 */
                               "dataloader:\n"                     /* 11 */
                               "  drop_last: yes\n"                /* 12 */
                               "  even_batches: OFF\n"             /* 13 */
                               "dataloader.prefetch: 3\n";         /* 14 */

static int test_file(void) {
    TESTING("YAML file: values, nested and dotted keys, origins");
    env_clear();
    const char *path = write_yaml(full_yaml);
    CHECK_OK(resolve(NULL, path, 0, NULL));
    CHECK(cfg.values.mixed_precision == ACX_MP_BF16);
    CHECK(cfg.values.sharding_strategy == ACX_FULL_SHARD);
    CHECK(cfg.values.gradient_accumulation_steps == 4);
    CHECK(cfg.values.seed == -7);
    CHECK(strcmp(cfg.values.project_dir, "/scratch/run 1") == 0);
    CHECK(cfg.values.log_level == ACX_LOG_INFO);
    CHECK(cfg.values.collective_timeout == 30.5);
    CHECK(cfg.values.bucket_size_mb == 100.0);
    CHECK(cfg.values.backend == ACX_BACKEND_MPI);
    CHECK(cfg.values.dataloader.drop_last == 1);
    CHECK(cfg.values.dataloader.even_batches == 0);
    CHECK(cfg.values.dataloader.split_batches == 0); /* not in the file */
    CHECK(cfg.values.dataloader.prefetch == 3);
    CHECK(strcmp(cfg.config_file, path) == 0);

    char where[128];
    snprintf(where, sizeof where, "%s:3", path);
    CHECK(origin(&cfg, "sharding_strategy")->source == ACX_SRC_FILE);
    CHECK(strcmp(origin(&cfg, "sharding_strategy")->where, where) == 0);
    snprintf(where, sizeof where, "%s:12", path);
    CHECK(strcmp(origin(&cfg, "dataloader.drop_last")->where, where) == 0);
    snprintf(where, sizeof where, "%s:14", path);
    CHECK(strcmp(origin(&cfg, "dataloader.prefetch")->where, where) == 0);
    CHECK(origin(&cfg, "dataloader.split_batches")->source == ACX_SRC_DEFAULT);
    CHECK(has_value(&cfg, "sharding_strategy", "full_shard"));
    CHECK(has_value(&cfg, "collective_timeout", "30.5"));

    /* YAML nulls leave a key unset; an empty section is fine. */
    path = write_yaml("seed:\nbackend: ~\ndataloader:\nlog_level: null\n");
    CHECK_OK(resolve(NULL, path, 0, NULL));
    CHECK(cfg.values.seed == 42 && cfg.values.backend == ACX_BACKEND_AUTO);
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_DEFAULT);

    /* An empty file is an empty config. */
    path = write_yaml("# nothing here\n");
    CHECK_OK(resolve(NULL, path, 0, NULL));
    CHECK(cfg.values.seed == 42);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_file_choice(void) {
    TESTING("file choice: program > --config > ACX_CONFIG_FILE");
    const char *a = write_yaml("seed: 1\n");
    const char *b = write_yaml("seed: 2\n");
    const char *c = write_yaml("seed: 3\n");
    env_clear();
    env_set("ACX_CONFIG_FILE", a);
    CHECK_OK(resolve(NULL, NULL, 0, NULL));
    CHECK(cfg.values.seed == 1);
    CHECK_OK(resolve(NULL, b, 0, NULL));
    CHECK(cfg.values.seed == 2);
    acx_config_t prog = ACX_CONFIG_DEFAULT;
    prog.config_file = c;
    CHECK_OK(resolve(&prog, b, 0, NULL));
    CHECK(cfg.values.seed == 3);
    CHECK(strcmp(cfg.values.config_file, c) == 0);
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_FILE); /* config_file is not a value */
    env_clear();
    PASSED();
    return 0;
error:
    env_clear();
    FAILED();
    return 1;
}

static int test_precedence(void) {
    TESTING("precedence: file < env < --acx options < program");
    const char *path = write_yaml(full_yaml);
    env_clear();
    env_set("ACX_SEED", "100");
    env_set("ACX_MIXED_PRECISION", " fp16 "); /* blanks trimmed */
    env_set("ACX_DATALOADER_DROP_LAST", "false");
    env_set("ACX_BACKEND", ""); /* empty = unset */
    env_set("ACX_GRADIENT_ACCUMULATION_STEPS", "16");
    CHECK_OK(resolve(NULL, path, 0, NULL));
    CHECK(cfg.values.seed == 100);
    CHECK(cfg.values.mixed_precision == ACX_MP_FP16);
    CHECK(cfg.values.dataloader.drop_last == 0);
    CHECK(cfg.values.backend == ACX_BACKEND_MPI); /* from the file */
    CHECK(cfg.values.gradient_accumulation_steps == 16);
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_ENV);
    CHECK(strcmp(origin(&cfg, "seed")->where, "ACX_SEED") == 0);
    CHECK(strcmp(origin(&cfg, "dataloader.drop_last")->where, "ACX_DATALOADER_DROP_LAST") == 0);
    CHECK(origin(&cfg, "backend")->source == ACX_SRC_FILE);

    const char *ov[] = {"seed=5", "mixed-precision=no", "dataloader.split_batches",
                        "--acx-backend=nccl"};
    CHECK_OK(resolve(NULL, path, 4, ov));
    CHECK(cfg.values.seed == 5);
    CHECK(cfg.values.mixed_precision == ACX_MP_NO);
    CHECK(cfg.values.dataloader.split_batches == 1);
    CHECK(cfg.values.backend == ACX_BACKEND_NCCL);
    CHECK(cfg.values.gradient_accumulation_steps == 16); /* env still */
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_ARGV);
    CHECK(strcmp(origin(&cfg, "seed")->where, "--acx-seed") == 0);
    CHECK(strcmp(origin(&cfg, "mixed_precision")->where, "--acx-mixed-precision") == 0);
    CHECK(strcmp(origin(&cfg, "backend")->where, "--acx-backend") == 0);

    acx_config_t prog = ACX_CONFIG_DEFAULT;
    prog.seed = 9;
    prog.gradient_accumulation_steps = 8;
    prog.dataloader.prefetch = 0;
    prog.project_dir = "out";
    prog.collective_timeout = 5.0;
    CHECK_OK(resolve(&prog, path, 4, ov));
    CHECK(cfg.values.seed == 9);
    CHECK(cfg.values.gradient_accumulation_steps == 8);
    CHECK(cfg.values.dataloader.prefetch == 0);
    CHECK(strcmp(cfg.values.project_dir, "out") == 0);
    CHECK(cfg.values.project_dir == cfg.project_dir); /* copied, not borrowed */
    CHECK(cfg.values.collective_timeout == 5.0);
    CHECK(cfg.values.mixed_precision == ACX_MP_NO);        /* unset in program: option */
    CHECK(cfg.values.sharding_strategy == ACX_FULL_SHARD); /* unset in program: file */
    CHECK(origin(&cfg, "seed")->source == ACX_SRC_PROGRAM);
    CHECK(strcmp(origin(&cfg, "seed")->where, "program") == 0);
    CHECK(origin(&cfg, "mixed_precision")->source == ACX_SRC_ARGV);
    env_clear();
    PASSED();
    return 0;
error:
    env_clear();
    FAILED();
    return 1;
}

static int test_program_size(void) {
    TESTING("program->size: fields beyond it are ignored");
    env_clear();
    acx_config_t prog = ACX_CONFIG_DEFAULT;
    prog.seed = 11;
    prog.backend = ACX_BACKEND_NCCL; /* beyond the older struct */
    prog.dataloader.drop_last = 1;   /* beyond too */
    prog.size = offsetof(acx_config_t, backend);
    CHECK_OK(resolve(&prog, NULL, 0, NULL));
    CHECK(cfg.values.seed == 11);
    CHECK(cfg.values.backend == ACX_BACKEND_AUTO);
    CHECK(cfg.values.dataloader.drop_last == 0);
    CHECK(cfg.values.size == sizeof(acx_config_t));
    /* A field only partly inside the struct is not read. */
    prog.size = offsetof(acx_config_t, backend) + 1;
    CHECK_OK(resolve(&prog, NULL, 0, NULL));
    CHECK(cfg.values.backend == ACX_BACKEND_AUTO);
    /* A struct as large as the field's end is enough. */
    prog.size = offsetof(acx_config_t, backend) + sizeof prog.backend;
    CHECK_OK(resolve(&prog, NULL, 0, NULL));
    CHECK(cfg.values.backend == ACX_BACKEND_NCCL);
    CHECK(cfg.values.dataloader.drop_last == 0);
    /* size 0: the program did not start from ACX_CONFIG_DEFAULT. */
    prog.size = 0;
    CHECK_STATUS(resolve(&prog, NULL, 0, NULL), ACX_ERR_INVALID_ARG, "ACX_CONFIG_DEFAULT");
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* Resolve `yaml` and expect an error whose message contains "PATH:LINE:"
 * (when line > 0) and every one of the needles. */
static int expect_file_error(const char *yaml, acx_status_t want, int line, const char *n1,
                             const char *n2) {
    const char *path = write_yaml(yaml);
    acx_status_t st = resolve(NULL, path, 0, NULL);
    const char *msg = acx_last_error();
    char loc[128];
    snprintf(loc, sizeof loc, "%s:%d:", path, line);
    if (st != want || (line > 0 && strstr(msg, loc) == NULL) || strstr(msg, n1) == NULL ||
        (n2 != NULL && strstr(msg, n2) == NULL)) {
        fprintf(stderr, "\nyaml:\n%s-> status %d (want %d), message: %s\n", yaml, (int)st,
                (int)want, msg);
        return 0;
    }
    return 1;
}

static int test_file_errors(void) {
    TESTING("file errors name file:line, key, value, accepted values");
    env_clear();
    CHECK(expect_file_error("seed: 1\nmixed_precision: fp8\n", ACX_ERR_INVALID_CONFIG, 2,
                            "key 'mixed_precision': invalid value 'fp8' (expected one of: no, "
                            "bf16, fp16)",
                            NULL));
    CHECK(expect_file_error("seed: 1\n\nbucket_size: 10\n", ACX_ERR_INVALID_CONFIG, 3,
                            "unknown key 'bucket_size' (known keys: mixed_precision, "
                            "sharding_strategy,",
                            "did you mean 'bucket_size_mb'?"));
    CHECK(expect_file_error("dataloader:\n  dropp_last: true\n", ACX_ERR_INVALID_CONFIG, 2,
                            "unknown key 'dataloader.dropp_last'", "dataloader.drop_last"));
    CHECK(expect_file_error("dataloader:\n  drop_last: maybe\n", ACX_ERR_INVALID_CONFIG, 2,
                            "key 'dataloader.drop_last': invalid value 'maybe' (expected true "
                            "or false",
                            NULL));
    CHECK(expect_file_error("gradient_accumulation_steps: 0\n", ACX_ERR_INVALID_CONFIG, 1,
                            "key 'gradient_accumulation_steps': invalid value '0' (expected an "
                            "integer >= 1)",
                            NULL));
    CHECK(expect_file_error("gradient_accumulation_steps: 2.5\n", ACX_ERR_INVALID_CONFIG, 1,
                            "invalid value '2.5' (expected an integer >= 1)", NULL));
    CHECK(expect_file_error("gradient_accumulation_steps: 99999999999\n", ACX_ERR_INVALID_CONFIG, 1,
                            "invalid value '99999999999'", NULL));
    CHECK(expect_file_error("bucket_size_mb: 0\n", ACX_ERR_INVALID_CONFIG, 1,
                            "key 'bucket_size_mb': invalid value '0' (expected a number > 0)",
                            NULL));
    CHECK(expect_file_error("collective_timeout: .inf\n", ACX_ERR_INVALID_CONFIG, 1,
                            "invalid value '.inf' (expected a number > 0)", NULL));
    CHECK(expect_file_error("dataloader.prefetch: -1\n", ACX_ERR_INVALID_CONFIG, 1,
                            "expected an integer >= 0", NULL));
    CHECK(expect_file_error("project_dir: ''\n", ACX_ERR_INVALID_CONFIG, 1,
                            "key 'project_dir': invalid value ''", "non-empty string"));
    CHECK(expect_file_error("seed: 1\nseed:\n  a: 1\n", ACX_ERR_INVALID_CONFIG, 3,
                            "key 'seed': expected an integer, got a mapping", NULL));
    CHECK(expect_file_error("backend: [mpi, nccl]\n", ACX_ERR_INVALID_CONFIG, 1,
                            "key 'backend': expected one of: auto, mpi, nccl, got a list", NULL));
    CHECK(expect_file_error("dataloader: 5\n", ACX_ERR_INVALID_CONFIG, 1,
                            "key 'dataloader' must be a mapping", NULL));
    CHECK(expect_file_error("- seed\n- 1\n", ACX_ERR_INVALID_CONFIG, 1,
                            "expected a mapping of keys", "got a list"));
    CHECK(expect_file_error("seed: 1\nseed: 2\n", ACX_ERR_INVALID_CONFIG, 2,
                            "key 'seed' given twice", NULL));
    CHECK(expect_file_error("dataloader.drop_last: true\ndataloader:\n  drop_last: false\n",
                            ACX_ERR_INVALID_CONFIG, 3, "key 'dataloader.drop_last' given twice",
                            NULL));
    CHECK(expect_file_error("seed: 5\n---\nseed: 6\n", ACX_ERR_INVALID_CONFIG, 3,
                            "a second YAML document", NULL));
    /* YAML syntax errors: libyaml's problem text at line:column. */
    CHECK(expect_file_error("seed: 1\nbackend: a: b\n", ACX_ERR_YAML, 2,
                            ":2:11: YAML syntax error: mapping values are not allowed in this "
                            "context",
                            NULL));
    CHECK(expect_file_error("seed: 1\nmixed_precision: [bf16\n", ACX_ERR_YAML, 0,
                            ":3:1: YAML syntax error: did not find expected ',' or ']'",
                            "while parsing a flow sequence at line 2, column 18"));

    /* An explicit file that cannot be opened. */
    CHECK_STATUS(resolve(NULL, "/nonexistent/acx/run.yaml", 0, NULL), ACX_ERR_IO,
                 "cannot open config file '/nonexistent/acx/run.yaml': No such file or "
                 "directory");
    env_set("ACX_CONFIG_FILE", "/nonexistent/env.yaml");
    CHECK_STATUS(resolve(NULL, NULL, 0, NULL), ACX_ERR_IO, "'/nonexistent/env.yaml'");
    env_clear();
    CHECK_STATUS(resolve(NULL, "/tmp", 0, NULL), ACX_ERR_IO, "'/tmp' is a directory");
    PASSED();
    return 0;
error:
    env_clear();
    FAILED();
    return 1;
}

static int test_other_errors(void) {
    TESTING("env, option and program errors; out untouched on error");
    env_clear();
    env_set("ACX_SEED", "abc");
    CHECK_STATUS(resolve(NULL, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "environment variable ACX_SEED='abc': expected an integer");
    env_clear();
    env_set("ACX_BUCKET_SIZE_MB", "-1");
    CHECK_STATUS(resolve(NULL, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "environment variable ACX_BUCKET_SIZE_MB='-1': expected a number > 0");
    env_clear();
    env_set("ACX_SHARDING_STRATEGY", "zero3");
    CHECK_STATUS(resolve(NULL, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "ACX_SHARDING_STRATEGY='zero3': expected one of: no_shard, shard_grad_op, "
                 "full_shard, hybrid_shard");
    env_clear();

    const char *bad1[] = {"nosuch=1"};
    CHECK_STATUS(resolve(NULL, NULL, 1, bad1), ACX_ERR_INVALID_CONFIG,
                 "option --acx-nosuch: unknown key 'nosuch'");
    const char *bad2[] = {"seed"};
    CHECK_STATUS(resolve(NULL, NULL, 1, bad2), ACX_ERR_INVALID_CONFIG, "expected --acx-seed=VALUE");
    const char *bad3[] = {"log-level=loud"};
    CHECK_STATUS(resolve(NULL, NULL, 1, bad3), ACX_ERR_INVALID_CONFIG,
                 "option --acx-log-level: key 'log_level': invalid value 'loud' (expected one "
                 "of: error, warn, info, debug)");

    acx_config_t prog = ACX_CONFIG_DEFAULT;
    prog.gradient_accumulation_steps = 0;
    CHECK_STATUS(resolve(&prog, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "acx_config_t field 'gradient_accumulation_steps' set by the program: "
                 "invalid value 0 (expected an integer >= 1)");
    prog = (acx_config_t)ACX_CONFIG_DEFAULT;
    prog.mixed_precision = 7;
    CHECK_STATUS(resolve(&prog, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "field 'mixed_precision' set by the program: invalid value 7");
    prog = (acx_config_t)ACX_CONFIG_DEFAULT;
    prog.dataloader.even_batches = 2;
    CHECK_STATUS(resolve(&prog, NULL, 0, NULL), ACX_ERR_INVALID_CONFIG,
                 "field 'dataloader.even_batches' set by the program: invalid value 2 "
                 "(expected 0 or 1");

    /* out is written only on success. */
    static acx_resolved_config_t before;
    memset(&cfg, 0x5a, sizeof cfg);
    memcpy(&before, &cfg, sizeof cfg);
    CHECK(resolve(&prog, NULL, 0, NULL) == ACX_ERR_INVALID_CONFIG);
    CHECK(memcmp(&before, &cfg, sizeof cfg) == 0);
    PASSED();
    return 0;
error:
    env_clear();
    FAILED();
    return 1;
}

static int test_yaml_roundtrip(void) {
    TESTING("acx_config_to_yaml reads back to the same values");
    env_clear();
    static char text[16384];
    static acx_resolved_config_t first;
    const char *path = write_yaml(full_yaml);
    acx_config_t prog = ACX_CONFIG_DEFAULT;
    prog.project_dir = "dir: with \"quotes\" # and \\ a hash";
    prog.collective_timeout = 0.1; /* needs 17 digits to read back exactly */
    CHECK_OK(resolve(&prog, path, 0, NULL));
    memcpy(&first, &cfg, sizeof cfg);
    acx_config_to_yaml(&first, text, sizeof text);
    CHECK(strstr(text, "\nmixed_precision: bf16\n") != NULL);
    CHECK(strstr(text, "\ndataloader:\n  drop_last: true\n  even_batches: false\n") != NULL);

    const char *again = write_yaml(text);
    CHECK_OK(resolve(NULL, again, 0, NULL));
    for (int i = 0; i < acx_config_num_keys(); i++) {
        char a[512], b[512];
        acx_config_format_value(&first, i, a, sizeof a);
        acx_config_format_value(&cfg, i, b, sizeof b);
        if (strcmp(a, b) != 0)
            fprintf(stderr, "\n%s: '%s' vs '%s'\n", acx_config_key_name(i), a, b);
        CHECK(strcmp(a, b) == 0);
        CHECK(cfg.origin[i].source == ACX_SRC_FILE); /* every key written */
    }
    CHECK(cfg.values.collective_timeout == 0.1);

    /* Defaults: 'no' is quoted so YAML 1.1 readers do not see false. */
    CHECK_OK(resolve(NULL, NULL, 0, NULL));
    acx_config_to_yaml(&cfg, text, sizeof text);
    CHECK(strstr(text, "\nmixed_precision: 'no'\n") != NULL);
    const char *third = write_yaml(text);
    CHECK_OK(resolve(NULL, third, 0, NULL));
    CHECK(cfg.values.mixed_precision == ACX_MP_NO);

    /* A too-small buffer is truncated, still NUL-terminated. */
    char small[20];
    acx_config_to_yaml(&first, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_table();
    failed += test_defaults();
    failed += test_file();
    failed += test_file_choice();
    failed += test_precedence();
    failed += test_program_size();
    failed += test_file_errors();
    failed += test_other_errors();
    failed += test_yaml_roundtrip();
    for (int i = 0; i < tmp_count; i++)
        unlink(tmp_files[i]);
    return failed ? 1 : 0;
}
