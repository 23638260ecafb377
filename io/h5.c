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
 * What is left to others: opening files, drivers and property lists belong
 * to their callers (dataloader.c, idx.c, weights.c, the checkpoint writer).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "acx/types.h"
#include "io/h5.h"
#include "runtime/base/error.h"

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
     * resets the automatic printing to its default. */
    acx_h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
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
} h5_walk_state_t;

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *err, void *client) {
    h5_walk_state_t *w = client;
    (void)n;
    /* H5E_WALK_DOWNWARD starts at the API function and ends at the
     * innermost routine, so the last entry seen wins. */
    w->found = 1;
    snprintf(w->desc, sizeof w->desc, "%s", err->desc ? err->desc : "");
    w->minor[0] = '\0';
    if (H5Eget_msg(err->min_num, NULL, w->minor, sizeof w->minor) < 0) w->minor[0] = '\0';
    return 0;
}

/* "ret = H5Dopen2(file, name, H5P_DEFAULT)" → "H5Dopen2": the macro passes
 * the whole expression text; the message wants the HDF5 function's name. */
static void call_name(const char *call, char *out, size_t cap) {
    const char *eq = strstr(call, " = ");
    const char *paren = strchr(call, '(');
    if (eq != NULL && (paren == NULL || eq < paren)) call = eq + 3;
    while (*call == '(' || *call == ' ') call++;
    size_t n = strcspn(call, "( ");
    if (n >= cap) n = cap - 1;
    memcpy(out, call, n);
    out[n] = '\0';
}

acx_status_t acx_error_h5(const char *call, const char *what, const char *file, int line) {
    h5_walk_state_t w = {.found = 0};
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
    return acx_error_set(ACX_ERR_HDF5, file, line, "%s %s failed: %s", name,
                         what ? what : "", text);
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
                if (esize == 5 && msize == 10) dtype = ACX_DTYPE_FLOAT16;
                else if (esize == 8 && msize == 7) dtype = ACX_DTYPE_BFLOAT16;
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
