/*
 * io/loader.h — the data loader's constructor (library-private); the rest
 * of its interface is public (acx/data.h). The runtime resolves the options
 * against the config and passes the world communicator, so io never needs
 * the accelerator.
 */
#ifndef ACX_IO_LOADER_H
#define ACX_IO_LOADER_H

#include "acx/data.h"
#include "collectives/coll.h"

/* opts: fully resolved (no ACX_UNSET fields). Collective over world (status
 * agreed with acx_coll_agree). */
acx_status_t acx_loader_open(acx_comm_t *world, uint64_t seed, const char *path,
                             int num_datasets, const char *const *dataset_names,
                             const acx_dataloader_options_t *opts, acx_dataloader_t **loader_p);

#endif /* ACX_IO_LOADER_H */
