/*
 * runtime/project.c — the project directory: who may write
 * <project_dir>/checkpoints, what it holds, and which of its files belong
 * to the running job. Owns the directory's creation and writability check,
 * the project lock, the run identity (run_id) and the attribution of files
 * to it, the refusal of a run that would replace an earlier run's
 * checkpoints (and checkpoint.existing: archive), automatic names
 * (step_%08lld.h5), the `latest` pointer and checkpoint.total_limit.
 * Leaves to others: what a checkpoint contains and loading it
 * (runtime/checkpoint.c), the file itself (io/ckpt_write.c, io/ckpt_read.c), resume: auto
 * (runtime/preempt.c). Everything on the file system is done by rank 0;
 * outcomes are agreed, so every rank fails the same way.
 *
 * Why a lock. Two jobs writing one project directory overwrite each
 * other's step_N.h5 (the same names), race on step_N.h5.tmp (the second's
 * rename finds the first's temporary gone) and point `latest` at each
 * other's files; retention then deletes the other job's checkpoints. The
 * first job to use the directory for writing holds <project_dir>/.acx-lock
 * until acx_finalize (or until it stops for preemption); a second one is
 * refused at its start with the holder's host, pid and Slurm job.
 *
 * How the lock is taken. The holder's identity is written to a private
 * file first, then link(2)ed to .acx-lock: link is atomic and fails with
 * EEXIST on every file system clusters use (NFSv2 and later, Lustre, GPFS,
 * BeeGFS, local ones), where O_EXCL is atomic only from NFSv3 on and
 * flock/fcntl locks depend on a lock daemon or mount options (GPFS and
 * Lustre without -o flock refuse or ignore them). NFS may report a link that
 * happened as failed (a retransmitted request): a link count of 2 on the
 * private file says it happened (open(2)'s NFS note). The lock is therefore
 * complete when it appears — never an empty file of a job killed between
 * create and write.
 *
 * A lock left by a killed job. The holder refreshes the lock's mtime every
 * PROJECT_HEARTBEAT_S seconds from a thread that makes no MPI call (only
 * futimens on its descriptor). A job that finds a lock takes it over, with
 * a warning naming the old holder, when the holder is on this host and its
 * pid no longer exists, or when the heartbeat is older than PROJECT_STALE_S
 * (300 s: ten missed heartbeats, beyond NFS's default attribute caching of
 * up to 60 s and a slow metadata server). The age is measured on the file
 * system's clock — the mtime of a file this job has just created there
 * against the lock's — so clock skew between nodes does not matter. A job
 * stopped (SIGSTOP) or hung for more than 300 s can lose its lock; before
 * each save the holder checks that .acx-lock is still its own file (same
 * inode) and refuses to save otherwise, so even then nothing is replaced.
 * Taking over renames the stale lock aside (atomic; one of two racing jobs
 * wins), checks that what it moved is the lock it judged stale, and then
 * links its own.
 *
 * Attribution. Every checkpoint carries the root attribute run_id: 32 hex
 * digits drawn at a fresh start and inherited by a run that loads a
 * checkpoint (resume), so a lineage of requeued jobs is one run. Retention
 * counts and deletes only files whose run_id is this run's; a file it
 * cannot attribute (unreadable, another run_id, none: written before
 * run_id existed) is left alone and not counted.
 */
#define _GNU_SOURCE /* strerrorname_np */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "runtime/accelerator.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/project.h"

#define PROJECT_PATH_MAX    4096
#define PROJECT_HEARTBEAT_S 30
#define PROJECT_STALE_S     300
#define LOCK_NAME           ".acx-lock"
#define LOCK_TEXT_MAX       1024

struct acx_project {
    char run_id[ACX_RUN_ID_LEN];
    int loaded;   /* a checkpoint was loaded: this run continues a lineage */
    int opened;   /* rank 0: checked, and the lock is held */
    int verified; /* the existing-checkpoint check passed once (not repeated on reopen) */
    int lock_fd;  /* rank 0: our lock file, -1 = none */
    char lock_path[PROJECT_PATH_MAX];
    char dir[PROJECT_PATH_MAX]; /* <project_dir>/checkpoints */
    char host[256];
    /* heartbeat (rank 0) */
    pthread_t hb;
    int hb_running, hb_stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ---- small helpers ---- */

/* "Read-only file system (EROFS)" */
static const char *errno_text(int e, char *buf, size_t n) {
    const char *name = strerrorname_np(e);
    snprintf(buf, n, "%s (%s)", strerror(e), name != NULL ? name : "?");
    return buf;
}

static void hex_random(char *out, size_t nbytes) {
    unsigned char b[32];
    if (nbytes > sizeof b) nbytes = sizeof b;
    if (getrandom(b, nbytes, 0) != (ssize_t)nbytes) {
        /* no entropy source: time and pid still differ between runs */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid() << 40;
        for (size_t i = 0; i < nbytes; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            b[i] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < nbytes; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * nbytes] = '\0';
}

static int64_t cmp_i64_desc(int64_t x, int64_t y) { return x < y ? 1 : x > y ? -1 : 0; }

int64_t acx_project_step_of_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *s = name + 5;
    int64_t v = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = 10 * v + (*s - '0');
    }
    return digits > 0 && strcmp(s, ".h5") == 0 ? v : -1;
}

/* The checkpoint files of a directory: names and steps, newest first. */
typedef struct ckpt_list {
    int n, cap;
    struct entry {
        int64_t step;
        char name[256];
    } * e;
    int has_latest;
} ckpt_list_t;

static int entry_cmp(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    int c = (int)cmp_i64_desc(x->step, y->step);
    return c != 0 ? c : strcmp(x->name, y->name);
}

static acx_status_t list_checkpoints(const char *dir, ckpt_list_t *l) {
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    char why[128];
    if (d == NULL)
        return ACX_ERROR(ACX_ERR_IO, "cannot list checkpoint directory '%s': %s", dir,
                         errno_text(errno, why, sizeof why));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, "latest") == 0) l->has_latest = 1;
        int64_t s = acx_project_step_of_name(de->d_name);
        if (s < 0 || strlen(de->d_name) >= sizeof l->e->name) continue;
        if (l->n == l->cap) {
            int nc = l->cap ? 2 * l->cap : 32;
            struct entry *e = realloc(l->e, (size_t)nc * sizeof *e);
            if (e == NULL) {
                closedir(d);
                free(l->e);
                l->e = NULL;
                return ACX_ERROR(ACX_ERR_NO_MEMORY, "out of memory listing '%s'", dir);
            }
            l->e = e;
            l->cap = nc;
        }
        l->e[l->n].step = s;
        snprintf(l->e[l->n].name, sizeof l->e[l->n].name, "%s", de->d_name);
        l->n++;
    }
    closedir(d);
    if (l->n > 1) qsort(l->e, (size_t)l->n, sizeof *l->e, entry_cmp);
    return ACX_OK;
}

/* The run_id of a checkpoint file, "" when it has none or cannot be read
 * (this process alone: io's serial open, no MPI). */
static void run_id_of_file(const char *path, char id[ACX_RUN_ID_LEN]) {
    acx_ckpt_file_t *f = NULL;
    id[0] = '\0';
    char saved[ACX_ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", acx_last_error()); /* a probe, not an error */
    if (acx_ckpt_open(NULL, path, &f) == ACX_OK) {
        if (acx_ckpt_get_str(f, "/", "run_id", id, ACX_RUN_ID_LEN) != ACX_OK) id[0] = '\0';
        acx_ckpt_close(f);
    }
    acx_error_set_raw(ACX_OK, saved);
}

/* ---- the directory ---- */

/* mkdir -p, naming what could not be created and why. */
static acx_status_t make_dirs(const char *project, const char *dir) {
    char buf[PROJECT_PATH_MAX], why[128];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "project_dir path '%.64s...' is too long", dir);
    for (char *s = buf + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return ACX_ERROR(ACX_ERR_IO, "cannot create project_dir '%s': mkdir '%s': %s", project,
                             buf, errno_text(errno, why, sizeof why));
        *s = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ACX_ERROR(ACX_ERR_IO, "project_dir '%s': '%s' is not a directory", project, dir);
    return ACX_OK;
}

/* Create, write and remove a probe file in dir: a read-only mount, a full
 * quota or missing permissions show here, at acx_prepare, not at the first
 * save after hours of training (access(2) says nothing about a read-only
 * mount for root, nor about quotas). Its mtime is the file system's "now". */
static acx_status_t probe_writable(const char *project, const char *dir, const char *host,
                                   struct timespec *now_p) {
    char path[PROJECT_PATH_MAX + 128], why[128];
    snprintf(path, sizeof path, "%s/.acx-probe.%s.%d", dir, host, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO,
                         "project_dir '%s' is not writable: cannot create '%s': %s (checked at "
                         "acx_prepare, before training; use a writable project_dir)",
                         project, path, errno_text(errno, why, sizeof why));
    struct stat st;
    int ok = write(fd, "x", 1) == 1 && fsync(fd) == 0 && fstat(fd, &st) == 0;
    int err = errno;
    close(fd);
    unlink(path);
    if (!ok)
        return ACX_ERROR(ACX_ERR_IO, "project_dir '%s' is not writable: writing '%s': %s", project,
                         path, errno_text(err, why, sizeof why));
    *now_p = st.st_mtim;
    return ACX_OK;
}

/* ---- the lock ---- */

typedef struct holder {
    char host[256], job[64], step[64], started[40], nonce[40];
    long pid;
    char text[LOCK_TEXT_MAX];
} holder_t;

/* src into dst[n], cut to fit (a lock written by anyone may hold anything) */
static void copy_text(char *dst, size_t n, const char *src) {
    size_t len = strnlen(src, n - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void parse_holder(const char *text, holder_t *h) {
    memset(h, 0, sizeof *h);
    snprintf(h->text, sizeof h->text, "%s", text);
    h->pid = -1;
    snprintf(h->host, sizeof h->host, "?");
    snprintf(h->job, sizeof h->job, "-");
    for (const char *line = text; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        size_t len = strcspn(line, "\n");
        char l[512];
        snprintf(l, sizeof l, "%.*s", (int)(len < sizeof l ? len : sizeof l - 1), line);
        if (strncmp(l, "host=", 5) == 0) copy_text(h->host, sizeof h->host, l + 5);
        if (strncmp(l, "pid=", 4) == 0) h->pid = strtol(l + 4, NULL, 10);
        if (strncmp(l, "slurm_job_id=", 13) == 0) copy_text(h->job, sizeof h->job, l + 13);
        if (strncmp(l, "slurm_step_id=", 14) == 0) copy_text(h->step, sizeof h->step, l + 14);
        if (strncmp(l, "started=", 8) == 0) copy_text(h->started, sizeof h->started, l + 8);
        if (strncmp(l, "nonce=", 6) == 0) copy_text(h->nonce, sizeof h->nonce, l + 6);
    }
}

static int read_text(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t r = read(fd, buf, n - 1);
    int err = errno;
    close(fd);
    if (r < 0) {
        errno = err;
        return -1;
    }
    buf[r] = '\0';
    return 0;
}

/* "host n1, pid 4242, Slurm job 77.0, started 2026-12-02T01:00:00Z" */
static void describe_holder(const holder_t *h, char *buf, size_t n) {
    snprintf(buf, n, "host %s, pid %ld, Slurm job %s%s%s, started %s", h->host, h->pid,
             strcmp(h->job, "-") == 0 ? "none" : h->job,
             h->step[0] && strcmp(h->step, "-") ? "." : "",
             h->step[0] && strcmp(h->step, "-") ? h->step : "", h->started[0] ? h->started : "?");
}

static void *heartbeat_main(void *arg) {
    struct acx_project *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->hb_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += PROJECT_HEARTBEAT_S;
        pthread_cond_timedwait(&p->cv, &p->mu, &until);
        if (!p->hb_stop && p->lock_fd >= 0) (void)futimens(p->lock_fd, NULL);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void lock_release(struct acx_project *p) {
    if (p->hb_running) {
        pthread_mutex_lock(&p->mu);
        p->hb_stop = 1;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->hb, NULL);
        p->hb_running = 0;
    }
    if (p->lock_fd >= 0) {
        struct stat mine, cur;
        /* only our own file: after a takeover the name is another job's */
        if (fstat(p->lock_fd, &mine) == 0 && stat(p->lock_path, &cur) == 0 &&
            mine.st_dev == cur.st_dev && mine.st_ino == cur.st_ino)
            unlink(p->lock_path);
        close(p->lock_fd);
        p->lock_fd = -1;
    }
    p->opened = 0;
}

static int pid_exists(long pid) {
    if (pid <= 0 || pid > INT_MAX) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return 0;
    /* a zombie (killed, not yet reaped by its launcher) is gone too */
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (read_text(path, stat, sizeof stat) != 0) return 1;
    const char *close_paren = strrchr(stat, ')');
    return !(close_paren != NULL && close_paren[1] == ' ' && close_paren[2] == 'Z');
}

/* Whether a process of this host is alive, allowing it a moment to finish
 * exiting: a launcher returns as soon as it has seen a rank die, while the
 * rank's process may still be on its way out (measured: Open MPI's mpirun
 * returned while the SIGKILLed rank 0 still existed). */
static int pid_alive(long pid) {
    for (int i = 0; i < 30; i++) {
        if (!pid_exists(pid)) return 0;
        struct timespec tick = {0, 100 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    return 1;
}

/* Take <project>/.acx-lock (rank 0). now: the file system's clock. */
static acx_status_t lock_acquire(acx_accelerator_t *acc, struct acx_project *p, const char *project,
                                 struct timespec now) {
    char tmp[PROJECT_PATH_MAX + 160], text[LOCK_TEXT_MAX], nonce[33], started[40], why[128];
    snprintf(p->lock_path, sizeof p->lock_path, "%s/%s", project, LOCK_NAME);
    hex_random(nonce, 16);
    snprintf(tmp, sizeof tmp, "%s.%.64s.%d.%.8s", p->lock_path, p->host, (int)getpid(), nonce);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* the Slurm job and step as launch/env.h read them at acx_init; "-": none */
    char job[24] = "-", step[24] = "-";
    if (acc->launch.slurm_job_id > 0) snprintf(job, sizeof job, "%ld", acc->launch.slurm_job_id);
    if (acc->launch.slurm_step_id >= 0)
        snprintf(step, sizeof step, "%ld", acc->launch.slurm_step_id);
    int len = snprintf(text, sizeof text,
                       "acx project lock (see docs/checkpoint-format.md)\nhost=%s\npid=%d\n"
                       "slurm_job_id=%s\nslurm_step_id=%s\nstarted=%s\nrun_id=%s\nnonce=%s\n",
                       p->host, (int)getpid(), job, step, started, p->run_id, nonce);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot create the project lock's file '%s': %s", tmp,
                         errno_text(errno, why, sizeof why));
    if (write(fd, text, (size_t)len) != len || fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return ACX_ERROR(ACX_ERR_IO, "cannot write the project lock's file '%s': %s", tmp,
                         errno_text(err, why, sizeof why));
    }
    acx_status_t status = ACX_OK;
    for (int attempt = 0;; attempt++) {
        struct stat st;
        if (link(tmp, p->lock_path) == 0 || (fstat(fd, &st) == 0 && st.st_nlink == 2)) break;
        if (errno != EEXIST) {
            status = ACX_ERROR(ACX_ERR_IO, "cannot create the project lock '%s': %s", p->lock_path,
                               errno_text(errno, why, sizeof why));
            goto err;
        }
        char held[LOCK_TEXT_MAX];
        holder_t h;
        if (read_text(p->lock_path, held, sizeof held) != 0 || stat(p->lock_path, &st) != 0) {
            if (errno == ENOENT && attempt < 3) continue; /* released meanwhile */
            status = ACX_ERROR(ACX_ERR_IO, "cannot read the project lock '%s': %s", p->lock_path,
                               errno_text(errno, why, sizeof why));
            goto err;
        }
        parse_holder(held, &h);
        char who[512], reason[160] = "";
        describe_holder(&h, who, sizeof who);
        long long age = (long long)(now.tv_sec - st.st_mtim.tv_sec);
        if (strcmp(h.host, p->host) == 0 && h.pid > 0 && !pid_alive(h.pid))
            snprintf(reason, sizeof reason, "its process %ld on this host no longer exists", h.pid);
        else if (age > PROJECT_STALE_S)
            snprintf(reason, sizeof reason,
                     "its heartbeat is %lld s old (a live holder refreshes it every %d s; stale "
                     "after %d s)",
                     age, PROJECT_HEARTBEAT_S, PROJECT_STALE_S);
        if (reason[0] == '\0' || attempt >= 3) {
            status = ACX_ERROR(
                ACX_ERR_IO,
                "project_dir '%s' is in use by another job (%s; lock '%s', heartbeat %lld s "
                "ago): two jobs writing one project_dir replace each other's checkpoints; wait "
                "for it to end or use another project_dir (a lock of a killed job is taken over "
                "once its heartbeat is %d s old, at once on the same host)",
                project, who, p->lock_path, age, PROJECT_STALE_S);
            goto err;
        }
        /* take it over: move it aside (one racing job wins the rename), and
         * check that what moved is the lock judged stale */
        char aside[PROJECT_PATH_MAX + 160], moved[LOCK_TEXT_MAX];
        snprintf(aside, sizeof aside, "%s.stale.%.64s.%d", p->lock_path, p->host, (int)getpid());
        if (rename(p->lock_path, aside) != 0) continue; /* another job moved it first */
        if (read_text(aside, moved, sizeof moved) != 0 || strcmp(moved, held) != 0) {
            if (link(aside, p->lock_path) != 0) { /* the new holder's lock goes back */
            }
            unlink(aside);
            status = ACX_ERROR(ACX_ERR_IO,
                               "project_dir '%s': the lock '%s' changed while this job took over "
                               "a stale one (another job starting at the same time?): retry",
                               project, p->lock_path);
            goto err;
        }
        unlink(aside);
        ACX_WARN(ACX_SUBSYS_IO,
                 "project_dir '%s': took over the lock of a job that is gone (%s): %s", project,
                 who, reason);
    }
    unlink(tmp);
    (void)acc;
    p->lock_fd = fd;
    p->hb_stop = 0;
    if (pthread_create(&p->hb, NULL, heartbeat_main, p) == 0)
        p->hb_running = 1;
    else
        ACX_WARN(ACX_SUBSYS_IO,
                 "project lock '%s': cannot start the heartbeat thread: a job "
                 "running longer than %d s may lose the lock to another",
                 p->lock_path, PROJECT_STALE_S);
    return ACX_OK;

err:
    close(fd);
    unlink(tmp);
    return status;
}

/* Is .acx-lock still the file this job linked? */
static acx_status_t lock_still_ours(struct acx_project *p) {
    struct stat mine, cur;
    if (p->lock_fd >= 0 && fstat(p->lock_fd, &mine) == 0 && stat(p->lock_path, &cur) == 0 &&
        mine.st_dev == cur.st_dev && mine.st_ino == cur.st_ino)
        return ACX_OK;
    char held[LOCK_TEXT_MAX], who[512] = "nobody (the lock file is gone)";
    holder_t h;
    if (read_text(p->lock_path, held, sizeof held) == 0) {
        parse_holder(held, &h);
        describe_holder(&h, who, sizeof who);
    }
    return ACX_ERROR(ACX_ERR_IO,
                     "the project lock '%s' is no longer this job's (now: %s; was this job "
                     "stopped for more than %d s?): not saving, so that nothing of the other job "
                     "is replaced",
                     p->lock_path, who, PROJECT_STALE_S);
}

/* ---- checkpoints already there ---- */

/* Move every step_*.h5 and `latest` into dir/archived-<UTC time>[-N]/:
 * renames within one directory tree, nothing deleted or replaced. */
static acx_status_t archive(const char *dir, const ckpt_list_t *l, char *where, size_t n) {
    char why[128], stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    for (int i = 0;; i++) {
        if (i == 0)
            snprintf(where, n, "%s/archived-%s", dir, stamp);
        else
            snprintf(where, n, "%s/archived-%s-%d", dir, stamp, i);
        if (mkdir(where, 0777) == 0) break;
        if (errno != EEXIST || i > 100)
            return ACX_ERROR(ACX_ERR_IO, "checkpoint.existing: archive: cannot create '%s': %s",
                             where, errno_text(errno, why, sizeof why));
    }
    for (int i = 0; i <= l->n; i++) {
        const char *name = i < l->n ? l->e[i].name : l->has_latest ? "latest" : NULL;
        if (name == NULL) break;
        char from[PROJECT_PATH_MAX + 300], to[PROJECT_PATH_MAX + 300];
        snprintf(from, sizeof from, "%s/%s", dir, name);
        snprintf(to, sizeof to, "%s/%s", where, name);
        if (rename(from, to) != 0)
            return ACX_ERROR(ACX_ERR_IO,
                             "checkpoint.existing: archive: cannot move '%s' to '%s': %s", from, to,
                             errno_text(errno, why, sizeof why));
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    return ACX_OK;
}

/* Rank 0: the run does not resume; refuse (or archive) when the directory
 * holds checkpoints. */
static acx_status_t check_existing(acx_accelerator_t *acc, struct acx_project *p,
                                   const char *project) {
    ckpt_list_t l;
    ACX_CHECK(list_checkpoints(p->dir, &l));
    acx_status_t status = ACX_OK;
    if (l.n == 0 && !l.has_latest) goto out;
    if (acc->config.values.checkpoint_existing == ACX_CHECKPOINT_EXISTING_ARCHIVE) {
        char where[PROJECT_PATH_MAX + 64];
        status = archive(p->dir, &l, where, sizeof where);
        if (status == ACX_OK)
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint.existing: archive: moved %d checkpoint(s)%s of an earlier run "
                     "to '%s'; this run starts over",
                     l.n, l.has_latest ? " and 'latest'" : "", where);
        goto out;
    }
    char newest[PROJECT_PATH_MAX + 300];
    if (l.n > 0)
        snprintf(newest, sizeof newest, "newest '%s/%s', step %lld", p->dir, l.e[0].name,
                 (long long)l.e[0].step);
    else
        snprintf(newest, sizeof newest, "only a 'latest' pointer");
    /* the message must fit ACX_ERRMSG_MAX with two long paths: the choices
     * first, the archive place relative to project_dir */
    status = ACX_ERROR(
        ACX_ERR_IO,
        "project_dir '%s' holds %d checkpoint(s) of an earlier run (%s) and this run does not "
        "resume%s: its saves would replace them. Resume them (resume: auto, or resume_from: "
        "latest or a file; acx-fmnist --resume latest), use another project_dir, or set "
        "checkpoint.existing: archive (moves them to checkpoints/archived-<time>/ and starts over)",
        project, l.n, newest,
        acc->config.values.resume == ACX_RESUME_AUTO ? " (resume: auto found no 'latest')" : "");
out:
    free(l.e);
    return status;
}

/* ---- open ---- */

static struct acx_project *project_get(acx_accelerator_t *acc) {
    if (acc->project != NULL) return acc->project;
    struct acx_project *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->lock_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (gethostname(p->host, sizeof p->host) != 0) snprintf(p->host, sizeof p->host, "unknown");
    p->host[sizeof p->host - 1] = '\0';
    acc->project = p;
    return p;
}

static int resume_from_set(const acx_accelerator_t *acc) {
    const char *r = acc->config.values.resume_from;
    return r != NULL && strcmp(r, "none") != 0;
}

/* Rank 0: directory, writability, lock, and (once) the existing-checkpoint
 * check. resuming: this run continues the checkpoints it finds. */
static acx_status_t project_open(acx_accelerator_t *acc, int resuming) {
    struct acx_project *p = acc->project;
    const char *project = acc->config.values.project_dir;
    struct timespec now;
    snprintf(p->dir, sizeof p->dir, "%s/checkpoints", project);
    ACX_CHECK(make_dirs(project, p->dir));
    ACX_CHECK(probe_writable(project, p->dir, p->host, &now));
    ACX_CHECK(lock_acquire(acc, p, project, now));
    if (!p->verified && !resuming) {
        acx_status_t status = check_existing(acc, p, project);
        if (status != ACX_OK) {
            lock_release(p);
            return status;
        }
    }
    p->verified = 1;
    p->opened = 1;
    return ACX_OK;
}

/* Rank 0, after resume_from loaded step `step` of run p->run_id: refuse
 * when the checkpoints directory holds newer checkpoints of that run, which
 * this run's saves would replace with other states. Names the newest. */
static acx_status_t check_newer(struct acx_project *p, int64_t step) {
    ckpt_list_t l;
    ACX_CHECK(list_checkpoints(p->dir, &l));
    int newer = 0;
    char first[256] = "";
    for (int i = 0; i < l.n && l.e[i].step > step; i++) { /* newest first */
        char path[PROJECT_PATH_MAX + 300], id[ACX_RUN_ID_LEN];
        snprintf(path, sizeof path, "%s/%s", p->dir, l.e[i].name);
        run_id_of_file(path, id);
        if (strcmp(id, p->run_id) != 0) continue;
        if (newer++ == 0) snprintf(first, sizeof first, "%s", l.e[i].name);
    }
    free(l.e);
    if (newer == 0) return ACX_OK;
    return ACX_ERROR(ACX_ERR_IO,
                     "resume_from loaded step %lld, but '%s' holds %d newer checkpoint(s) of the "
                     "same run (newest '%s'): this run's saves would replace them. Resume the "
                     "newest (resume_from: latest), move the newer ones away, or use another "
                     "project_dir",
                     (long long)step, p->dir, newer, first);
}

acx_status_t acx_project_prepare(acx_accelerator_t *acc) {
    struct acx_project *p = project_get(acc);
    acx_status_t status = p != NULL ? ACX_OK : ACX_ERROR(ACX_ERR_NO_MEMORY, "project state");
    ACX_CHECK(acx_coll_agree(acc->world, status));
    if (acc->rank == 0) hex_random(p->run_id, 16);
    ACX_MPI_CHECK(MPI_Bcast(p->run_id, ACX_RUN_ID_LEN, MPI_CHAR, 0, acc->world->mpi));
    p->run_id[ACX_RUN_ID_LEN - 1] = '\0';

    const acx_config_t *c = &acc->config.values;
    int writes =
        c->checkpoint.save_every_steps > 0 || c->resume == ACX_RESUME_AUTO || resume_from_set(acc);
    if (!writes && acc->preempt_active) {
        /* A run that saves only when preempted still writes here then: an
         * earlier run's checkpoints must stop it now, not refuse its only
         * save after hours of training. No lock yet (every program with
         * the default preemption.signals would lock "."): the first save
         * takes it. */
        if (acc->rank == 0) {
            struct acx_project *pp = acc->project;
            snprintf(pp->dir, sizeof pp->dir, "%s/checkpoints", c->project_dir);
            struct stat st;
            if (stat(pp->dir, &st) == 0 && S_ISDIR(st.st_mode)) {
                status = check_existing(acc, pp, c->project_dir);
                if (status == ACX_OK) pp->verified = 1;
            }
        }
        return acx_coll_agree(acc->world, status);
    }
    if (!writes) return ACX_OK; /* the first automatically named save opens it */
    if (acc->rank == 0) {
        char latest[PROJECT_PATH_MAX + 16];
        struct stat st;
        snprintf(latest, sizeof latest, "%s/checkpoints/latest", c->project_dir);
        int resuming =
            resume_from_set(acc) || (c->resume == ACX_RESUME_AUTO && stat(latest, &st) == 0);
        status = project_open(acc, resuming);
    }
    ACX_CHECK(acx_coll_agree(acc->world, status));
    if (!resume_from_set(acc)) return ACX_OK;
    const char *from = c->resume_from;
    ACX_CHECK(acx_load_state(acc, strcmp(from, "latest") == 0 ? NULL : from, 1));
    /* An explicit older checkpoint of this run, continued with periodic
     * saves: they would replace the newer ones of the same run. (A
     * `latest` resume continues the newest: a newer file there is one a
     * killed save completed. A run without periodic saves may load an
     * older checkpoint to look at it.) */
    if (strcmp(from, "latest") != 0 && c->checkpoint.save_every_steps > 0) {
        if (acc->rank == 0) status = check_newer(acc->project, acc->step);
        ACX_CHECK(acx_coll_agree(acc->world, status));
    }
    if (acc->rank == 0)
        ACX_INFO(ACX_SUBSYS_IO, "resume_from: %s: continuing at step %lld", from,
                 (long long)acc->step);
    return ACX_OK;
}

int acx_project_loaded(const acx_accelerator_t *acc) {
    return acc->project != NULL && acc->project->loaded;
}

acx_status_t acx_project_for_save(acx_accelerator_t *acc, int64_t step, char *dir, size_t n,
                                  char *name, size_t n_name) {
    struct acx_project *p = acc->project;
    acx_status_t status = ACX_OK;
    if (p == NULL) return ACX_ERROR(ACX_ERR_STATE, "automatic checkpoint names before acx_prepare");
    if (step < 0)
        return ACX_ERROR(ACX_ERR_STATE,
                         "step %lld is negative (a wrapped step counter?): a checkpoint cannot be "
                         "named after it",
                         (long long)step);
    snprintf(dir, n, "%s/checkpoints", acc->config.values.project_dir);
    snprintf(name, n_name, "step_%08lld.h5", (long long)step);
    if (acc->rank == 0) {
        if (!p->opened)
            status = project_open(acc, p->loaded);
        else
            status = lock_still_ours(p);
        char path[PROJECT_PATH_MAX + 64], id[ACX_RUN_ID_LEN];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (status == ACX_OK && access(path, F_OK) == 0) {
            /* the same step of this run (a save the job repeats, or one a
             * killed job completed without `latest`): the same state, so it
             * may be written again; anything else is never replaced */
            run_id_of_file(path, id);
            if (strcmp(id, p->run_id) != 0)
                status = ACX_ERROR(
                    ACX_ERR_IO,
                    "'%s' exists and is not this run's checkpoint (run_id '%s', this run '%s'): "
                    "acx does not replace another run's checkpoint; move it away or use another "
                    "project_dir",
                    path, id[0] ? id : "none", p->run_id);
        }
    }
    return acx_coll_agree(acc->world, status);
}

/* ---- after a save: `latest` and retention ---- */

/* Point dir/latest at `name`: write latest.tmp, fsync, rename, fsync the
 * directory — a crash leaves either the old or the new pointer, never a
 * torn one. */
static acx_status_t write_latest(const char *dir, const char *name) {
    char tmp[PROJECT_PATH_MAX + 16], dst[PROJECT_PATH_MAX + 16], why[128];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(dst, sizeof dst, "%s/latest", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot create '%s': %s", tmp,
                         errno_text(errno, why, sizeof why));
    char line[PROJECT_PATH_MAX + 2];
    int len = snprintf(line, sizeof line, "%s\n", name);
    ssize_t w = write(fd, line, (size_t)len);
    int err = errno;
    if (w != len || fsync(fd) != 0) {
        if (w == len) err = errno;
        close(fd);
        unlink(tmp);
        return ACX_ERROR(ACX_ERR_IO, "cannot write '%s': %s", tmp,
                         w == len || w < 0 ? errno_text(err, why, sizeof why) : "short write");
    }
    if (close(fd) != 0) {
        err = errno;
        unlink(tmp);
        return ACX_ERROR(ACX_ERR_IO, "cannot close '%s': %s", tmp,
                         errno_text(err, why, sizeof why));
    }
    if (rename(tmp, dst) != 0) {
        err = errno;
        unlink(tmp);
        return ACX_ERROR(ACX_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, dst,
                         errno_text(err, why, sizeof why));
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_SYSTEM, "open of directory '%s' for fsync failed: %s", dir,
                         errno_text(errno, why, sizeof why));
    int ret = fsync(fd);
    err = errno;
    close(fd);
    if (ret != 0 && err != EINVAL)
        return ACX_ERROR(ACX_ERR_SYSTEM, "fsync of directory '%s' failed: %s", dir,
                         errno_text(err, why, sizeof why));
    return ACX_OK;
}

/* Append `name` to the comma-separated list removed[n]; a list that does not
 * fit ends in "...". */
static void note_removed(char *removed, size_t n, const char *name) {
    size_t len = strlen(removed);
    if (len >= 3 && strcmp(removed + len - 3, "...") == 0) return;
    const char *sep = len > 0 ? ", " : "";
    if (len + strlen(sep) + strlen(name) + 4 < n)
        snprintf(removed + len, n - len, "%s%s", sep, name);
    else if (len + 4 < n)
        snprintf(removed + len, n - len, "...");
}

/* checkpoint.total_limit K: keep the file just written and the K-1 newest
 * (by step) others of this run; delete the rest of this run's. Files of
 * other runs and files without a readable run_id are neither counted nor
 * deleted. Runs only after the new file and `latest` are complete, so a
 * crash here costs at most some deletions. A file that cannot be deleted
 * is a warning: the save itself succeeded. */
static acx_status_t apply_retention(const struct acx_project *p, const char *dir, const char *keep,
                                    int limit, char *removed, size_t n_removed) {
    ckpt_list_t l;
    ACX_CHECK(list_checkpoints(dir, &l));
    int kept = 1, skipped = 0; /* the file just written */
    for (int i = 0; i < l.n; i++) {
        if (strcmp(l.e[i].name, keep) == 0) continue;
        char path[PROJECT_PATH_MAX + 300], id[ACX_RUN_ID_LEN];
        snprintf(path, sizeof path, "%s/%s", dir, l.e[i].name);
        run_id_of_file(path, id);
        if (strcmp(id, p->run_id) != 0) {
            skipped++;
            ACX_DEBUG(ACX_SUBSYS_IO,
                      "checkpoint.total_limit %d: '%s' is not this run's (run_id '%s'): kept, "
                      "not counted",
                      limit, path, id[0] ? id : "none");
            continue;
        }
        if (kept < limit) {
            kept++;
            continue;
        }
        char why[128];
        if (unlink(path) != 0 && errno != ENOENT)
            ACX_WARN(ACX_SUBSYS_IO,
                     "checkpoint.total_limit %d: cannot delete old checkpoint '%s': %s", limit,
                     path, errno_text(errno, why, sizeof why));
        else
            note_removed(removed, n_removed, l.e[i].name);
    }
    (void)skipped;
    free(l.e);
    return ACX_OK;
}

acx_status_t acx_project_saved(acx_accelerator_t *acc, const char *dir, const char *name,
                               int64_t step, char *removed, size_t n) {
    (void)step;
    if (n > 0) removed[0] = '\0';
    ACX_CHECK(write_latest(dir, name));
    int limit = acc->config.values.checkpoint.total_limit;
    if (limit > 0) ACX_CHECK(apply_retention(acc->project, dir, name, limit, removed, n));
    return ACX_OK;
}

/* ---- identity ---- */

const char *acx_project_run_id(const acx_accelerator_t *acc) {
    return acc->project != NULL ? acc->project->run_id : "";
}

void acx_project_adopt(acx_accelerator_t *acc, const char *run_id) {
    struct acx_project *p = acc->project;
    if (p == NULL) return;
    p->loaded = 1;
    /* a value read from a file: 32 lower-case hex digits, else ignored (the
     * file is then not attributable, and this run keeps its own id) */
    if (run_id == NULL || strlen(run_id) != ACX_RUN_ID_LEN - 1) return;
    for (const char *c = run_id; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return;
    snprintf(p->run_id, sizeof p->run_id, "%s", run_id);
}

void acx_project_release(acx_accelerator_t *acc) {
    if (acc != NULL && acc->project != NULL) lock_release(acc->project);
}

void acx_project_free(acx_accelerator_t *acc) {
    if (acc == NULL || acc->project == NULL) return;
    lock_release(acc->project);
    pthread_mutex_destroy(&acc->project->mu);
    pthread_cond_destroy(&acc->project->cv);
    free(acc->project);
    acc->project = NULL;
}
