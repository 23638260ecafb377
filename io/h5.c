/*
 * io/h5.c — the HDF5 glue every io/ file shares: the one recursive lock that
 * serializes all HDF5 calls in the process, silencing HDF5's own error
 * printing, turning HDF5's error stack into acx's last-error message, and
 * the mapping between HDF5 datatypes and acx dtypes.
 *
 * Why a lock: Debian's parallel HDF5 is built without --enable-threadsafe, so
 * two threads inside the library at once corrupt its global state (the error
 * stack, the ID tables, the metadata cache). The data loader's prefetch
 * thread and the main thread (checkpoints, weights, import) therefore take
 * acx_h5_lock around every HDF5 call. The lock is recursive so a function
 * holding it may call another that takes it (acx_error_h5 does).
 *
 * Trust: acx_error_h5 tells damage (checksums, undecodable structures)
 * from other HDF5 failures; acx_h5_quiet turns plugin loading off; and
 * acx_h5_check_dataset / acx_h5_check_attr bound what a file can make acx
 * load, allocate or iterate before anything is read.
 *
 * Output paths: refusing a target that is not a regular file, and the
 * durable replace (fsync the new file, rename, fsync the directory) every
 * writer of io/ uses.
 *
 * What is left to others: opening files, drivers and property lists belong
 * to their callers (dataloader.c, idx.c, weights.c, the checkpoint writer).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acx/types.h"
#include "io/h5.h"
#include "base/error.h"

/* ---- the lock ---- */

static pthread_mutex_t h5_mutex;
static pthread_once_t h5_mutex_once = PTHREAD_ONCE_INIT;

static void h5_mutex_init(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

void acx_h5_lock(void) {
    pthread_once(&h5_mutex_once, h5_mutex_init);
    pthread_mutex_lock(&h5_mutex);
}

void acx_h5_unlock(void) { pthread_mutex_unlock(&h5_mutex); }

/* ---- errors ---- */

void acx_h5_quiet(void) {
    /* Done on every call rather than once: it costs a few instructions, and
     * it survives an H5close()/re-open of the library by the program, which
     * resets the automatic printing and the plugin loading state to their
     * defaults.
     * Plugins: a dataset names its filters by number, and HDF5 by default
     * dlopen()s every library in HDF5_PLUGIN_PATH (or its default
     * directory) to find one it lacks, running their constructors — a
     * checkpoint or data file from elsewhere could make acx run code. acx
     * reads only what HDF5 has built in (deflate, shuffle, Fletcher-32,
     * szip, n-bit, scale-offset); acx_h5_check_dataset names the filter a
     * refused dataset needs. */
    acx_h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    H5PLset_loading_state(0);
    acx_h5_unlock();
}

/* What the walk keeps: the innermost entry, which is the most specific
 * ("unable to open file: name = 'x.h5', errno = 2, error message = 'No such
 * file or directory', ..."); the outer entries only repeat "unable to open
 * file" up the call chain to the API function. */
typedef struct {
    char desc[512];
    char minor[128];
    int found;
    int damage; /* an entry says the file's bytes are bad (h5_entry_is_damage) */
} h5_walk_state_t;

/* Whether one error stack entry says the file is damaged rather than that
 * acx asked for something absent or the system failed: HDF5 1.10 reports a
 * metadata checksum failure as "incorrect metadata checksum after all read
 * attempts" (minor H5E_READERROR, like a failed read(2), hence the text),
 * a bad signature as "... signature ..."; structures that decode to
 * nonsense give H5E_VERSION, H5E_BADVALUE, H5E_CANTDECODE, H5E_OVERFLOW or
 * H5E_BADRANGE from the decoding layers (never from argument checks, whose
 * major is H5E_ARGS). Seen in a sweep of one flipped byte at every 5th
 * metadata byte of a checkpoint (tests/file_trust.test keeps a few). */
static int h5_entry_is_damage(const H5E_error2_t *err) {
    const char *d = err->desc ? err->desc : "";
    if (strstr(d, "checksum") != NULL || strstr(d, "signature") != NULL) return 1;
    if (err->maj_num == H5E_ARGS) return 0;
    return err->min_num == H5E_VERSION || err->min_num == H5E_BADVALUE ||
           err->min_num == H5E_CANTDECODE || err->min_num == H5E_OVERFLOW ||
           err->min_num == H5E_BADRANGE;
}

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *err, void *client) {
    h5_walk_state_t *w = client;
    (void)n;
    /* H5E_WALK_DOWNWARD starts at the API function and ends at the
     * innermost routine, so the last entry seen wins. */
    w->found = 1;
    if (h5_entry_is_damage(err)) w->damage = 1;
    snprintf(w->desc, sizeof w->desc, "%s", err->desc ? err->desc : "");
    w->minor[0] = '\0';
    if (H5Eget_msg(err->min_num, NULL, w->minor, sizeof w->minor) < 0) w->minor[0] = '\0';
    return 0;
}

static _Thread_local int h5_last_damaged;

int acx_h5_last_damaged(void) { return h5_last_damaged; }

/* "ret = H5Dopen2(file, name, H5P_DEFAULT)" → "H5Dopen2": the macro passes
 * the whole expression text; the message wants the HDF5 function's name. */
static void call_name(const char *call, char *out, size_t cap) {
    const char *eq = strstr(call, " = ");
    const char *paren = strchr(call, '(');
    if (eq != NULL && (paren == NULL || eq < paren)) call = eq + 3;
    while (*call == '(' || *call == ' ')
        call++;
    size_t n = strcspn(call, "( ");
    if (n >= cap) n = cap - 1;
    memcpy(out, call, n);
    out[n] = '\0';
}

acx_status_t acx_error_h5(const char *call, const char *what, const char *file, int line) {
    h5_walk_state_t w = {.found = 0, .damage = 0};
    char name[64];
    call_name(call ? call : "HDF5 call", name, sizeof name);

    acx_h5_lock();
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_walk_cb, &w);
    H5Eclear2(H5E_DEFAULT);
    acx_h5_unlock();

    const char *text = "no HDF5 error message";
    char buf[sizeof w.desc + sizeof w.minor + 4];
    if (w.found) {
        if (w.desc[0] != '\0' && w.minor[0] != '\0')
            snprintf(buf, sizeof buf, "%s (%s)", w.desc, w.minor);
        else
            snprintf(buf, sizeof buf, "%s", w.desc[0] != '\0' ? w.desc : w.minor);
        text = buf;
    }
    h5_last_damaged = w.damage;
    if (w.damage)
        return acx_error_set(ACX_ERR_FORMAT, file, line, "%s is damaged: %s (%s)",
                             what && what[0] ? what : "the HDF5 file", text, name);
    return acx_error_set(ACX_ERR_HDF5, file, line, "%s %s failed: %s", name, what ? what : "",
                         text);
}

/* ---- datatypes ---- */

/* IEEE half and bfloat16 in native byte order. HDF5 1.10 has no predefined
 * 16-bit float types, so they are derived once from the native float (as
 * h5py does for numpy.float16) and never closed: acx_h5_native promises a
 * type the caller does not close. Created under the lock. */
static hid_t h5_half = -1, h5_bf16 = -1;

static hid_t make_float16(size_t ebits, size_t mbits, size_t ebias) {
    hid_t t = H5Tcopy(H5T_NATIVE_FLOAT);
    if (t < 0) return -1;
    /* sign at bit 15, exponent just below it, mantissa from bit 0 */
    if (H5Tset_fields(t, 15, mbits, ebits, 0, mbits) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, ebias) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int acx_h5_to_dtype(hid_t type) {
    int dtype = -1;
    acx_h5_lock();
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    if (cls == H5T_INTEGER) {
        H5T_sign_t sign = H5Tget_sign(type);
        if (size == 1)
            dtype = sign == H5T_SGN_NONE ? ACX_DTYPE_UINT8 : ACX_DTYPE_INT8;
        else if (size == 2 && sign == H5T_SGN_NONE)
            dtype = ACX_DTYPE_UINT16;
        else if (size == 4 && sign == H5T_SGN_2)
            dtype = ACX_DTYPE_INT32;
        else if (size == 8 && sign == H5T_SGN_2)
            dtype = ACX_DTYPE_INT64;
    } else if (cls == H5T_FLOAT) {
        if (size == 4) {
            dtype = ACX_DTYPE_FLOAT32;
        } else if (size == 8) {
            dtype = ACX_DTYPE_FLOAT64;
        } else if (size == 2) {
            size_t spos, epos, esize, mpos, msize;
            if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0) {
                if (esize == 5 && msize == 10)
                    dtype = ACX_DTYPE_FLOAT16;
                else if (esize == 8 && msize == 7)
                    dtype = ACX_DTYPE_BFLOAT16;
            }
        }
    }
    H5Eclear2(H5E_DEFAULT);
    acx_h5_unlock();
    return dtype;
}

hid_t acx_h5_native(int dtype) {
    hid_t t = -1;
    switch (dtype) {
    case ACX_DTYPE_FLOAT32: return H5T_NATIVE_FLOAT;
    case ACX_DTYPE_FLOAT64: return H5T_NATIVE_DOUBLE;
    case ACX_DTYPE_INT8: return H5T_NATIVE_SCHAR;
    case ACX_DTYPE_UINT8: return H5T_NATIVE_UCHAR;
    case ACX_DTYPE_UINT16: return H5T_NATIVE_UINT16;
    case ACX_DTYPE_INT32: return H5T_NATIVE_INT32;
    case ACX_DTYPE_INT64: return H5T_NATIVE_INT64;
    case ACX_DTYPE_FLOAT16:
    case ACX_DTYPE_BFLOAT16:
        acx_h5_lock();
        if (dtype == ACX_DTYPE_FLOAT16) {
            if (h5_half < 0) h5_half = make_float16(5, 10, 15);
            t = h5_half;
        } else {
            if (h5_bf16 < 0) h5_bf16 = make_float16(8, 7, 127);
            t = h5_bf16;
        }
        acx_h5_unlock();
        return t;
    default: return -1;
    }
}

/* ---- attributes ---- */

herr_t acx_h5_write_attr_str(hid_t obj, const char *name, const char *value) {
    herr_t ret = -1;
    acx_h5_lock();
    hid_t type = H5Tcopy(H5T_C_S1);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = -1;
    if (type < 0 || space < 0) goto out;
    /* fixed-length, NUL-terminated, ASCII: what h5dump and h5py show as a
     * plain string */
    if (H5Tset_size(type, strlen(value) + 1) < 0 || H5Tset_strpad(type, H5T_STR_NULLTERM) < 0)
        goto out;
    attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0) goto out;
    ret = H5Awrite(attr, type, value);
out:;
    /* Closing calls clear the error stack on entry: keep the failure's
     * stack for the caller's acx_error_h5. */
    hid_t estack = ret < 0 ? H5Eget_current_stack() : -1;
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (estack >= 0) H5Eset_current_stack(estack);
    acx_h5_unlock();
    return ret;
}

herr_t acx_h5_write_attr_i64(hid_t obj, const char *name, int64_t value) {
    herr_t ret = -1;
    acx_h5_lock();
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = -1;
    if (space < 0) goto out;
    attr = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0) goto out;
    ret = H5Awrite(attr, H5T_NATIVE_INT64, &value);
out:;
    hid_t estack = ret < 0 ? H5Eget_current_stack() : -1;
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    if (estack >= 0) H5Eset_current_stack(estack);
    acx_h5_unlock();
    return ret;
}

/* ---- what a file may make acx read ---- */

/* The largest compression ratio a filter can reach: deflate's is bounded
 * by 1032:1 (RFC 1951: a 258-byte match costs at least 2 bits); szip's is
 * lower. 1100 leaves room for the chunk index. */
#define H5_MAX_COMPRESSION 1100

static const char *layout_name(H5D_layout_t l) {
    switch (l) {
    case H5D_COMPACT: return "compact";
    case H5D_CONTIGUOUS: return "contiguous";
    case H5D_CHUNKED: return "chunked";
    case H5D_VIRTUAL: return "virtual";
    default: return "unknown";
    }
}

acx_status_t acx_h5_check_dataset(hid_t dset, const char *what, int need_written,
                                  acx_h5_storage_t *st_p) {
    acx_status_t status = ACX_OK;
    hid_t dcpl = -1, type = -1, space = -1, file = -1;
    acx_h5_storage_t st = {0};
    acx_h5_lock();
    ACX_H5_CHECK_GOTO(dcpl = H5Dget_create_plist(dset), what, status, out);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    st.layout = (int)layout;
    if (layout == H5D_VIRTUAL || layout < 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "%s has a %s layout: acx reads only data stored in the file itself "
                           "(contiguous, chunked or compact)",
                           what, layout < 0 ? "unreadable" : layout_name(layout));
        goto out;
    }
    int next = H5Pget_external_count(dcpl);
    if (next != 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "%s stores its data in %d external file(s): acx reads only data "
                           "stored in the file itself",
                           what, next);
        goto out;
    }
    int nf = H5Pget_nfilters(dcpl), compressed = 0;
    for (int k = 0; k < nf; k++) {
        unsigned flags = 0;
        size_t nelem = 0;
        char fname[64] = "";
        H5Z_filter_t id =
            H5Pget_filter2(dcpl, (unsigned)k, &flags, &nelem, NULL, sizeof fname, fname, NULL);
        if (id < 0) {
            status = acx_error_h5("H5Pget_filter2", what, __FILE__, __LINE__);
            goto out;
        }
        /* with plugin loading off (acx_h5_quiet) this says whether HDF5
         * has the filter built in, and loads nothing */
        htri_t avail = H5Zfilter_avail(id);
        H5Eclear2(H5E_DEFAULT);
        if (avail <= 0) {
            status = ACX_ERROR(ACX_ERR_NOT_SUPPORTED,
                               "%s needs HDF5 filter %d%s%s%s (a plugin); acx never loads HDF5 "
                               "plugins, so it cannot read it",
                               what, (int)id, fname[0] ? " ('" : "", fname, fname[0] ? "')" : "");
            goto out;
        }
        if (id != H5Z_FILTER_FLETCHER32 && id != H5Z_FILTER_SHUFFLE) compressed = 1;
    }
    ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, out);
    ACX_H5_CHECK_GOTO(space = H5Dget_space(dset), what, status, out);
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    size_t tsize = H5Tget_size(type);
    if (npts < 0 || tsize == 0) {
        status = acx_error_h5("H5Sget_simple_extent_npoints", what, __FILE__, __LINE__);
        goto out;
    }
    if (npts > 0 && (uint64_t)npts > UINT64_MAX / tsize) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "%s is damaged: %lld elements of %zu bytes overflow",
                           what, (long long)npts, tsize);
        goto out;
    }
    st.bytes = (uint64_t)npts * tsize;
    st.stored = H5Dget_storage_size(dset);
    H5Eclear2(H5E_DEFAULT);
    st.written = st.stored > 0 || st.bytes == 0;
    hsize_t fsize = 0;
    ACX_H5_CHECK_GOTO(file = H5Iget_file_id(dset), what, status, out);
    ACX_H5_CHECK_GOTO(H5Fget_filesize(file, &fsize), what, status, out);
    if (!st.written) {
        if (need_written)
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "%s is damaged: it was never written (no storage in the file for "
                               "its %llu bytes)",
                               what, (unsigned long long)st.bytes);
        goto out; /* a data file's unwritten dataset reads as fill values */
    }
    int exact = layout == H5D_CONTIGUOUS || layout == H5D_COMPACT;
    /* a data file may have chunks it never wrote (fill values): only a
     * checkpoint's datasets must be stored whole */
    if (st.stored > fsize ||
        (need_written &&
         ((exact && st.stored != st.bytes) || (!exact && !compressed && st.stored < st.bytes) ||
          (!exact && compressed && st.bytes / H5_MAX_COMPRESSION > st.stored)))) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "%s is damaged: its shape needs %llu bytes, the file stores %llu for "
                           "it (%s%s) in a file of %llu bytes",
                           what, (unsigned long long)st.bytes, (unsigned long long)st.stored,
                           layout_name(layout), compressed ? ", compressed" : "",
                           (unsigned long long)fsize);
        goto out;
    }
out:
    if (file >= 0) H5Fclose(file);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (dcpl >= 0) H5Pclose(dcpl);
    acx_h5_unlock();
    if (status == ACX_OK && st_p != NULL) *st_p = st;
    return status;
}

acx_status_t acx_h5_check_attr(hid_t attr, const char *what) {
    acx_status_t status = ACX_OK;
    hid_t type = -1, space = -1, file = -1;
    hsize_t fsize = 0;
    acx_h5_lock();
    ACX_H5_CHECK_GOTO(type = H5Aget_type(attr), what, status, out);
    ACX_H5_CHECK_GOTO(space = H5Aget_space(attr), what, status, out);
    ACX_H5_CHECK_GOTO(file = H5Iget_file_id(attr), what, status, out);
    ACX_H5_CHECK_GOTO(H5Fget_filesize(file, &fsize), what, status, out);
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    size_t tsize = H5Tget_size(type);
    if (npts < 0 || tsize == 0 || (uint64_t)npts > fsize / tsize)
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "%s is damaged: %lld elements of %zu bytes do not fit in the file's "
                           "%llu bytes",
                           what, (long long)npts, tsize, (unsigned long long)fsize);
out:
    if (file >= 0) H5Fclose(file);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    acx_h5_unlock();
    return status;
}

/* ---- output paths ---- */

acx_status_t acx_io_check_target(const char *path) {
    struct stat st;
    if (path == NULL) return ACX_ERROR(ACX_ERR_INVALID_ARG, "output path is NULL");
    if (stat(path, &st) != 0) return ACX_OK; /* absent (or unreachable: the create will say) */
    if (S_ISREG(st.st_mode)) return ACX_OK;
    const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return ACX_ERROR(ACX_ERR_IO,
                     "refusing to write '%s': it is %s, and acx writes a new file and renames it "
                     "into place (give a regular file path)",
                     path, kind);
}

acx_status_t acx_io_fsync_path(const char *path, int directory) {
    int fd = open(path, O_RDONLY | (directory ? O_DIRECTORY : 0));
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open '%s' to fsync it: %s", path, strerror(errno));
    if (fsync(fd) != 0 && !(directory && (errno == EINVAL || errno == EROFS))) {
        int e = errno;
        close(fd);
        errno = e; /* for callers that name a full disk (ENOSPC, EDQUOT) */
        return ACX_ERROR(ACX_ERR_IO, "fsync('%s') failed: %s", path, strerror(e));
    }
    close(fd);
    return ACX_OK;
}

acx_status_t acx_io_fsync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return acx_io_fsync_path(".", 1);
    size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/name": the root */
    char *dir = malloc(n + 1);
    if (dir == NULL)
        return ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory for the directory of '%s'", path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    acx_status_t status = acx_io_fsync_path(dir, 1);
    free(dir);
    return status;
}

acx_status_t acx_io_commit(const char *tmp, const char *path) {
    ACX_CHECK(acx_io_fsync_path(tmp, 0));
    if (rename(tmp, path) != 0)
        return ACX_ERROR(ACX_ERR_IO, "rename('%s', '%s') failed: %s", tmp, path, strerror(errno));
    return acx_io_fsync_dir_of(path);
}

acx_status_t acx_h5_create_import(const char *path, const char *source, hid_t *file_p) {
    acx_status_t status = ACX_OK;
    char what[512];
    hid_t fapl = -1, file = -1;
    snprintf(what, sizeof what, "'%s'", path);
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), what, status, done);
    ACX_H5_CHECK_GOTO(H5Pset_fapl_sec2(fapl), what, status, done);
    ACX_H5_CHECK_GOTO(file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(file, "source", source), "attribute /source", status,
                      done);
    *file_p = file;
    file = -1;
done:
    if (file >= 0) H5Fclose(file);
    if (fapl >= 0) H5Pclose(fapl);
    return status;
}
