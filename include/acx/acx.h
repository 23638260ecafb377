/*
 * acx.h — the whole public interface of acx, an MPI-based training runtime.
 * Programs include this header only and link with `pkg-config --libs acx`.
 */
#ifndef ACX_H
#define ACX_H

#include "acx/types.h"
#include "acx/status.h"
#include "acx/config.h"
#include "acx/accelerator.h"
#include "acx/model.h"
#include "acx/optim.h"
#include "acx/data.h"
#include "acx/collectives.h"
#include "acx/checkpoint.h"
#include "acx/memory.h"
#include "acx/cli.h"

#endif /* ACX_H */
