/*
 * io/ckpt_read.c — the reader of the checkpoint file (io/checkpoint.h
 * acx_ckpt_open/read/...): opening and the format check, attribute,
 * shape and listing queries, the rows of tensors read and verified, rows
 * shared among replicas, and damage kept on the open file. The writer is
 * io/ckpt_write.c; the one-process tools (info, verify, export) are
 * io/ckpt_tools.c on top of this reader. Format description:
 * docs/checkpoint-format.md.
 *
 * Checksums (format version 2: io/ckpt_crc.h, written by io/ckpt_write.c).
 *   Load: each rank checks what it read by itself, widening its rows to the
 * blocks they touch (read_tensor): no exchange, any N -> M, and a mismatch
 * is ACX_ERR_FORMAT "checksum mismatch (corrupted file?)" naming the
 * dataset and the byte range, agreed on every rank at the end of
 * acx_ckpt_read. Version-1 files are still read: HDF5 checks their
 * Fletcher-32 chunks, and read_error names a failure the same way.
 *   Metadata is checksummed by HDF5: the format is pinned to HDF5
 * 1.8+/1.10 structures (libver bounds V18..V110), whose object headers,
 * B-trees and heaps carry checksums, so a flipped byte in an attribute (the
 * CRCs included), group or dataset header fails instead of reading garbage
 * (a truncated file fails at open: HDF5 checks the stored end of file).
 * Such a failure is damage, kept on the open file (note_damage): HDF5
 * 1.10.8 caches a header whose continuation chunk failed without that
 * chunk, so no question is asked again and no failure reads as "absent".
 * Datasets are checked (io/h5.h acx_h5_check_dataset) before they are
 * read or sized: no plugin filters, no virtual or external storage, and
 * storage that holds the whole shape; data without any checksum is read
 * only with acx_ckpt_allow_unverified.
 *
 * Reading: the MPI-IO driver on world, independent metadata reads (so the
 * attribute, shape and listing queries may be made by any subset of
 * ranks), and independent raw-data reads: every rank reads its rows (and
 * their blocks' edges) itself, so no rank can be left waiting in a
 * collective read for one that stopped at a checksum failure, and the
 * number of reads may differ between ranks; ranks agree after checking
 * the tensors' descriptions and once all tensors are read. Rows several
 * ranks hold (a tensor's `share` group: NO_SHARD's replicas) are read once
 * in all — each member reads and verifies its slice — and then
 * all-gathered in the group (share_rows), only after every rank's checks
 * passed: a replicated load costs each rank 1/N of the file's reads and
 * checksums instead of all of them.
 * acx_ckpt_open and acx_ckpt_close are collective (MPI_File_open /
 * MPI_File_close). With world == NULL the file is opened by this process
 * alone (sec2 driver, no MPI calls), for single-process tools.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/ckpt_crc.h"
#include "io/ckpt_pkg.h"
#include "io/h5.h"
#include "base/error.h"
#include "base/log.h"

/* ---- small helpers ---- */

static void format_shape(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t used = 0;
    out[0] = '\0';
    used += (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < ndim && used < cap; k++)
        used +=
            (size_t)snprintf(out + used, cap - used, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

/* The last error's text without its "file:line: " prefix, for wrapping
 * it into a more specific message. */
static void last_error_text(char *out, size_t cap) {
    const char *msg = acx_last_error(), *sep = strstr(msg, ": ");
    snprintf(out, cap, "%s", sep != NULL ? sep + 2 : msg);
}

/* ---- damage ---- */

/* If the error just recorded says the file is damaged (acx_error_h5's and
 * acx_h5_check_dataset's "... is damaged: ..."), keep it on f: every later
 * call on f returns it (see acx_ckpt_file's `damaged`). `path` names the
 * object being read; in a single process, the address of its object
 * header is added when its link (in the parent group, already read) gives
 * one. */
acx_status_t acx_ckpt_note_damage(acx_ckpt_file_t *f, acx_status_t status, const char *path) {
    if (status != ACX_ERR_FORMAT || f->damaged != ACX_OK) return status;
    if (strstr(acx_last_error(), " is damaged") == NULL) return status;
    char text[ACX_ERRMSG_MAX], at[1200] = "";
    last_error_text(text, sizeof text);
    /* One process only: under MPI-IO a lookup may be a collective metadata
     * read (an H5C_protect broadcast), and damage in data is found by the
     * ranks that read it, not by all (a hang, measured with a Fletcher-32
     * failure in one rank's rows). */
    if (path != NULL && path[0] == '/' && path[1] != '\0' &&
        (f->world == NULL || f->world->size == 1)) {
        H5L_info_t li;
        acx_h5_lock();
        if (acx_ckpt_path_exists(f->file, path) == 1 &&
            H5Lget_info(f->file, path, &li, H5P_DEFAULT) >= 0 && li.type == H5L_TYPE_HARD)
            snprintf(at, sizeof at, " [object header of '%s' at byte %llu]", path,
                     (unsigned long long)li.u.address);
        H5Eclear2(H5E_DEFAULT);
        acx_h5_unlock();
    }
    snprintf(f->damage, sizeof f->damage, "%s%s", text, at);
    f->damaged = status;
    return ACX_ERROR(status, "%s", f->damage);
}

/* The damage found earlier, recorded again as the last error. */
acx_status_t acx_ckpt_damage_replay(acx_ckpt_file_t *f) {
    return ACX_ERROR(f->damaged, "%s", f->damage);
}

/* ---- opening ---- */

/* Rank 0 (or the lone process): does the file exist, and is it HDF5? */
static acx_status_t probe_open(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is a directory, not a file", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ACX_ERROR(ACX_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    close(fd);
    acx_h5_lock();
    htri_t is = H5Fis_hdf5(path);
    H5Eclear2(H5E_DEFAULT);
    acx_h5_unlock();
    if (is <= 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is not an HDF5 file (so not an acx checkpoint)",
                         path);
    return ACX_OK;
}

/* Read a scalar attribute into a native type after checking its class.
 * Returns ACX_ERR_FORMAT naming attribute, object and file. Lock held. */
static acx_status_t read_attr_num(acx_ckpt_file_t *f, const char *object, const char *name,
                                  H5T_class_t want, hid_t mem_type, void *out) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t obj = -1, attr = -1, type = -1, space = -1;
    snprintf(what, sizeof what, "attribute '%s' on '%s' in '%s'", name, object, f->path);
    int e = acx_ckpt_path_exists(f->file, object);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "checkpoint '%s' has no object '%s' (looking for its "
                           "attribute '%s')",
                           f->path, object, name);
        goto out;
    }
    ACX_H5_CHECK_GOTO(obj = H5Oopen(f->file, object, H5P_DEFAULT), what, status, out);
    htri_t has;
    ACX_H5_CHECK_GOTO(has = H5Aexists(obj, name), what, status, out);
    if (has == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no attribute '%s' on '%s'", f->path,
                           name, object);
        goto out;
    }
    ACX_H5_CHECK_GOTO(attr = H5Aopen(obj, name, H5P_DEFAULT), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Aget_type(attr), what, status, out);
    ACX_H5_CHECK_GOTO(space = H5Aget_space(attr), what, status, out);
    if (H5Tget_class(type) != want || H5Sget_simple_extent_npoints(space) != 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "attribute '%s' on '%s' in '%s' is not a%s scalar", name,
                           object, f->path,
                           want == H5T_INTEGER ? "n integer"
                           : want == H5T_FLOAT ? " floating-point"
                                               : " string");
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Aread(attr, mem_type, out), what, status, out);
out:
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    if (obj >= 0) H5Oclose(obj);
    return status;
}

acx_status_t acx_ckpt_format_name(acx_ckpt_file_t *f, char *buf, size_t n, int *has_p) {
    *has_p = 0;
    acx_h5_lock();
    htri_t has = H5Aexists(f->file, ACX_CKPT_ATTR_FORMAT);
    acx_status_t status = has < 0 ? acx_error_h5("H5Aexists", f->path, __FILE__, __LINE__) : ACX_OK;
    acx_h5_unlock();
    if (status != ACX_OK || has == 0) return status;
    *has_p = 1;
    return acx_ckpt_get_str(f, "/", ACX_CKPT_ATTR_FORMAT, buf, n);
}

/* The format checks every open makes. Lock held. */
static acx_status_t check_format(acx_ckpt_file_t *f) {
    char fmt[64];
    int64_t version;
    int has;
    acx_status_t status = acx_ckpt_format_name(f, fmt, sizeof fmt, &has);
    if (status == ACX_OK && !has)
        return ACX_ERROR(ACX_ERR_FORMAT, "'%s' is not an acx checkpoint (no 'format' attribute)",
                         f->path);
    /* a weights file, where the caller takes one: no version, no checksums
     * (its layout has none, io/ckpt_format.h) */
    if (status == ACX_OK && (f->flags & ACX_CKPT_OPEN_WEIGHTS) &&
        strcmp(fmt, ACX_WEIGHTS_FORMAT) == 0) {
        f->version = 0;
        return ACX_OK;
    }
    if (status == ACX_ERR_INVALID_ARG || (status == ACX_OK && strcmp(fmt, ACX_CKPT_FORMAT) != 0))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "'%s' is not an acx checkpoint (format '%.40s%s', "
                         "expected '%s')",
                         f->path, status == ACX_OK ? fmt : "", status == ACX_OK ? "" : "...",
                         ACX_CKPT_FORMAT);
    if (status != ACX_OK) return status;
    ACX_CHECK(acx_ckpt_get_i64(f, "/", ACX_CKPT_ATTR_FORMAT_VERSION, &version));
    if (version > ACX_CKPT_FORMAT_VERSION && !(f->flags & ACX_CKPT_OPEN_INSPECT))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "checkpoint '%s': format version %lld is newer than this acx supports "
                         "(%d); use a newer acx to load it",
                         f->path, (long long)version, ACX_CKPT_FORMAT_VERSION);
    if (version < 1)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s': invalid format version %lld", f->path,
                         (long long)version);
    f->version = version;
    return ACX_OK;
}

/* H5Fopen failed: say why in acx's terms (the HDF5 text is kept). */
static acx_status_t open_error(const char *path) {
    acx_status_t status = acx_error_h5("H5Fopen", path, __FILE__, __LINE__);
    char copy[ACX_ERRMSG_MAX];
    last_error_text(copy, sizeof copy);
    if (strstr(copy, "truncated") != NULL)
        return ACX_ERROR(ACX_ERR_IO, "checkpoint '%s' is truncated (an interrupted copy?): %s",
                         path, copy);
    if (acx_h5_last_damaged()) return status; /* "'path' is damaged: ..." already */
    if (strstr(copy, "signature") != NULL || strstr(copy, "checksum") != NULL)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' is damaged: %s", path, copy);
    return status;
}

acx_status_t acx_ckpt_open(acx_comm_t *world, const char *path, acx_ckpt_file_t **file_p) {
    return acx_ckpt_open_flags(world, path, 0, file_p);
}

acx_status_t acx_ckpt_open_flags(acx_comm_t *world, const char *path, unsigned flags,
                                 acx_ckpt_file_t **file_p) {
    if (path == NULL || path[0] == '\0' || file_p == NULL ||
        (flags & ~(unsigned)(ACX_CKPT_OPEN_INSPECT | ACX_CKPT_OPEN_WEIGHTS)) != 0 ||
        ((flags & ACX_CKPT_OPEN_INSPECT) && world != NULL))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_ckpt_open: path and file_p must be given (and INSPECT only "
                         "without a world)");
    acx_status_t status = ACX_OK;
    hid_t fapl = -1;
    acx_ckpt_file_t *f = acx_calloc(1, sizeof *f, "checkpoint file");
    if (f == NULL)
        status = ACX_ERR_NO_MEMORY;
    else {
        f->world = world;
        f->flags = flags;
        f->file = -1;
        f->path = acx_ckpt_str_concat(path, "");
        if (f->path == NULL) status = ACX_ERR_NO_MEMORY;
    }
    if (status == ACX_OK && (world == NULL || world->rank == 0)) status = probe_open(path);
    status = agree(world, status);
    if (status != ACX_OK) goto err_free;

    acx_h5_lock();
    acx_h5_quiet();
    ACX_H5_CHECK_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), path, status, agreed_open);
    if (world != NULL)
        ACX_H5_CHECK_GOTO(H5Pset_fapl_mpio(fapl, world->mpi, MPI_INFO_NULL), path, status,
                          agreed_open);
    /* collective over world (MPI_File_open) */
    f->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f->file < 0) status = open_error(path);
agreed_open:
    if (fapl >= 0) H5Pclose(fapl);
    status = agree(world, status);
    if (status != ACX_OK) goto err_unlock;
    /* inspection reads every byte of metadata before anything is
     * interpreted (io/ckpt_scan.c) */
    if (flags & ACX_CKPT_OPEN_INSPECT) status = acx_ckpt_walk_metadata(f->file, f->path);
    if (status != ACX_OK) goto err_unlock;
    status = agree(world, check_format(f));
    if (status != ACX_OK) goto err_unlock;
    acx_h5_unlock();
    *file_p = f;
    return ACX_OK;

err_unlock:
    if (f->file >= 0) H5Fclose(f->file); /* collective: every rank reaches it */
    acx_h5_unlock();
err_free:
    if (f != NULL) free(f->path);
    free(f);
    return status;
}

void acx_ckpt_close(acx_ckpt_file_t *f) {
    if (f == NULL) return;
    acx_h5_lock();
    if (f->file >= 0) H5Fclose(f->file); /* collective when opened on a world */
    acx_h5_unlock();
    free(f->path);
    free(f);
}

/* ---- attributes and queries ---- */

acx_status_t acx_ckpt_get_i64(acx_ckpt_file_t *f, const char *object, const char *name,
                              int64_t *v_p) {
    if (f == NULL || object == NULL || name == NULL || v_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_i64: NULL argument");
    int64_t v;
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = read_attr_num(f, object, name, H5T_INTEGER, H5T_NATIVE_INT64, &v);
    acx_h5_unlock();
    status = acx_ckpt_note_damage(f, status, object);
    if (status == ACX_OK) *v_p = v;
    return status;
}

acx_status_t acx_ckpt_get_f64(acx_ckpt_file_t *f, const char *object, const char *name,
                              double *v_p) {
    if (f == NULL || object == NULL || name == NULL || v_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_f64: NULL argument");
    double v;
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = read_attr_num(f, object, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, &v);
    acx_h5_unlock();
    status = acx_ckpt_note_damage(f, status, object);
    if (status == ACX_OK) *v_p = v;
    return status;
}

/* Whether HDF5 checks the dataset's chunks itself (the Fletcher-32
 * filter of format version 1). Lock held. */
static int has_fletcher32(hid_t dset) {
    hid_t dcpl = H5Dget_create_plist(dset);
    unsigned flags = 0;
    size_t nelem = 0;
    herr_t ret = dcpl >= 0 ? H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL,
                                                  0, NULL, NULL)
                           : -1;
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return ret >= 0;
}

/* The checksums of an open dataset of `bytes` bytes: *present_p 1 with
 * the CRC-32 attributes (version 2; read in any version that has them),
 * 0 when HDF5 checks the data itself (Fletcher-32 chunks, version 1).
 * Data with neither cannot be verified (the attributes deleted, or a file
 * not written by acx): refused unless the user allowed unverified files
 * (acx_ckpt_allow_unverified: checkpoint.allow_unverified), and then
 * loudly. Lock held. */
acx_status_t acx_ckpt_dataset_crc(acx_ckpt_file_t *f, hid_t dset, uint64_t bytes, const char *what,
                                  int *present_p, acx_ckpt_crc_t *crc) {
    *present_p = 0;
    ACX_CHECK(acx_ckpt_crc_read_attrs(dset, bytes, what, present_p, crc));
    if (*present_p || bytes == 0 || has_fletcher32(dset)) return ACX_OK;
    /* a weights file (ACX_CKPT_OPEN_WEIGHTS) has no checksums by its
     * layout: nothing was removed, so nothing to refuse or warn about */
    if (f->version == 0 && (f->flags & ACX_CKPT_OPEN_WEIGHTS)) return ACX_OK;
    if (!f->allow_unverified && (f->flags & ACX_CKPT_OPEN_INSPECT))
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "%s has no checksum (no CRC-32 attributes '%s', no Fletcher-32 "
                         "filter; format version %lld): its data cannot be verified (damaged, "
                         "edited, or not written by acx?); acx ckpt verify --allow-unverified "
                         "reads it anyway",
                         what, ACX_CKPT_CRC_BLOCKS_ATTR, (long long)f->version);
    if (!f->allow_unverified)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "%s has no checksum (no CRC-32 attributes '%s', no Fletcher-32 "
                         "filter; format version %lld): its data cannot be verified, so acx "
                         "refuses to load it (damaged, edited, or not written by acx?). To load "
                         "it anyway, unverified, set checkpoint.allow_unverified: true",
                         what, ACX_CKPT_CRC_BLOCKS_ATTR, (long long)f->version);
    if (f->flags & ACX_CKPT_OPEN_INSPECT)
        /* a tool's user asked for it on the command line: said on stderr
         * whatever the log level */
        fprintf(stderr,
                "acx: WARNING: UNVERIFIED: %s has no checksum (no CRC-32 attributes, no "
                "Fletcher-32 filter): read, but damage in it cannot be detected\n",
                what);
    else if (f->world == NULL || f->world->rank == 0)
        ACX_WARN(ACX_SUBSYS_IO,
                 "LOADING UNVERIFIED DATA: %s has no checksum (no CRC-32 attributes, no "
                 "Fletcher-32 filter); checkpoint.allow_unverified is true, so it is loaded "
                 "as it is: damage in it goes undetected",
                 what);
    f->warned_unverified = 1;
    return ACX_OK;
}

/* Read a string (fixed or variable length) from an attribute or a dataset
 * of one element into buf[n]. Lock held. */
static acx_status_t read_string(acx_ckpt_file_t *f, hid_t obj, int is_attr, const char *what,
                                char *buf, size_t n) {
    acx_status_t status = ACX_OK;
    hid_t type = -1, space = -1, mtype = -1;
    char *tmp = NULL;
    size_t len = 0;

    ACX_H5_CHECK_GOTO(type = is_attr ? H5Aget_type(obj) : H5Dget_type(obj), what, status, out);
    ACX_H5_CHECK_GOTO(space = is_attr ? H5Aget_space(obj) : H5Dget_space(obj), what, status, out);
    if (H5Tget_class(type) != H5T_STRING || H5Sget_simple_extent_npoints(space) != 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "%s is not a single string", what);
        goto out;
    }
    /* before allocating its size: the string is in the file, whole */
    ACX_CHECK_GOTO(is_attr ? acx_h5_check_attr(obj, what)
                           : acx_h5_check_dataset(obj, what, 1, NULL),
                   status, out);
    ACX_H5_CHECK_GOTO(mtype = H5Tcopy(type), what, status, out);
    if (H5Tis_variable_str(type) > 0) {
        char *vs = NULL;
        ACX_H5_CHECK_GOTO(is_attr ? H5Aread(obj, mtype, &vs)
                                  : H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &vs),
                          what, status, out);
        len = vs != NULL ? strlen(vs) : 0;
        if (len < n) memcpy(buf, vs ? vs : "", len + 1);
        H5free_memory(vs);
    } else {
        size_t size = H5Tget_size(type);
        tmp = acx_malloc(size + 1, "checkpoint string");
        if (tmp == NULL) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
        ACX_H5_CHECK_GOTO(is_attr ? H5Aread(obj, mtype, tmp)
                                  : H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp),
                          what, status, out);
        tmp[size] = '\0';
        if (!is_attr) {
            /* a long string's dataset: its raw bytes are `size` bytes */
            acx_ckpt_crc_t crc;
            acx_ckpt_crc_check_t k;
            int has_crc = 0;
            ACX_CHECK_GOTO(acx_ckpt_dataset_crc(f, obj, size, what, &has_crc, &crc), status, out);
            if (has_crc) {
                acx_ckpt_crc_check_init(&k, &crc, what, 0);
                status = acx_ckpt_crc_check_feed(&k, tmp, size);
                acx_ckpt_crc_free(&crc);
                if (status != ACX_OK) goto out;
            }
        }
        len = strlen(tmp);
        if (len < n) memcpy(buf, tmp, len + 1);
    }
    if (len >= n)
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "%s holds %zu bytes; the buffer has room for %zu",
                           what, len + 1, n);
out:
    free(tmp);
    if (mtype >= 0) H5Tclose(mtype);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return status;
}

/* A dataset read failed: a checksum failure is a corrupted file
 * (ACX_ERR_FORMAT naming the dataset), anything else an HDF5 error. */
static acx_status_t read_error(const char *call, const char *dset, const char *path, int line) {
    char what[1280], copy[ACX_ERRMSG_MAX];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", dset, path);
    acx_status_t status = acx_error_h5(call, what, __FILE__, line);
    last_error_text(copy, sizeof copy);
    if (strstr(copy, "Fletcher32") != NULL || strstr(copy, "checksum") != NULL)
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "dataset '%s' in '%s': checksum mismatch (corrupted file?): %s", dset,
                         path, copy);
    return status;
}

acx_status_t acx_ckpt_get_str(acx_ckpt_file_t *f, const char *object, const char *name, char *buf,
                              size_t n) {
    if (f == NULL || object == NULL || name == NULL || buf == NULL || n == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_get_str: NULL argument or empty buffer");
    acx_status_t status = ACX_OK;
    char what[1280], dpath[1024];
    hid_t obj = -1, attr = -1, dset = -1;
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);

    acx_h5_lock();
    acx_h5_quiet();
    snprintf(what, sizeof what, "attribute '%s' on '%s' in '%s'", name, object, f->path);
    /* a long string lives in dataset "<object>/<name>" */
    snprintf(dpath, sizeof dpath, "%s%s%s", object,
             object[0] != '\0' && object[strlen(object) - 1] == '/' ? "" : "/", name);
    int e = acx_ckpt_path_exists(f->file, object);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e > 0) {
        ACX_H5_CHECK_GOTO(obj = H5Oopen(f->file, object, H5P_DEFAULT), what, status, out);
        htri_t has;
        ACX_H5_CHECK_GOTO(has = H5Aexists(obj, name), what, status, out);
        if (has > 0) {
            ACX_H5_CHECK_GOTO(attr = H5Aopen(obj, name, H5P_DEFAULT), what, status, out);
            status = read_string(f, attr, 1, what, buf, n);
            goto out;
        }
    }
    e = acx_ckpt_path_exists(f->file, dpath);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no attribute '%s' on '%s'", f->path,
                           name, object);
        goto out;
    }
    snprintf(what, sizeof what, "string dataset '%s' in '%s'", dpath, f->path);
    dset = H5Dopen2(f->file, dpath, H5P_DEFAULT);
    if (dset < 0) {
        status = read_error("H5Dopen2", dpath, f->path, __LINE__);
        goto out;
    }
    status = read_string(f, dset, 0, what, buf, n);
    if (status == ACX_ERR_HDF5) status = read_error("H5Dread", dpath, f->path, __LINE__);
out:
    if (dset >= 0) H5Dclose(dset);
    if (attr >= 0) H5Aclose(attr);
    if (obj >= 0) H5Oclose(obj);
    acx_h5_unlock();
    return acx_ckpt_note_damage(f, status, dset >= 0 ? dpath : object);
}

int acx_ckpt_exists(acx_ckpt_file_t *f, const char *path) {
    if (f == NULL || path == NULL || f->damaged != ACX_OK) return 0;
    acx_h5_lock();
    acx_h5_quiet();
    int e = acx_ckpt_path_exists(f->file, path);
    if (e < 0) {
        char what[1280];
        snprintf(what, sizeof what, "group of '%s' in '%s'", path, f->path);
        (void)acx_ckpt_note_damage(f, acx_error_h5("H5Lexists", what, __FILE__, __LINE__), NULL);
        e = 0;
    }
    acx_h5_unlock();
    return e;
}

int64_t acx_ckpt_version(const acx_ckpt_file_t *f) { return f != NULL ? f->version : 0; }

const char *acx_ckpt_path(const acx_ckpt_file_t *f) { return f != NULL ? f->path : ""; }

acx_status_t acx_ckpt_damage(const acx_ckpt_file_t *f) {
    if (f == NULL || f->damaged == ACX_OK) return ACX_OK;
    return ACX_ERROR(f->damaged, "%s", f->damage);
}

void acx_ckpt_allow_unverified(acx_ckpt_file_t *f, int allow) {
    if (f != NULL) f->allow_unverified = allow != 0;
}

/* Open dataset `path`, or ACX_ERR_FORMAT naming it when absent, and check
 * what a file could make acx do with it (acx_h5_check_dataset: no plugin,
 * no virtual or external storage, its storage holds its whole shape and
 * lies inside the file) before anything is read or allocated for it.
 * Lock held. */
static acx_status_t open_dataset(acx_ckpt_file_t *f, const char *path, hid_t *dset_p) {
    char what[1280];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    int e = acx_ckpt_path_exists(f->file, path);
    if (e < 0) return acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
    if (e == 0)
        return ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no dataset '%s'", f->path, path);
    hid_t d = H5Dopen2(f->file, path, H5P_DEFAULT);
    if (d < 0) return read_error("H5Dopen2", path, f->path, __LINE__);
    acx_status_t status = acx_h5_check_dataset(d, what, 1, NULL);
    if (status != ACX_OK) {
        H5Dclose(d);
        return status;
    }
    *dset_p = d;
    return ACX_OK;
}

/* Shape and dtype of an open dataset. Lock held. */
static acx_status_t dataset_shape(acx_ckpt_file_t *f, const char *path, hid_t dset, int *ndim_p,
                                  int64_t *shape, acx_dtype_t *dtype_p) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t space = -1, type = -1;
    hsize_t dims[ACX_MAX_DIMS];
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    ACX_H5_CHECK_GOTO(space = H5Dget_space(dset), what, status, out);
    ACX_H5_CHECK_GOTO(type = H5Dget_type(dset), what, status, out);
    int ndim = H5Sget_simple_extent_ndims(space);
    if (ndim < 0 || ndim > ACX_MAX_DIMS) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has %d dimensions (at most %d)",
                           path, f->path, ndim, ACX_MAX_DIMS);
        goto out;
    }
    int dtype = acx_h5_to_dtype(type);
    if (dtype < 0) {
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has a datatype acx does not support",
                      path, f->path);
        goto out;
    }
    ACX_H5_CHECK_GOTO(H5Sget_simple_extent_dims(space, dims, NULL), what, status, out);
    *ndim_p = ndim;
    for (int k = 0; k < ndim; k++)
        shape[k] = (int64_t)dims[k];
    *dtype_p = (acx_dtype_t)dtype;
out:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return status;
}

acx_status_t acx_ckpt_shape(acx_ckpt_file_t *f, const char *path, int *ndim_p, int64_t *shape,
                            acx_dtype_t *dtype_p) {
    if (f == NULL || path == NULL || ndim_p == NULL || shape == NULL || dtype_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_shape: NULL argument");
    hid_t dset = -1;
    int ndim;
    int64_t s[ACX_MAX_DIMS];
    acx_dtype_t dtype;
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    acx_status_t status = open_dataset(f, path, &dset);
    if (status == ACX_OK) status = dataset_shape(f, path, dset, &ndim, s, &dtype);
    if (dset >= 0) H5Dclose(dset);
    acx_h5_unlock();
    status = acx_ckpt_note_damage(f, status, path);
    if (status != ACX_OK) return status;
    *ndim_p = ndim;
    memcpy(shape, s, (size_t)ndim * sizeof *s);
    *dtype_p = dtype;
    return ACX_OK;
}

acx_status_t acx_ckpt_storage(acx_ckpt_file_t *f, const char *path, acx_ckpt_storage_t *st_p) {
    if (f == NULL || path == NULL || st_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_storage: NULL argument");
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t dset = -1;
    hsize_t fsize = 0;
    acx_h5_storage_t hs = {0};
    snprintf(what, sizeof what, "dataset '%s' in '%s'", path, f->path);
    acx_h5_lock();
    acx_h5_quiet();
    int e = acx_ckpt_path_exists(f->file, path);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no dataset '%s'", f->path, path);
        goto out;
    }
    ACX_H5_CHECK_GOTO(dset = H5Dopen2(f->file, path, H5P_DEFAULT), what, status, out);
    ACX_CHECK_GOTO(acx_h5_check_dataset(dset, what, 0, &hs), status, out);
    ACX_H5_CHECK_GOTO(H5Fget_filesize(f->file, &fsize), what, status, out);
out:
    if (dset >= 0) H5Dclose(dset);
    acx_h5_unlock();
    status = acx_ckpt_note_damage(f, status, path);
    if (status != ACX_OK) return status;
    *st_p = (acx_ckpt_storage_t){
        .bytes = hs.bytes, .stored = hs.stored, .file_bytes = fsize, .written = hs.written};
    return ACX_OK;
}

/* ---- reading tensors ---- */

/* Select the elements [e0, e1) — row-major flat indices — of the dataspace
 * `space` of dims[ndim], where coordinates start[0..d) are fixed and the
 * range is within the sub-array dims[d..ndim): a partial first row, whole
 * rows, a partial last row, recursing into the partial ones (at most
 * 2*ndim - 1 blocks, OR-ed into the selection). */
static herr_t select_flat(hid_t space, int ndim, const hsize_t *dims, int d, hsize_t *start,
                          hsize_t e0, hsize_t e1) {
    if (e0 >= e1) return 0;
    hsize_t inner = 1, count[ACX_MAX_DIMS];
    for (int k = d + 1; k < ndim; k++)
        inner *= dims[k];
    hsize_t r0 = e0 / inner, o0 = e0 % inner, r1 = e1 / inner, o1 = e1 % inner;
    if (d == ndim - 1 || r0 == r1) {
        start[d] = r0;
        if (d == ndim - 1) {
            for (int k = 0; k < ndim; k++)
                count[k] = k < d ? 1 : e1 - e0;
            return H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        }
        return select_flat(space, ndim, dims, d + 1, start, o0, o1);
    }
    if (o0 > 0) {
        start[d] = r0++;
        if (select_flat(space, ndim, dims, d + 1, start, o0, inner) < 0) return -1;
    }
    if (r1 > r0) {
        hsize_t st[ACX_MAX_DIMS];
        for (int k = 0; k < ndim; k++) {
            st[k] = k < d ? start[k] : k == d ? r0 : 0;
            count[k] = k < d ? 1 : k == d ? r1 - r0 : dims[k];
        }
        if (H5Sselect_hyperslab(space, H5S_SELECT_OR, st, NULL, count, NULL) < 0) return -1;
    }
    if (o1 > 0) {
        start[d] = r1;
        if (select_flat(space, ndim, dims, d + 1, start, 0, o1) < 0) return -1;
    }
    return 0;
}

/* Read elements [e0, e1) (e0 < e1) of dset — flat, row-major indices —
 * into buf as one flat run. Lock held. */
static acx_status_t read_flat(hid_t dset, hid_t mtype, int ndim, const hsize_t *dims, hsize_t e0,
                              hsize_t e1, void *buf, const char *what) {
    acx_status_t status = ACX_OK;
    hid_t fspace = -1, mspace = -1;
    hsize_t start[ACX_MAX_DIMS] = {0}, n = e1 - e0;
    ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
    ACX_H5_CHECK_GOTO(H5Sselect_none(fspace), what, status, out);
    ACX_H5_CHECK_GOTO(select_flat(fspace, ndim, dims, 0, start, e0, e1), what, status, out);
    ACX_H5_CHECK_GOTO(mspace = H5Screate_simple(1, &n, NULL), what, status, out);
    ACX_H5_CHECK_GOTO(H5Dread(dset, mtype, mspace, fspace, H5P_DEFAULT, buf), what, status, out);
out:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    return status;
}

/* Check that dataset matches t's shape and dtype, then read t's io rows
 * and verify them. Lock held.
 *
 * Verification (format version 2): the io rows are the dataset's bytes
 * [a, b); the CRC blocks they touch cover [wa, wb) ⊇ [a, b) — the first and
 * last block may hold bytes of rows this rank does not read. Those edges
 * ([wa, a) and [b, wb), each less than one block) are read too, into
 * `scratch`, and the blocks are checked as head + rows + tail. So a rank
 * verifies every byte it returns without any other rank's help, whatever
 * the world size at save and at load; the extra reading is at most two
 * blocks per tensor (a small fraction of a rank's rows: blocks are 64 KiB,
 * or 1/4096 of a tensor above 256 MiB). The rows are read in pieces of
 * about CKPT_IO_PIECE, each checked right after it is read, while it is in
 * the cache. Independent transfers: see the file comment. */
static acx_status_t read_tensor(acx_ckpt_file_t *f, const acx_ckpt_tensor_t *t) {
    acx_status_t status = ACX_OK;
    char what[1280];
    hid_t dset = -1, fspace = -1, mspace = -1;
    int ndim, has_crc = 0;
    int64_t shape[ACX_MAX_DIMS];
    acx_dtype_t dtype;
    acx_ckpt_crc_t crc = {0};
    unsigned char *scratch = NULL;

    snprintf(what, sizeof what, "dataset '%s' in '%s'", t->path, f->path);
    ACX_CHECK_GOTO(open_dataset(f, t->path, &dset), status, out);
    ACX_CHECK_GOTO(dataset_shape(f, t->path, dset, &ndim, shape, &dtype), status, out);
    int same = ndim == t->ndim && dtype == t->dtype;
    for (int k = 0; same && k < ndim; k++)
        same = shape[k] == t->shape[k];
    if (!same) {
        char fs[256], ts[256];
        format_shape(fs, sizeof fs, ndim, shape);
        format_shape(ts, sizeof ts, t->ndim, t->shape);
        status =
            ACX_ERROR(ACX_ERR_FORMAT, "dataset '%s' in '%s' has shape %s (%s), expected %s (%s)",
                      t->path, f->path, fs, acx_dtype_name(dtype), ts, acx_dtype_name(t->dtype));
        goto out;
    }
    uint64_t es = acx_dtype_size(t->dtype), rb = row_bytes(t);
    uint64_t a = (uint64_t)t->io_begin * rb, b = (uint64_t)t->io_end * rb;
    ACX_CHECK_GOTO(acx_ckpt_dataset_crc(f, dset, tensor_bytes(t), what, &has_crc, &crc), status,
                   out);
    /* an empty dataset has no storage to read (the same on every rank) */
    if (tensor_bytes(t) == 0) goto out;

    hsize_t dims[ACX_MAX_DIMS];
    for (int k = 0; k < ndim; k++)
        dims[k] = (hsize_t)shape[k];
    /* the edges of the blocks [a, b) touches: elements [h0, a/es) and
     * [b/es, t1); the block edges need not fall on elements */
    uint64_t wa = a, wb = b;
    if (has_crc && a < b) {
        wa = a / crc.block * crc.block;
        wb = acx_ckpt_crc_nblocks(b, crc.block) * crc.block;
        if (wb > crc.bytes) wb = crc.bytes;
    }
    hsize_t h0 = wa / es, t1 = (wb + es - 1) / es;
    uint64_t head_bytes = (a / es - h0) * es, tail_bytes = (t1 - b / es) * es;
    if (head_bytes + tail_bytes > 0) {
        scratch = acx_malloc((size_t)(head_bytes + tail_bytes), "checkpoint block edges");
        if (scratch == NULL) {
            status = ACX_ERR_NO_MEMORY;
            goto out;
        }
    }
    hid_t mtype = acx_h5_native((int)t->dtype);
    int check = has_crc && a < b;
    acx_ckpt_crc_check_t k;
    if (check) acx_ckpt_crc_check_init(&k, &crc, what, wa);
    if (head_bytes > 0)
        ACX_CHECK_GOTO(read_flat(dset, mtype, ndim, dims, h0, a / es, scratch, what), status, out);
    if (check)
        ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, scratch + (wa - h0 * es), a - wa), status, out);

    /* the rows, piece by piece, each checked right after it is read (while
     * it is in the cache) */
    if (a < b) {
        hsize_t step = piece_rows(rb), end = (hsize_t)t->io_end;
        ACX_H5_CHECK_GOTO(fspace = H5Dget_space(dset), what, status, out);
        for (hsize_t r = (hsize_t)t->io_begin; r < end; r += step) {
            hsize_t n = end - r < step ? end - r : step;
            char *p = (char *)t->buf + (size_t)(r - (hsize_t)t->buf_row0) * (size_t)rb;
            double x0 = MPI_Wtime();
            ACX_CHECK_GOTO(acx_ckpt_select_rows(fspace, ndim, dims, r, n, &mspace, what), status,
                           out);
            if (H5Dread(dset, mtype, mspace, fspace, H5P_DEFAULT, p) < 0) {
                status = read_error("H5Dread", t->path, f->path, __LINE__);
                goto out;
            }
            H5Sclose(mspace);
            mspace = -1;
            double x1 = MPI_Wtime();
            if (check) ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, p, n * rb), status, out);
            f->t_read += x1 - x0;
            f->t_check += MPI_Wtime() - x1;
        }
    }
    if (tail_bytes > 0)
        ACX_CHECK_GOTO(read_flat(dset, mtype, ndim, dims, b / es, t1, scratch + head_bytes, what),
                       status, out);
    if (check)
        ACX_CHECK_GOTO(acx_ckpt_crc_check_feed(&k, scratch + head_bytes, wb - b), status, out);
out:
    free(scratch);
    acx_ckpt_crc_free(&crc);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (dset >= 0) H5Dclose(dset);
    return status;
}

/* ---- sharing rows among replicas ---- */

/* All-gather t's io rows in t->share (size > 1), in place: each member's
 * rows land at the same rows of every member's buffer. The members' rows
 * are checked first (same buffer rows; disjoint, in rank order, one range
 * inside the buffer), the same way on every member from the same
 * exchanged values, so they all take the same path. Collective over
 * t->share; its members return the same status. Counts are in rows (a
 * contiguous datatype of one row), so a tensor of more than 2^31 elements
 * needs no special case. */
static acx_status_t share_rows(const acx_ckpt_tensor_t *t, const char *file) {
    acx_comm_t *g = t->share;
    acx_status_t status = ACX_OK;
    int n = g->size;
    int64_t mine[4] = {t->io_begin, t->io_end, t->buf_row0, t->buf_rows};
    int64_t *all = acx_malloc((size_t)n * sizeof mine, "checkpoint row exchange");
    int *counts = acx_malloc((size_t)n * 2 * sizeof *counts, "checkpoint row exchange");
    MPI_Datatype row = MPI_DATATYPE_NULL;
    uint64_t rb = row_bytes(t);
    status = acx_coll_agree(g, all != NULL && counts != NULL ? ACX_OK : ACX_ERR_NO_MEMORY);
    if (status != ACX_OK) goto out;
    ACX_MPI_CHECK_GOTO(MPI_Allgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, g->mpi), status,
                       agreed);
    int *displs = counts + n;
    int64_t next = -1, first = -1;
    for (int r = 0; r < n && status == ACX_OK; r++) {
        const int64_t *a = all + 4 * r;
        int64_t rows = a[1] - a[0];
        if (a[2] != t->buf_row0 || a[3] != t->buf_rows)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s' in '%s': the ranks sharing it hold "
                               "different rows ([%lld, +%lld) on member %d, [%lld, +%lld) on "
                               "member 0)",
                               t->path, file, (long long)a[2], (long long)a[3], r,
                               (long long)all[2], (long long)all[3]);
        else if (rows > 0 && next >= 0 && a[0] != next)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s' in '%s': member %d of its share group "
                               "reads rows [%lld, %lld), not from row %lld (the members' io "
                               "rows must follow each other in rank order)",
                               t->path, file, r, (long long)a[0], (long long)a[1], (long long)next);
        else if (rows > (int64_t)INT_MAX || a[0] - t->buf_row0 > (int64_t)INT_MAX ||
                 rb > (uint64_t)INT_MAX)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s': %lld rows of %llu bytes are too many "
                               "to share in one MPI call",
                               t->path, (long long)rows, (unsigned long long)rb);
        if (status != ACX_OK) break;
        counts[r] = (int)rows;
        displs[r] = rows > 0 ? (int)(a[0] - t->buf_row0) : 0;
        if (rows > 0) {
            if (first < 0) first = a[0];
            next = a[1];
        }
    }
    /* every member computed the same status from the same values */
    if (status != ACX_OK || first < 0) goto out;
    ACX_MPI_CHECK_GOTO(MPI_Type_contiguous((int)rb, MPI_BYTE, &row), status, agreed);
    ACX_MPI_CHECK_GOTO(MPI_Type_commit(&row), status, agreed);
    ACX_MPI_CHECK_GOTO(
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t->buf, counts, displs, row, g->mpi),
        status, agreed);
agreed:
    status = acx_coll_agree(g, status);
out:
    if (row != MPI_DATATYPE_NULL) MPI_Type_free(&row);
    free(counts);
    free(all);
    return status;
}

acx_status_t acx_ckpt_read(acx_ckpt_file_t *f, const acx_ckpt_tensor_t *tensors, int num_tensors) {
    acx_status_t status = ACX_OK;
    if (f == NULL || num_tensors < 0 || (num_tensors > 0 && tensors == NULL))
        status = ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_read: NULL file or tensors");
    for (int i = 0; status == ACX_OK && i < num_tensors; i++) {
        status = acx_ckpt_check_tensor(&tensors[i], i);
        if (status == ACX_OK && tensors[i].share != NULL && f->world == NULL)
            status = ACX_ERROR(ACX_ERR_INVALID_ARG,
                               "checkpoint tensor '%s': a share group needs a file opened on a "
                               "world",
                               tensors[i].path);
    }
    if (f == NULL) return status;
    if (status == ACX_OK && f->damaged != ACX_OK) status = acx_ckpt_damage_replay(f);
    status = agree(f->world, status);
    if (status != ACX_OK) return status;

    double t0 = MPI_Wtime();
    f->t_read = f->t_check = 0;
    acx_h5_lock();
    acx_h5_quiet();
    for (int i = 0; status == ACX_OK && i < num_tensors; i++)
        status = acx_ckpt_note_damage(f, read_tensor(f, &tensors[i]), tensors[i].path);
    acx_h5_unlock();
    double t1 = MPI_Wtime();
    /* nothing is shared before every rank has verified what it read */
    status = agree(f->world, status);
    double t2 = MPI_Wtime();
    for (int i = 0; status == ACX_OK && i < num_tensors; i++)
        if (tensors[i].share != NULL && tensors[i].share->size > 1)
            status = share_rows(&tensors[i], f->path);
    status = agree(f->world, status);
    if (status == ACX_OK && acx_log_enabled(ACX_LOG_DEBUG, ACX_SUBSYS_IO)) {
        int shared = 0, group = 1;
        for (int i = 0; i < num_tensors; i++)
            if (tensors[i].share != NULL && tensors[i].share->size > 1) {
                shared++;
                group = tensors[i].share->size;
            }
        ACX_DEBUG(ACX_SUBSYS_IO,
                  "read %d tensors from '%s' (CRC-32: %s); %d of them read in parts by %d ranks "
                  "and all-gathered; reading and checking %.3f s (H5Dread of the rows %.3f s, "
                  "their CRC checks %.3f s), waiting for the others %.3f s, all-gathers %.3f s",
                  num_tensors, f->path, acx_ckpt_crc_impl(), shared, shared ? group : 1, t1 - t0,
                  f->t_read, f->t_check, t2 - t1, MPI_Wtime() - t2);
    }
    return status;
}

/* ---- listing ---- */

typedef struct {
    hid_t group;
    int count, cap;
    size_t bytes;
    char **names;
    int failed;
} list_state_t;

static herr_t list_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    list_state_t *s = data;
    H5O_info_t oinfo;
    (void)info;
    if (H5Oget_info_by_name2(group, name, &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return -1;
    if (oinfo.type != H5O_TYPE_DATASET) return 0;
    if (s->count == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        char **n = realloc(s->names, (size_t)cap * sizeof *n);
        if (n == NULL) {
            s->failed = 1;
            return -1;
        }
        s->names = n;
        s->cap = cap;
    }
    s->names[s->count] = strdup(name);
    if (s->names[s->count] == NULL) {
        s->failed = 1;
        return -1;
    }
    s->bytes += strlen(name) + 1;
    s->count++;
    return 0;
}

acx_status_t acx_ckpt_list(acx_ckpt_file_t *f, const char *group, int *count_p, char ***names_p) {
    if (f == NULL || group == NULL || count_p == NULL || names_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_ckpt_list: NULL argument");
    acx_status_t status = ACX_OK;
    char what[1280];
    list_state_t s = {.group = -1};
    hid_t g = -1, gcpl = -1;
    char **block = NULL;

    snprintf(what, sizeof what, "group '%s' in '%s'", group, f->path);
    if (f->damaged != ACX_OK) return acx_ckpt_damage_replay(f);
    acx_h5_lock();
    acx_h5_quiet();
    int e = acx_ckpt_path_exists(f->file, group);
    if (e < 0) {
        status = acx_error_h5("H5Lexists", what, __FILE__, __LINE__);
        goto out;
    }
    if (e == 0) {
        status = ACX_ERROR(ACX_ERR_FORMAT, "checkpoint '%s' has no group '%s'", f->path, group);
        goto out;
    }
    ACX_H5_CHECK_GOTO(g = H5Gopen2(f->file, group, H5P_DEFAULT), what, status, out);
    /* creation order when the group tracks it (acx's own files), else by
     * name (a group written by another tool) */
    unsigned flags = 0;
    ACX_H5_CHECK_GOTO(gcpl = H5Gget_create_plist(g), what, status, out);
    ACX_H5_CHECK_GOTO(H5Pget_link_creation_order(gcpl, &flags), what, status, out);
    H5_index_t index = (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    if (H5Literate(g, index, H5_ITER_INC, NULL, list_cb, &s) < 0) {
        if (s.failed)
            status = ACX_ERROR(ACX_ERR_NO_MEMORY, "no memory to list %s", what);
        else
            status = acx_error_h5("H5Literate", what, __FILE__, __LINE__);
        goto out;
    }
    /* one block: the pointer array, then the strings */
    block = acx_malloc((size_t)s.count * sizeof(char *) + s.bytes + 1, "checkpoint name list");
    if (block == NULL) {
        status = ACX_ERR_NO_MEMORY;
        goto out;
    }
    char *p = (char *)(block + s.count);
    for (int i = 0; i < s.count; i++) {
        size_t n = strlen(s.names[i]) + 1;
        memcpy(p, s.names[i], n);
        block[i] = p;
        p += n;
    }
out:
    if (gcpl >= 0) H5Pclose(gcpl);
    if (g >= 0) H5Gclose(g);
    acx_h5_unlock();
    for (int i = 0; i < s.count; i++)
        free(s.names[i]);
    free(s.names);
    status = acx_ckpt_note_damage(f, status, group);
    if (status != ACX_OK) return status;
    *count_p = s.count;
    *names_p = block;
    return ACX_OK;
}
