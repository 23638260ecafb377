/*
 * io/text.c — acx_import_text: turn a text or a token file into the token
 * streams the token loader reads (acx_token_loader_open). Single process,
 * no MPI.
 *
 * Inputs:
 *   - text (opts->tokens 0): every byte of the file is one token (byte-level,
 *     vocab 256, stored uint16); "-" reads standard input;
 *   - a token file (opts->tokens 1) another tokenizer wrote: a raw
 *     little-endian array of opts->dtype (uint16 or int32), or llm.c's .bin
 *     format, recognized by its header: 256 little-endian int32, header[0] =
 *     20240520 (magic), header[1] = 1 (version: uint16 tokens), header[2] =
 *     the token count, then the tokens; the count must match the file size
 *     exactly. opts->format: auto (the magic decides), raw (a raw uint16
 *     file may start with the ids 54472, 308, the magic's bytes), llm.c
 *     (the header must be there).
 *
 * Output (contiguous layout):
 *   /                 attrs: source = "text"
 *   /train/tokens     [N - V] uint16 or int32   attrs: vocab_size (int64), tokenizer
 *   /val/tokens       [V]     the END of the stream (held out: no token shared)
 * V = round(N x val_fraction), or val_tokens when >= 0; no /val with V = 0.
 * tokenizer is "bytes" for text, "file" for a token file. Every id is checked
 * against [0, vocab_size). Written to out_path + ".tmp", fsynced, renamed,
 * and the directory fsynced (acx_io_commit).
 *
 * Left to others: reading the result (dataloader.c), the command line
 * (cli/acx.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acx/data.h"
#include "io/h5.h"
#include "base/error.h"

#define LLMC_MAGIC        20240520
#define LLMC_HEADER_INTS  256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

/* The whole input, read into memory. */
static acx_status_t read_all(const char *path, uint8_t **data_p, size_t *len_p) {
    int is_stdin = strcmp(path, "-") == 0;
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (f == NULL) return ACX_ERROR(ACX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    acx_status_t status = ACX_OK;
    if (buf == NULL) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "reading '%s': out of memory", name);
        goto out;
    }
    for (;;) {
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                status = ACX_ERROR(ACX_ERR_NO_MEMORY, "reading '%s': out of memory at %zu bytes",
                                   name, len);
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) status = ACX_ERROR(ACX_ERR_IO, "reading '%s' failed: %s", name, strerror(errno));
out:
    if (!is_stdin) fclose(f);
    if (status != ACX_OK) {
        free(buf);
        return status;
    }
    *data_p = buf;
    *len_p = len;
    return ACX_OK;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The token ids of the input as int64 (values checked later). */
static acx_status_t decode(const char *path, const acx_import_text_options_t *o, const uint8_t *d,
                           size_t len, int64_t **tok_p, int64_t *n_p, acx_dtype_t *dtype_p) {
    const uint8_t *p = d;
    size_t count, esize;
    acx_dtype_t dtype;
    if (!o->tokens) {
        count = len;
        esize = 1;
        dtype = ACX_DTYPE_UINT16;
    } else if (o->format == 2 && (len < 4 || le32(d) != LLMC_MAGIC)) {
        if (len < 4)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s' has %zu bytes: no llm.c header (magic 20240520)",
                             path, len);
        return ACX_ERROR(ACX_ERR_FORMAT,
                         "token file '%s' is not an llm.c .bin file: its first int32 is %u, "
                         "expected the magic 20240520",
                         path, le32(d));
    } else if (o->format != 1 && len >= 4 && le32(d) == LLMC_MAGIC) {
        /* llm.c's .bin: the header decides */
        if (len < LLMC_HEADER_BYTES)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s' starts with llm.c's magic 20240520 but has %zu "
                             "bytes, fewer than its %d-byte header",
                             path, len, LLMC_HEADER_BYTES);
        uint32_t version = le32(d + 4), n = le32(d + 8);
        if (version != 1)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s': llm.c header version %u; expected 1 (uint16 "
                             "tokens)",
                             path, version);
        if (o->dtype != ACX_DTYPE_UINT16)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s' is an llm.c .bin file of uint16 tokens, but dtype "
                             "%s was asked for",
                             path, acx_dtype_name(o->dtype));
        size_t data = len - LLMC_HEADER_BYTES;
        if ((uint64_t)n * 2 != data)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s': its llm.c header announces %u tokens (%llu bytes "
                             "after the header), but the file has %zu bytes there (%s)",
                             path, n, (unsigned long long)n * 2, data,
                             (uint64_t)n * 2 > data ? "the count runs past the end of the file"
                                                    : "trailing data");
        p = d + LLMC_HEADER_BYTES;
        count = n;
        esize = 2;
        dtype = ACX_DTYPE_UINT16;
    } else {
        if (o->dtype != ACX_DTYPE_UINT16 && o->dtype != ACX_DTYPE_INT32)
            return ACX_ERROR(ACX_ERR_INVALID_ARG,
                             "acx_import_text: token dtype %s; expected uint16 or int32",
                             acx_dtype_name(o->dtype));
        dtype = o->dtype;
        esize = acx_dtype_size(dtype);
        if (len % esize != 0)
            return ACX_ERROR(ACX_ERR_FORMAT,
                             "token file '%s' has %zu bytes, not a whole number of %s tokens "
                             "(%zu bytes each)",
                             path, len, acx_dtype_name(dtype), esize);
        count = len / esize;
    }
    int64_t *tok = malloc((count > 0 ? count : 1) * sizeof *tok);
    if (tok == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "'%s': out of memory", path);
    for (size_t i = 0; i < count; i++) {
        const uint8_t *q = p + i * esize;
        if (esize == 1)
            tok[i] = q[0];
        else if (esize == 2)
            tok[i] = (int64_t)(q[0] | q[1] << 8);
        else
            tok[i] = (int64_t)(int32_t)le32(q);
    }
    *tok_p = tok;
    *n_p = (int64_t)count;
    *dtype_p = dtype;
    return ACX_OK;
}

/* /<group>/tokens with its attributes. HDF5 lock held. */
static acx_status_t write_split(hid_t file, const char *group, const int64_t *tok, int64_t n,
                                acx_dtype_t dtype, int64_t vocab, const char *tokenizer,
                                const char *out) {
    acx_status_t status = ACX_OK;
    char what[512];
    snprintf(what, sizeof what, "dataset /%s/tokens in '%s'", group, out);
    hid_t g = -1, space = -1, dset = -1;
    hsize_t dims = (hsize_t)n;
    size_t es = acx_dtype_size(dtype);
    void *buf = malloc((size_t)n * es);
    if (buf == NULL) return ACX_ERROR(ACX_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == ACX_DTYPE_UINT16)
            ((uint16_t *)buf)[i] = (uint16_t)tok[i];
        else
            ((int32_t *)buf)[i] = (int32_t)tok[i];
    }
    ACX_H5_CHECK_GOTO(g = H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), what,
                      status, done);
    ACX_H5_CHECK_GOTO(space = H5Screate_simple(1, &dims, NULL), what, status, done);
    ACX_H5_CHECK_GOTO(dset = H5Dcreate2(g, "tokens",
                                        dtype == ACX_DTYPE_UINT16 ? H5T_STD_U16LE : H5T_STD_I32LE,
                                        space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                      what, status, done);
    ACX_H5_CHECK_GOTO(H5Dwrite(dset, acx_h5_native(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf),
                      what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_i64(dset, "vocab_size", vocab), what, status, done);
    ACX_H5_CHECK_GOTO(acx_h5_write_attr_str(dset, "tokenizer", tokenizer), what, status, done);
done:
    if (dset >= 0) H5Dclose(dset);
    if (space >= 0) H5Sclose(space);
    if (g >= 0) H5Gclose(g);
    free(buf);
    return status;
}

static acx_status_t write_h5(const char *tmp, const int64_t *tok, int64_t n_train, int64_t n_val,
                             acx_dtype_t dtype, int64_t vocab, const char *tokenizer) {
    acx_status_t status = ACX_OK;
    char what[512];
    hid_t file = -1;
    snprintf(what, sizeof what, "'%s'", tmp);
    acx_h5_lock();
    acx_h5_quiet();
    ACX_CHECK_GOTO(acx_h5_create_import(tmp, "text", &file), status, done);
    ACX_CHECK_GOTO(write_split(file, "train", tok, n_train, dtype, vocab, tokenizer, tmp), status,
                   done);
    if (n_val > 0)
        ACX_CHECK_GOTO(write_split(file, "val", tok + n_train, n_val, dtype, vocab, tokenizer, tmp),
                       status, done);
    /* H5Fclose flushes: its failure means the file is incomplete */
    ACX_H5_CHECK_GOTO(H5Fclose(file), what, status, done);
    file = -1;
done:
    if (file >= 0) H5Fclose(file);
    acx_h5_unlock();
    return status;
}

ACX_API acx_status_t acx_import_text(const char *in_path, const acx_import_text_options_t *opts,
                                     const char *out_path) {
    if (in_path == NULL || opts == NULL || out_path == NULL || out_path[0] == '\0')
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: input path, options and output path must be given");
    const acx_import_text_options_t *o = opts;
    if (o->format < 0 || o->format > 2)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: format = %d; expected 0 (auto), 1 (raw), 2 (llm.c)",
                         o->format);
    if (o->tokens != 0 && o->tokens != 1)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_import_text: tokens = %d; expected 0 or 1",
                         o->tokens);
    if (o->tokens && strcmp(in_path, "-") == 0)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: a token file cannot be read from standard input "
                         "(its size is checked against its header)");
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: val_fraction %g; expected 0 <= F < 1", o->val_fraction);
    if (o->vocab_size < 0 || o->vocab_size > INT32_MAX)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: vocab_size %lld; expected 0 (from the data) to %d",
                         (long long)o->vocab_size, INT32_MAX);
    if (!o->tokens && o->vocab_size != 0 && o->vocab_size != 256)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_import_text: vocab_size %lld for byte-level text; its vocabulary "
                         "is the 256 byte values",
                         (long long)o->vocab_size);
    ACX_CHECK(acx_io_check_target(out_path));

    const char *name = strcmp(in_path, "-") == 0 ? "standard input" : in_path;
    uint8_t *data = NULL;
    size_t len = 0;
    int64_t *tok = NULL, n = 0;
    acx_dtype_t dtype = ACX_DTYPE_UINT16;
    char *tmp = NULL;
    acx_status_t status;
    ACX_CHECK(read_all(in_path, &data, &len));
    ACX_CHECK_GOTO(decode(name, o, data, len, &tok, &n, &dtype), status, out);

    /* every id in [0, vocab); a token file without a given vocabulary gets
     * max id + 1 */
    int64_t vocab = o->tokens ? o->vocab_size : 256, max = -1;
    for (int64_t i = 0; i < n; i++) {
        if (tok[i] < 0 || (vocab > 0 && tok[i] >= vocab)) {
            status = ACX_ERROR(ACX_ERR_FORMAT,
                               "token file '%s': token %lld has value %lld; expected a token id "
                               "in [0, %lld)",
                               name, (long long)i, (long long)tok[i],
                               (long long)(vocab > 0 ? vocab : INT32_MAX));
            goto out;
        }
        if (tok[i] > max) max = tok[i];
    }
    if (vocab == 0) vocab = max + 1;

    int64_t n_val =
        o->val_tokens >= 0 ? o->val_tokens : (int64_t)llround((double)n * o->val_fraction);
    int64_t n_train = n - n_val;
    /* a token stream needs 2 tokens for one window of length 1 */
    if (n_train < 2 || n_val == 1) {
        status = ACX_ERROR(ACX_ERR_FORMAT,
                           "'%s' has %lld tokens: %lld for training and %lld held out; each set "
                           "needs at least 2 (one window of seq_len 1), the held-out set may "
                           "be empty",
                           name, (long long)n, (long long)n_train, (long long)n_val);
        goto out;
    }

    size_t olen = strlen(out_path);
    tmp = malloc(olen + 5);
    if (tmp == NULL) {
        status = ACX_ERROR(ACX_ERR_NO_MEMORY, "temporary path: out of memory");
        goto out;
    }
    memcpy(tmp, out_path, olen);
    memcpy(tmp + olen, ".tmp", 5);
    status = write_h5(tmp, tok, n_train, n_val, dtype, vocab, o->tokens ? "file" : "bytes");
    /* fsync, rename, fsync the directory: a crash leaves the old file or
     * the whole new one */
    if (status == ACX_OK) status = acx_io_commit(tmp, out_path);
    if (status != ACX_OK) unlink(tmp);
out:
    free(tmp);
    free(tok);
    free(data);
    return status;
}
