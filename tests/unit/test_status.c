/*
 * tests/unit/test_status.c — status strings, the per-thread last-error
 * message (format, path stripping, thread isolation), the system-call
 * checking macros on real failing calls, and the logger: line
 * format, level and subsystem filters, ACX_LOG_FILE, one line per write
 * under concurrent threads.
 *
 * Log output is captured by pointing fd 2 at a temporary file with dup2.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx_test.h"
#include "base/error.h"
#include "base/log.h"

/* ---- status and last error ---- */

static int test_status_strings(void) {
    TESTING("acx_status_string: every code named, distinct; 1 and 19 retired");
    for (int s = 0; s < ACX_STATUS_COUNT_; s++) {
        const char *t = acx_status_string((acx_status_t)s);
        if (s == 1 || s == 19) { /* the retired non-error outcomes (acx/status.h) */
            CHECK(strcmp(t, "unknown status") == 0);
            continue;
        }
        CHECK(t != NULL && t[0] != '\0');
        CHECK(strcmp(t, "unknown status") != 0);
        for (int o = 0; o < s; o++)
            CHECK(o == 1 || strcmp(t, acx_status_string((acx_status_t)o)) != 0);
    }
    CHECK(strcmp(acx_status_string(ACX_OK), "success") == 0);
    CHECK(strcmp(acx_status_string(ACX_ERR_INVALID_CONFIG), "invalid configuration") == 0);
    CHECK(strcmp(acx_status_string(ACX_STATUS_COUNT_), "unknown status") == 0);
    CHECK(strcmp(acx_status_string((acx_status_t)-1), "unknown status") == 0);
    CHECK(strcmp(acx_status_string((acx_status_t)1000), "unknown status") == 0);
    /* Values are part of the ABI and of logs: never renumbered. */
    CHECK(ACX_ERR_INVALID_CONFIG == 3 && ACX_ERR_YAML == 15 && ACX_ERR_INTERNAL == 18);
    CHECK(ACX_STATUS_COUNT_ == 20); /* 19 stays taken: a new code gets 20 */
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_last_error(void) {
    TESTING("last error: \"file:line: text\", leading ../ and ./ stripped");
    acx_error_clear();
    CHECK(strcmp(acx_last_error(), "") == 0);
    CHECK(acx_error_set(ACX_ERR_IO, "../../base/x.c", 12, "boom %d", 3) == ACX_ERR_IO);
    CHECK(strcmp(acx_last_error(), "base/x.c:12: boom 3") == 0);
    acx_error_set(ACX_ERR_HDF5, "./io/h5.c", 7, "H5Dopen2 failed");
    CHECK(strcmp(acx_last_error(), "io/h5.c:7: H5Dopen2 failed") == 0);

    int line = __LINE__ + 1;
    acx_status_t st = ACX_ERROR(ACX_ERR_STATE, "hello %s", "world");
    CHECK(st == ACX_ERR_STATE);
    char want[64];
    snprintf(want, sizeof want, "test_status.c:%d: hello world", line);
    CHECK(strstr(acx_last_error(), want) != NULL);
    CHECK(strncmp(acx_last_error(), "../", 3) != 0 && strncmp(acx_last_error(), "./", 2) != 0);

    /* Raw messages (another rank's text) are kept verbatim. */
    CHECK(acx_error_set_raw(ACX_ERR_REMOTE, "rank 3: io/x.c:1: bad") == ACX_ERR_REMOTE);
    CHECK(strcmp(acx_last_error(), "rank 3: io/x.c:1: bad") == 0);

    /* Long messages are truncated, never overflow. */
    char big[3 * ACX_ERRMSG_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    acx_error_set(ACX_ERR_INTERNAL, "a.c", 1, "%s", big);
    CHECK(strlen(acx_last_error()) == ACX_ERRMSG_MAX - 1);

    acx_error_clear();
    CHECK(acx_last_error()[0] == '\0');
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static char thread_saw_at_start[ACX_ERRMSG_MAX];
static char thread_saw_after[ACX_ERRMSG_MAX];

static void *error_thread(void *arg) {
    (void)arg;
    snprintf(thread_saw_at_start, sizeof thread_saw_at_start, "%s", acx_last_error());
    acx_error_set(ACX_ERR_IO, "io/loader.c", 99, "thread error");
    snprintf(thread_saw_after, sizeof thread_saw_after, "%s", acx_last_error());
    return NULL;
}

static int test_thread_error(void) {
    TESTING("last error is per thread");
    acx_error_set(ACX_ERR_MPI, "runtime/a.c", 1, "main error");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, error_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(strcmp(thread_saw_at_start, "") == 0);
    CHECK(strcmp(thread_saw_after, "io/loader.c:99: thread error") == 0);
    CHECK(strcmp(acx_last_error(), "runtime/a.c:1: main error") == 0);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- checking macros for system calls ---- */

/* ACX_SYS_CHECK_GOTO around a real open(2) of a missing path; *line_p is
 * the line of the check, which the message must name. */
static acx_status_t open_missing(int *line_p, int *reached_label_p) {
    acx_status_t status = ACX_OK;
    int fd = -1;
    *line_p = __LINE__ + 1;
    ACX_SYS_CHECK_GOTO(fd = open("/nonexistent/acx-test/no-such-file", O_RDONLY), status, err_open);
    close(fd);
    return ACX_OK;
err_open:
    *reached_label_p = 1;
    return status;
}

/* ACX_SYS_ERRNUM_CHECK_GOTO around posix_memalign with an alignment that is
 * not a power of two: it returns EINVAL and leaves errno alone. */
static acx_status_t memalign_bad(int *line_p, int *reached_label_p) {
    acx_status_t status = ACX_OK;
    void *p = NULL;
    *line_p = __LINE__ + 1;
    ACX_SYS_ERRNUM_CHECK_GOTO(posix_memalign(&p, 3 * sizeof(void *), 64), status, err_alloc);
    free(p);
    return ACX_OK;
err_alloc:
    *reached_label_p = 1;
    return status;
}

static int test_sys_check(void) {
    TESTING("ACX_SYS_(ERRNUM_)CHECK_GOTO: call, reason, file:line");
    char want[256];
    int line = 0, reached = 0;
    acx_error_clear();
    CHECK(open_missing(&line, &reached) == ACX_ERR_SYSTEM);
    CHECK(reached == 1);
    snprintf(want, sizeof want, "test_status.c:%d: ", line);
    CHECK(strstr(acx_last_error(), want) != NULL);
    CHECK(strstr(acx_last_error(),
                 "fd = open(\"/nonexistent/acx-test/no-such-file\", O_RDONLY) failed: No "
                 "such file or directory") != NULL);

    line = reached = 0;
    errno = ENOENT; /* must not be what the message reports */
    CHECK(memalign_bad(&line, &reached) == ACX_ERR_SYSTEM);
    CHECK(reached == 1);
    snprintf(want, sizeof want, "test_status.c:%d: ", line);
    CHECK(strstr(acx_last_error(), want) != NULL);
    CHECK(strstr(acx_last_error(),
                 "posix_memalign(&p, 3 * sizeof(void *), 64) failed: Invalid argument") != NULL);
    acx_error_clear();
    PASSED();
    return 0;
error:
    fprintf(stderr, "last error: %s\n", acx_last_error());
    FAILED();
    return 1;
}

/* ---- logging ---- */

static char capture_path[] = "/tmp/acx_log_XXXXXX";
static int saved_stderr = -1;

/* Point fd 2 at a fresh temporary file (O_APPEND: concurrent writers append). */
static int capture_begin(void) {
    snprintf(capture_path, sizeof capture_path, "/tmp/acx_log_XXXXXX");
    int fd = mkstemp(capture_path);
    if (fd < 0) return 0;
    close(fd);
    fd = open(capture_path, O_WRONLY | O_APPEND);
    if (fd < 0) return 0;
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
    return 1;
}

/* A whole file as a malloc'd NUL-terminated string (NULL if unreadable). */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    static const size_t cap = 1 << 20;
    char *buf = malloc(cap);
    size_t n = buf ? fread(buf, 1, cap - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

/* Restore fd 2 and return what was captured (malloc'd; NULL if none open). */
static char *capture_end(void) {
    if (saved_stderr < 0) return NULL;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    char *text = read_file(capture_path);
    unlink(capture_path);
    return text;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void short_host(char *h, size_t n) {
    if (gethostname(h, n) != 0) snprintf(h, n, "unknown");
    h[n - 1] = '\0';
    char *dot = strchr(h, '.');
    if (dot && dot != h) *dot = '\0';
}

static int test_log_format_and_filters(void) {
    TESTING("log lines: [acx r1/4 host] LEVEL subsys:, level and subsystem filters");
    char host[256], want[1024];
    short_host(host, sizeof host);
    unsetenv("ACX_LOG_FILE");
    char *out = NULL;

    CHECK(capture_begin());
    acx_log_setup(1, 4, ACX_LOG_INFO, "^coll");
    ACX_WARN(ACX_SUBSYS_COLL, "warn coll %d", 1); /* warnings ignore the mask */
    ACX_INFO(ACX_SUBSYS_COLL, "info coll");       /* excluded subsystem */
    ACX_INFO(ACX_SUBSYS_IO, "info io\n");         /* its own newline is not doubled */
    ACX_DEBUG(ACX_SUBSYS_IO, "debug io");         /* above the level */
    ACX_LOG_ERR(ACX_SUBSYS_DATA, "err data");
    out = capture_end();
    CHECK(out != NULL);
    snprintf(want, sizeof want,
             "[acx r1/4 %s] WARN  coll: warn coll 1\n"
             "[acx r1/4 %s] INFO  io: info io\n"
             "[acx r1/4 %s] ERROR data: err data\n",
             host, host, host);
    if (strcmp(out, want) != 0) fprintf(stderr, "\ngot:\n%swant:\n%s", out, want);
    CHECK(strcmp(out, want) == 0);
    free(out);
    out = NULL;

    /* Before MPI: no rank; an include list; debug level. */
    CHECK(capture_begin());
    acx_log_setup(-1, 0, ACX_LOG_DEBUG, "init, DATA");
    ACX_DEBUG(ACX_SUBSYS_INIT, "boot");
    ACX_DEBUG(ACX_SUBSYS_IO, "hidden");
    ACX_INFO(ACX_SUBSYS_DATA, "shown");
    ACX_WARN(ACX_SUBSYS_OPTIM, "warned");
    out = capture_end();
    CHECK(out != NULL);
    snprintf(want, sizeof want,
             "[acx %s] DEBUG init: boot\n[acx %s] INFO  data: shown\n"
             "[acx %s] WARN  optim: warned\n",
             host, host, host);
    if (strcmp(out, want) != 0) fprintf(stderr, "\ngot:\n%swant:\n%s", out, want);
    CHECK(strcmp(out, want) == 0);
    free(out);
    out = NULL;

    /* acx_log_enabled directly. */
    acx_log_setup(0, 2, ACX_LOG_WARN, NULL);
    CHECK(acx_log_enabled(ACX_LOG_ERROR, ACX_SUBSYS_IO));
    CHECK(acx_log_enabled(ACX_LOG_WARN, 0));
    CHECK(!acx_log_enabled(ACX_LOG_INFO, ACX_SUBSYS_IO));
    acx_log_setup(0, 2, ACX_LOG_DEBUG, "all");
    CHECK(acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_LAUNCH));
    acx_log_setup(0, 2, ACX_LOG_DEBUG, "^io,shard");
    CHECK(!acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_IO));
    CHECK(!acx_log_enabled(ACX_LOG_INFO, ACX_SUBSYS_SHARD));
    CHECK(acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_OPTIM));
    CHECK(acx_log_enabled(ACX_LOG_WARN, ACX_SUBSYS_IO));

    /* Unknown subsystem names are reported, not silently dropped. */
    CHECK(capture_begin());
    acx_log_setup(0, 2, ACX_LOG_DEBUG, "init,bogus");
    out = capture_end();
    CHECK(out != NULL);
    CHECK(strstr(out, "WARN  init: ACX_LOG_SUBSYS: unknown subsystem(s) 'bogus'") != NULL);
    CHECK(acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_INIT));
    CHECK(!acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_COLL));
    free(out);
    out = NULL;

    /* An over-long message is cut with "..." and still one line. */
    static char big[10000];
    memset(big, 'y', sizeof big - 1);
    CHECK(capture_begin());
    acx_log_setup(0, 1, ACX_LOG_WARN, NULL);
    ACX_WARN(ACX_SUBSYS_IO, "%s", big);
    out = capture_end();
    CHECK(out != NULL);
    CHECK(count_lines(out) == 1);
    CHECK(strlen(out) <= 4096);
    CHECK(strstr(out, "yyy...\n") != NULL);
    free(out);
    PASSED();
    return 0;
error:
    free(capture_end()); /* if a capture was still open */
    free(out);
    FAILED();
    return 1;
}

static int test_log_file(void) {
    TESTING("ACX_LOG_FILE with %h %p %r, fallback to stderr");
    char host[256], dir[] = "/tmp/acx_logdir_XXXXXX", pattern[128], path[512];
    short_host(host, sizeof host);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(pattern, sizeof pattern, "%s/r%%r-%%h-%%p.log", dir);
    setenv("ACX_LOG_FILE", pattern, 1);

    /* rank unknown: a %r pattern waits; lines go to stderr. */
    CHECK(capture_begin());
    acx_log_setup(-1, 0, ACX_LOG_INFO, NULL);
    ACX_INFO(ACX_SUBSYS_INIT, "early");
    char *out = capture_end();
    CHECK(out != NULL && strstr(out, "INFO  init: early\n") != NULL);
    free(out);

    acx_log_setup(2, 4, ACX_LOG_INFO, NULL);
    ACX_INFO(ACX_SUBSYS_IO, "to the file");
    snprintf(path, sizeof path, "%s/r2-%s-%ld.log", dir, host, (long)getpid());
    out = read_file(path);
    CHECK(out != NULL);
    char want[512];
    snprintf(want, sizeof want, "[acx r2/4 %s] INFO  io: to the file\n", host);
    CHECK(strcmp(out, want) == 0);
    free(out);

    /* Append mode: a second setup keeps what is there. */
    acx_log_setup(2, 4, ACX_LOG_INFO, NULL);
    ACX_INFO(ACX_SUBSYS_IO, "again");
    out = read_file(path);
    CHECK(out != NULL && count_lines(out) == 2);
    free(out);

    /* Unopenable: one warning on stderr, then lines on stderr. */
    setenv("ACX_LOG_FILE", "/nonexistent/dir/acx.log", 1);
    CHECK(capture_begin());
    acx_log_setup(0, 1, ACX_LOG_INFO, NULL);
    ACX_INFO(ACX_SUBSYS_IO, "fallback");
    acx_log_setup(0, 1, ACX_LOG_INFO, NULL);
    out = capture_end();
    CHECK(out != NULL);
    CHECK(strstr(out, "cannot open '/nonexistent/dir/acx.log'") != NULL);
    CHECK(strstr(out, "INFO  io: fallback\n") != NULL);
    CHECK(count_lines(out) == 2); /* warned once */
    free(out);

    unsetenv("ACX_LOG_FILE");
    acx_log_setup(0, 1, ACX_LOG_WARN, NULL);
    unlink(path);
    rmdir(dir);
    PASSED();
    return 0;
error:
    free(capture_end()); /* if a capture was still open */
    unsetenv("ACX_LOG_FILE");
    FAILED();
    return 1;
}

#define LOG_THREADS 4
#define LOG_LINES   2000

static void *log_thread(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < LOG_LINES; i++)
        ACX_INFO(ACX_SUBSYS_DATA, "thread %d line %d %s", id, i,
                 "padding-padding-padding-padding-padding-padding-padding-padding");
    return NULL;
}

static int test_log_threads(void) {
    TESTING("concurrent log lines never interleave");
    char *out = NULL;
    CHECK(capture_begin());
    acx_log_setup(0, 1, ACX_LOG_INFO, NULL);
    pthread_t t[LOG_THREADS];
    for (int i = 0; i < LOG_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, log_thread, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < LOG_THREADS; i++)
        pthread_join(t[i], NULL);
    out = capture_end();
    CHECK(out != NULL);
    CHECK(count_lines(out) == LOG_THREADS * LOG_LINES);
    /* Every line well-formed; per thread, lines in order. */
    int next[LOG_THREADS] = {0};
    for (char *line = out; *line;) {
        char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        *nl = '\0';
        CHECK(strncmp(line, "[acx r0/1 ", 10) == 0);
        char *body = strstr(line, "] INFO  data: thread ");
        CHECK(body != NULL);
        int id, i;
        CHECK(sscanf(body, "] INFO  data: thread %d line %d padding", &id, &i) == 2);
        CHECK(id >= 0 && id < LOG_THREADS && i == next[id]);
        next[id]++;
        CHECK(strcmp(nl - 7, "padding") == 0);
        line = nl + 1;
    }
    free(out);
    acx_log_setup(0, 1, ACX_LOG_WARN, NULL);
    PASSED();
    return 0;
error:
    free(capture_end()); /* if a capture was still open */
    free(out);
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_status_strings();
    failed += test_last_error();
    failed += test_thread_error();
    failed += test_sys_check();
    failed += test_log_format_and_filters();
    failed += test_log_file();
    failed += test_log_threads();
    return failed ? 1 : 0;
}
