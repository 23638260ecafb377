/*
 * acx/cli.h — the `acx` command line tool as a library call.
 *
 * The `acx` program (tools/acx.c) is only main() around acx_cli_main; the
 * commands themselves (launch, env, config, slurm, data, ckpt,
 * estimate-memory, version) live in the library's top layer (cli/), where
 * they may use what the library does not export. A site that wraps acx in
 * its own launcher can call the same entry point.
 */
#ifndef ACX_CLI_H
#define ACX_CLI_H

#include "acx/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Run one `acx` command line. argv[0] is the program name, argv[1] the
 * command ("launch", "ckpt", ...); argc counts argv as main() does.
 * Returns the process exit status: 0 success, 1 a failed operation (the
 * reason is on stderr), 2 a usage error, and for `acx launch` the job's
 * own status (75 when every rank was preempted). Not collective; does not
 * initialize MPI unless the command needs it. Writes to stdout/stderr.
 */
ACX_API int acx_cli_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* ACX_CLI_H */
