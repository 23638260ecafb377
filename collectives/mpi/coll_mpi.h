/*
 * collectives/mpi/coll_mpi.h — the MPI backend's two layers
 * (package-private to collectives/mpi/).
 *
 * acx_coll_mpi_ops (declared in ../coll.h, defined in coll_mpi_stage.c) is
 * the table the rest of acx uses: it accepts host and CUDA device buffers,
 * staging device buffers through pinned host memory, and hands host
 * buffers straight to acx_coll_mpi_host_ops (coll_mpi.c), the collectives
 * proper, which work on host memory only.
 */
#ifndef ACX_COLL_MPI_H
#define ACX_COLL_MPI_H

#include "collectives/coll.h"

/* The MPI collectives on host memory (coll_mpi.c). */
extern const acx_coll_ops_t acx_coll_mpi_host_ops;

#endif /* ACX_COLL_MPI_H */
