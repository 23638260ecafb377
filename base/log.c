/*
 * base/log.c — leveled, per-subsystem log lines with the rank and
 * host in front, in the manner of NCCL_DEBUG / NCCL_DEBUG_SUBSYS.
 *
 * Owns: the line format, the level and subsystem filters, and the log
 * destination (stderr, or the file named by ACX_LOG_FILE). Leaves to others:
 * deciding the level (the resolved config's log_level), reading
 * ACX_LOG_SUBSYS (the caller passes its text), and metrics (JSONL, elsewhere).
 *
 * Line format (one write(2) per line, so lines from threads and from ranks
 * sharing a terminal or an O_APPEND file never interleave mid-line):
 *   [acx r3/8 node07] WARN  data: batch larger than the dataset
 *   [acx node07] INFO  init: ...            (before the rank is known)
 *
 * The state below is written only by acx_log_setup (during init, one
 * thread) and read by every thread afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/log.h"
#include "base/settings.h"

#define LOG_LINE_MAX 4096
#define LOG_HOST_MAX 256

static int log_rank = -1;
static int log_world_size = 0;
static int log_level = ACX_LOG_WARN;
static unsigned log_mask = ACX_SUBSYS_ALL;
static int log_fd = 2;              /* stderr, or the ACX_LOG_FILE we opened */
static char log_host[LOG_HOST_MAX]; /* filled once by fill_host() */
static int log_file_warned = 0;     /* "cannot open ACX_LOG_FILE" said once */

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"init", ACX_SUBSYS_INIT},   {"coll", ACX_SUBSYS_COLL}, {"shard", ACX_SUBSYS_SHARD},
    {"io", ACX_SUBSYS_IO},       {"data", ACX_SUBSYS_DATA}, {"launch", ACX_SUBSYS_LAUNCH},
    {"optim", ACX_SUBSYS_OPTIM},
};
#define NUM_SUBSYS (sizeof subsys_names / sizeof subsys_names[0])

/* Level names padded to 5 columns so messages line up. */
static const char *const level_names[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};

/* ---- helpers ---- */

static void fill_host_once(void) {
    char h[LOG_HOST_MAX];
    if (gethostname(h, sizeof h) != 0) snprintf(h, sizeof h, "unknown");
    h[sizeof h - 1] = '\0';
    /* Short host name, like `hostname -s`: "node07" rather than "node07.cluster.org". */
    char *dot = strchr(h, '.');
    if (dot != NULL && dot != h) *dot = '\0';
    snprintf(log_host, sizeof log_host, "%s", h);
}

/* The host name is looked up once, by whichever thread logs first. */
static void fill_host(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_host_once);
}

static const char *subsys_name(unsigned subsys) {
    for (size_t i = 0; i < NUM_SUBSYS; i++)
        if (subsys == subsys_names[i].bit) return subsys_names[i].name;
    return NULL; /* none or several bits: no tag */
}

/* write(2) all of buf, retrying on EINTR and short writes. */
static void write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* nowhere left to report a failing log destination */
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Parse ACX_LOG_SUBSYS: "init,coll", "all", "^io,data" (everything but).
 * Unknown names are collected into `unknown` (comma-separated) for a
 * warning once the logger is usable. */
static unsigned parse_subsys(const char *spec, char *unknown, size_t unknown_n) {
    unknown[0] = '\0';
    if (spec == NULL) return ACX_SUBSYS_ALL;
    while (*spec == ' ' || *spec == '\t')
        spec++;
    if (*spec == '\0') return ACX_SUBSYS_ALL;
    int exclude = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    unsigned mask = 0;
    const char *p = spec;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* trim blanks around the name */
        const char *s = p;
        size_t n = len;
        while (n > 0 && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n > 0) {
            int found = 0;
            if (n == 3 && strncasecmp(s, "all", 3) == 0) {
                mask = ACX_SUBSYS_ALL;
                found = 1;
            }
            for (size_t i = 0; !found && i < NUM_SUBSYS; i++) {
                if (strlen(subsys_names[i].name) == n &&
                    strncasecmp(s, subsys_names[i].name, n) == 0) {
                    mask |= subsys_names[i].bit;
                    found = 1;
                }
            }
            if (!found) {
                size_t used = strlen(unknown);
                if (used + n + 2 < unknown_n)
                    snprintf(unknown + used, unknown_n - used, "%s%.*s", used ? "," : "", (int)n,
                             s);
            }
        }
        if (end == NULL) break;
        p = end + 1;
    }
    return exclude ? ~mask : mask;
}

/* Expand ACX_LOG_FILE: %h host, %p pid, %r rank, %% a percent sign.
 * Returns 0 if the result does not fit. */
static int expand_path(const char *pattern, char *out, size_t n) {
    size_t o = 0;
    for (const char *p = pattern; *p != '\0'; p++) {
        char piece[LOG_HOST_MAX + 32];
        if (*p == '%' && p[1] != '\0') {
            p++;
            switch (*p) {
            case 'h': snprintf(piece, sizeof piece, "%s", log_host); break;
            case 'p': snprintf(piece, sizeof piece, "%ld", (long)getpid()); break;
            case 'r': snprintf(piece, sizeof piece, "%d", log_rank); break;
            case '%': snprintf(piece, sizeof piece, "%%"); break;
            default: snprintf(piece, sizeof piece, "%%%c", *p); break;
            }
        } else {
            piece[0] = *p;
            piece[1] = '\0';
        }
        size_t len = strlen(piece);
        if (o + len + 1 > n) return 0;
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
    return 1;
}

/* (Re)open the ACX_LOG_FILE destination for the current identity. A pattern
 * with %r waits until the rank is known (lines go to stderr until then), so
 * a pre-MPI setup does not leave a stray "rank -1" file behind. */
static void open_log_file(void) {
    const char *pattern = acx_env_text(ACX_ENV_LOG_FILE);
    int new_fd = 2;
    char path[4096];
    if (pattern != NULL && pattern[0] != '\0' && !(log_rank < 0 && strstr(pattern, "%r"))) {
        if (!expand_path(pattern, path, sizeof path)) {
            if (!log_file_warned) {
                log_file_warned = 1;
                acx_log_write(ACX_LOG_WARN, ACX_SUBSYS_INIT,
                              "%s='%s': expanded path too long; logging to stderr",
                              acx_env_name(ACX_ENV_LOG_FILE), pattern);
            }
        } else {
            int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd >= 0) {
                new_fd = fd;
            } else if (!log_file_warned) {
                int e = errno;
                log_file_warned = 1;
                if (log_fd != 2) close(log_fd);
                log_fd = 2;
                acx_log_write(ACX_LOG_WARN, ACX_SUBSYS_INIT,
                              "%s: cannot open '%s': %s; logging to stderr",
                              acx_env_name(ACX_ENV_LOG_FILE), path, strerror(e));
            }
        }
    }
    if (log_fd != 2 && log_fd != new_fd) close(log_fd);
    log_fd = new_fd;
}

/* ---- public (library-private) interface ---- */

void acx_log_setup(int rank, int world_size, int level, const char *subsys_spec) {
    fill_host();
    log_rank = rank;
    log_world_size = world_size;
    if (level < ACX_LOG_ERROR) level = ACX_LOG_ERROR;
    if (level > ACX_LOG_DEBUG) level = ACX_LOG_DEBUG;
    log_level = level;
    char unknown[256];
    log_mask = parse_subsys(subsys_spec, unknown, sizeof unknown);
    open_log_file();
    if (unknown[0] != '\0')
        acx_log_write(ACX_LOG_WARN, ACX_SUBSYS_INIT,
                      "%s: unknown subsystem(s) '%s' ignored (known: "
                      "init, coll, shard, io, data, launch, optim, all; '^' excludes)",
                      acx_env_name(ACX_ENV_LOG_SUBSYS), unknown);
}

int acx_log_enabled(int level, unsigned subsys) {
    if (level > log_level) return 0;
    if (level <= ACX_LOG_WARN) return 1; /* errors and warnings ignore the mask */
    return (subsys & log_mask) != 0;
}

/* One line with the given label ("WARN ", "NOTE ", ...). */
static void log_vwrite(const char *label, unsigned subsys, const char *fmt, va_list ap) {
    char line[LOG_LINE_MAX];
    size_t cap = sizeof line - 1; /* room kept for the final '\n' */
    fill_host();

    int n;
    const char *tag = subsys_name(subsys);
    if (log_rank >= 0)
        n = snprintf(line, cap, "[acx r%d/%d %s] %s %s%s", log_rank, log_world_size, log_host,
                     label, tag ? tag : "", tag ? ": " : "");
    else
        n = snprintf(line, cap, "[acx %s] %s %s%s", log_host, label, tag ? tag : "",
                     tag ? ": " : "");
    size_t len = (n < 0) ? 0 : ((size_t)n >= cap ? cap - 1 : (size_t)n);

    n = vsnprintf(line + len, cap - len, fmt, ap);
    if (n > 0) {
        if ((size_t)n >= cap - len) {
            len = cap - 1;
            memcpy(line + len - 3, "...", 3); /* mark the truncation */
        } else {
            len += (size_t)n;
        }
    }
    while (len > 0 && line[len - 1] == '\n')
        len--; /* one newline, ours */
    line[len++] = '\n';
    write_all(log_fd, line, len);
}

void acx_log_write(int level, unsigned subsys, const char *fmt, ...) {
    if (level < ACX_LOG_ERROR) level = ACX_LOG_ERROR;
    if (level > ACX_LOG_DEBUG) level = ACX_LOG_DEBUG;
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level_names[level], subsys, fmt, ap);
    va_end(ap);
}

void acx_log_note(unsigned subsys, const char *fmt, ...) {
    if (log_level < ACX_LOG_WARN) return; /* log_level error: errors only */
    va_list ap;
    va_start(ap, fmt);
    log_vwrite("NOTE ", subsys, fmt, ap);
    va_end(ap);
}
