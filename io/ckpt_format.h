/*
 * io/ckpt_format.h — the names, versions and layout of acx's HDF5 files
 * (library-private): the checkpoint ("acx-checkpoint") and the weights-only
 * file ("acx-weights"). The one place a reader of the code looks for "what
 * is in the file": the writer (io/ckpt_write.c), the reader
 * (io/ckpt_read.c), the tools (io/ckpt_tools.c), the weights file
 * (io/weights.c) and the runtime's state (runtime/checkpoint.c) take the
 * names from here. The full description, with h5py examples, is
 * docs/checkpoint-format.md.
 */
#ifndef ACX_IO_CKPT_FORMAT_H
#define ACX_IO_CKPT_FORMAT_H

/* The root attribute `format` of a checkpoint. */
#define ACX_CKPT_FORMAT "acx-checkpoint"
/* 2: contiguous datasets with CRC-32 block attributes (io/ckpt_crc.h);
 * 1: chunked datasets with HDF5's Fletcher-32 filter. Both are read. */
#define ACX_CKPT_FORMAT_VERSION 2
/* The root attribute `format` of a weights-only file (acx_model_save_weights,
 * acx ckpt export --format hdf5). */
#define ACX_WEIGHTS_FORMAT "acx-weights"

#endif /* ACX_IO_CKPT_FORMAT_H */
