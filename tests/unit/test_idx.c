/*
 * tests/unit/test_idx.c — acx_import_idx (io/idx.c): small IDX files,
 * gzipped and plain, are generated in a temporary directory, imported, and
 * read back with plain HDF5 calls byte for byte; then the failure cases
 * (truncated data, bad magic, wrong ndim, images/labels N mismatch, trailing
 * bytes, missing file) must give the documented status and a message naming
 * the file, leave no .tmp behind and leave an existing output untouched.
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/acx_test.h"

static char dir[256];

/* ---- fixtures ---- */

static void path_of(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
}

/* Write an IDX file: magic 00 00 type ndim, big-endian dims, then `data_len`
 * bytes of data (which may disagree with dims, to make broken files). */
static int write_idx(const char *path, int gz, uint8_t type, int ndim, const uint32_t *dims,
                     const uint8_t *data, size_t data_len) {
    uint8_t head[4 + 4 * 4] = {0, 0, type, (uint8_t)ndim};
    for (int d = 0; d < ndim; d++) {
        head[4 + 4 * d] = (uint8_t)(dims[d] >> 24);
        head[5 + 4 * d] = (uint8_t)(dims[d] >> 16);
        head[6 + 4 * d] = (uint8_t)(dims[d] >> 8);
        head[7 + 4 * d] = (uint8_t)dims[d];
    }
    size_t hlen = 4 + 4 * (size_t)ndim;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return -1;
        if (gzwrite(f, head, (unsigned)hlen) != (int)hlen) return -1;
        if (data_len && gzwrite(f, data, (unsigned)data_len) != (int)data_len) return -1;
        return gzclose(f) == Z_OK ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    if (fwrite(head, 1, hlen, f) != hlen) return -1;
    if (data_len && fwrite(data, 1, data_len, f) != data_len) return -1;
    return fclose(f) == 0 ? 0 : -1;
}

/* Image i, pixel (y, x) and label i: values that differ between every pixel
 * of a small set, so a shuffled or shifted read shows. */
static uint8_t pixel(int i, int y, int x) { return (uint8_t)(i * 31 + y * 7 + x * 3 + 1); }
static uint8_t label(int i) { return (uint8_t)((i * 3) % 10); }

/* n images of rows x cols, and n labels; `gz` picks gzip. */
static int make_pair(const char *img, const char *lab, int gz, int n, int rows, int cols) {
    uint8_t *data = malloc((size_t)n * rows * cols);
    uint8_t *labels = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        labels[i] = label(i);
        for (int y = 0; y < rows; y++)
            for (int x = 0; x < cols; x++)
                data[((size_t)i * rows + y) * cols + x] = pixel(i, y, x);
    }
    uint32_t idims[3] = {(uint32_t)n, (uint32_t)rows, (uint32_t)cols}, ldims[1] = {(uint32_t)n};
    int rc = write_idx(img, gz, 0x08, 3, idims, data, (size_t)n * rows * cols) ||
             write_idx(lab, gz, 0x08, 1, ldims, labels, (size_t)n);
    free(data);
    free(labels);
    return rc;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- read back ---- */

/* Check dataset `name` in `file`: rank, dims, uint8 type, and contents. */
static int check_dataset(hid_t file, const char *name, int ndim, const hsize_t *dims, int is_img) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    CHECK(d >= 0);
    hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
    CHECK(H5Sget_simple_extent_ndims(sp) == ndim);
    hsize_t got[3];
    H5Sget_simple_extent_dims(sp, got, NULL);
    size_t n = 1;
    for (int k = 0; k < ndim; k++) {
        CHECK(got[k] == dims[k]);
        n *= dims[k];
    }
    CHECK(H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE);
    hid_t dcpl = H5Dget_create_plist(d);
    CHECK(H5Pget_layout(dcpl) == H5D_CONTIGUOUS);
    H5Pclose(dcpl);
    uint8_t *buf = malloc(n);
    CHECK(H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    int bad = 0;
    for (hsize_t i = 0; i < dims[0]; i++) {
        if (is_img) {
            for (hsize_t y = 0; y < dims[1]; y++)
                for (hsize_t x = 0; x < dims[2]; x++)
                    bad += buf[(i * dims[1] + y) * dims[2] + x] != pixel((int)i, (int)y, (int)x);
        } else {
            bad += buf[i] != label((int)i);
        }
    }
    free(buf);
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(d);
    CHECK(bad == 0);
    return 0;
error:
    return 1;
}

/* Root attribute "source" == "idx". */
static int check_source_attr(hid_t file) {
    char value[16] = "";
    hid_t a = H5Aopen(file, "source", H5P_DEFAULT);
    CHECK(a >= 0);
    hid_t t = H5Aget_type(a);
    CHECK(H5Tget_class(t) == H5T_STRING && H5Tget_size(t) < sizeof value);
    CHECK(H5Aread(a, t, value) >= 0);
    H5Tclose(t);
    H5Aclose(a);
    CHECK(strcmp(value, "idx") == 0);
    return 0;
error:
    return 1;
}

/* ---- cases ---- */

static int test_import(int gz) {
    char ti[300], tl[300], vi[300], vl[300], out[300], tmp[310];
    TESTING(gz ? "import_idx: gzipped train+test, read back"
               : "import_idx: plain train+test, read back");
    path_of(ti, sizeof ti, "ti"), path_of(tl, sizeof tl, "tl");
    path_of(vi, sizeof vi, "vi"), path_of(vl, sizeof vl, "vl");
    path_of(out, sizeof out, gz ? "gz.h5" : "plain.h5");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CHECK(make_pair(ti, tl, gz, 13, 5, 4) == 0);
    CHECK(make_pair(vi, vl, gz, 6, 5, 4) == 0);
    CHECK_OK(acx_import_idx(ti, tl, vi, vl, out));
    CHECK(!exists(tmp));

    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    int bad = 0;
    bad |= check_dataset(f, "/train/images", 3, (hsize_t[]){13, 5, 4}, 1);
    bad |= check_dataset(f, "/train/labels", 1, (hsize_t[]){13}, 0);
    bad |= check_dataset(f, "/test/images", 3, (hsize_t[]){6, 5, 4}, 1);
    bad |= check_dataset(f, "/test/labels", 1, (hsize_t[]){6}, 0);
    bad |= check_source_attr(f);
    H5Fclose(f);
    CHECK(!bad);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_train_only(void) {
    char ti[300], tl[300], out[300];
    TESTING("import_idx: train only (test paths NULL)");
    path_of(ti, sizeof ti, "ti"), path_of(tl, sizeof tl, "tl"),
        path_of(out, sizeof out, "train.h5");
    CHECK(make_pair(ti, tl, 1, 3, 2, 2) == 0);
    CHECK_OK(acx_import_idx(ti, tl, NULL, NULL, out));
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    int bad = check_dataset(f, "/train/labels", 1, (hsize_t[]){3}, 0);
    htri_t has_test = H5Lexists(f, "/test", H5P_DEFAULT);
    H5Fclose(f);
    CHECK(!bad && has_test == 0);
    /* nothing to import at all */
    CHECK_STATUS(acx_import_idx(NULL, NULL, NULL, NULL, out), ACX_ERR_INVALID_ARG, "pair");
    CHECK_STATUS(acx_import_idx(ti, tl, NULL, NULL, NULL), ACX_ERR_INVALID_ARG, "output");
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* The output already holds a good file; a failed import must leave it as it
 * was and leave no .tmp. `name` is the bad file the message must name. */
static int expect_failure(const char *what, const char *ti, const char *tl, acx_status_t expected,
                          const char *needle, const char *name) {
    char out[300], tmp[310], good_ti[300], good_tl[300];
    path_of(out, sizeof out, "keep.h5");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    path_of(good_ti, sizeof good_ti, "good_ti"), path_of(good_tl, sizeof good_tl, "good_tl");
    TESTING(what);
    CHECK(make_pair(good_ti, good_tl, 1, 4, 3, 3) == 0);
    CHECK_OK(acx_import_idx(good_ti, good_tl, NULL, NULL, out));
    struct stat before, after;
    CHECK(stat(out, &before) == 0);
    CHECK_STATUS(acx_import_idx(ti, tl, NULL, NULL, out), expected, needle);
    CHECK(strstr(acx_last_error(), name) != NULL);
    CHECK(!exists(tmp));
    CHECK(stat(out, &after) == 0);
    CHECK(after.st_ino == before.st_ino && after.st_size == before.st_size &&
          after.st_mtime == before.st_mtime);
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    int bad = check_dataset(f, "/train/images", 3, (hsize_t[]){4, 3, 3}, 1);
    H5Fclose(f);
    CHECK(!bad);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_failures(void) {
    char ti[300], tl[300], bad[300], missing[300];
    int failed = 0;
    uint8_t data[64 * 3 * 3] = {0};
    path_of(ti, sizeof ti, "fi"), path_of(tl, sizeof tl, "fl");
    path_of(bad, sizeof bad, "broken"), path_of(missing, sizeof missing, "no-such-file");
    if (make_pair(ti, tl, 0, 4, 3, 3) != 0) return 1;

    /* dims say 4 x 3 x 3 = 36 bytes, 30 follow (gzipped and plain) */
    write_idx(bad, 1, 0x08, 3, (uint32_t[]){4, 3, 3}, data, 30);
    failed |= expect_failure("import_idx: truncated gzip data -> ACX_ERR_IO", bad, tl, ACX_ERR_IO,
                             "truncated: expected 36 data bytes after the header, got 30", bad);
    write_idx(bad, 0, 0x08, 3, (uint32_t[]){4, 3, 3}, data, 35);
    failed |= expect_failure("import_idx: truncated plain data -> ACX_ERR_IO", bad, tl, ACX_ERR_IO,
                             "got 35", bad);
    /* trailing bytes after the announced data */
    write_idx(bad, 1, 0x08, 3, (uint32_t[]){4, 3, 3}, data, 37);
    failed |= expect_failure("import_idx: trailing garbage -> ACX_ERR_FORMAT", bad, tl,
                             ACX_ERR_FORMAT, "trailing", bad);
    /* bad magic: first bytes not 00 00 */
    FILE *f = fopen(bad, "wb");
    if (f) {
        fputs("GIF89a not an idx file at all", f);
        fclose(f);
    }
    failed |= expect_failure("import_idx: bad magic -> ACX_ERR_FORMAT", bad, tl, ACX_ERR_FORMAT,
                             "not an IDX file", bad);
    /* element type 0x0D (float) */
    write_idx(bad, 0, 0x0D, 3, (uint32_t[]){4, 3, 3}, data, 36 * 4);
    failed |= expect_failure("import_idx: non-uint8 element type -> ACX_ERR_FORMAT", bad, tl,
                             ACX_ERR_FORMAT, "element type 0x0d", bad);
    /* a labels file (ndim 1) given as images */
    failed |= expect_failure("import_idx: wrong ndim -> ACX_ERR_FORMAT", tl, tl, ACX_ERR_FORMAT,
                             "has 1 dimension(s), expected 3", tl);
    /* zero dimension */
    write_idx(bad, 0, 0x08, 3, (uint32_t[]){4, 0, 3}, data, 0);
    failed |= expect_failure("import_idx: zero dimension -> ACX_ERR_FORMAT", bad, tl,
                             ACX_ERR_FORMAT, "dimension 1 is 0", bad);
    /* 5 labels for 4 images */
    write_idx(bad, 1, 0x08, 1, (uint32_t[]){5}, data, 5);
    failed |= expect_failure("import_idx: images/labels N mismatch -> ACX_ERR_FORMAT", ti, bad,
                             ACX_ERR_FORMAT, "has 4 samples but labels", bad);
    failed |= expect_failure("import_idx: missing file -> ACX_ERR_IO", missing, tl, ACX_ERR_IO,
                             "No such file or directory", missing);
    /* header cut inside the dims */
    f = fopen(bad, "wb");
    if (f) {
        fwrite((uint8_t[]){0, 0, 8, 3, 0, 0, 0, 4, 0}, 1, 9, f);
        fclose(f);
    }
    failed |= expect_failure("import_idx: truncated header -> ACX_ERR_IO", bad, tl, ACX_ERR_IO,
                             "truncated inside its header", bad);
    /* an output path whose directory does not exist: HDF5's own message */
    char out[300], tmp[310];
    path_of(out, sizeof out, "no-dir/out.h5");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    TESTING("import_idx: unwritable output -> ACX_ERR_HDF5 with HDF5's text");
    CHECK_STATUS(acx_import_idx(ti, tl, NULL, NULL, out), ACX_ERR_HDF5,
                 "No such file or directory");
    CHECK(strstr(acx_last_error(), "H5Fcreate") != NULL);
    CHECK(!exists(tmp));
    PASSED();
    return failed;
error:
    FAILED();
    return 1;
}

static void cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    acx_test_watchdog(120);
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/acx-test-idx-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 99;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the test's own H5Dopen probes */
    int failed = 0;
    failed |= test_import(1);
    failed |= test_import(0);
    failed |= test_train_only();
    failed |= test_failures();
    cleanup();
    return failed ? 1 : 0;
}
