/*
 * cli/cli.h — what the `acx` command's source files share (cli/ only).
 *
 * cli/acx.c owns the command table, the conventions and these helpers;
 * cli/launch.c (`acx launch`) and cli/env.c (`acx env`, `acx config
 * default`, the interactive `acx config`) implement commands with them.
 * Exit codes: 0 success, 1 a failure (the message names what failed), 2 a
 * usage error (one line naming it plus a hint at --help).
 */
#ifndef ACX_CLI_CLI_H
#define ACX_CLI_CLI_H

#include "acx/status.h"
#include "cli/args.h" /* the one argv parser: cli_args_*, take_option, is_help */

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* A usage error: "acx <where>: <fmt with arg>" and a hint at the right
 * --help, on stderr. Returns EXIT_USAGE. */
int usage_error(const char *where, const char *fmt, const char *arg);

/* A failed acx call: "acx: <acx_last_error()>" on stderr. Returns EXIT_FAIL. */
int acx_failure(acx_status_t status);

/* A fake environment for the config resolver (cli/env.c): the variables
 * given to tool_env_set, looked up in front of the real environment, or
 * alone (alone = 1: every other variable is unset, so no ACX_* variable,
 * ACX_CONFIG_FILE or HOME's default file is read). Values are borrowed. */
void tool_env_reset(int alone);
void tool_env_set(const char *name, const char *value);
const char *tool_env(const char *name);

/* CPUs this process may run on (its affinity mask, as nproc counts). */
long tool_count_cpus(void);

/* The MPI acx runs with, as a launch/command.h acx_mpi_flavor_t:
 * ACX_MPI_FLAVOR_MPICH for MPICH and Intel MPI, ACX_MPI_FLAVOR_OPENMPI
 * otherwise (MPI_Get_library_version; callable before MPI_Init). */
int tool_mpi_flavor(void);

/* The commands of cli/launch.c and cli/env.c; argv[0] is the command's
 * (or subcommand's) name. */
int cmd_launch(int argc, char **argv);
int cmd_env(int argc, char **argv);
int cmd_config_default(int argc, char **argv);
/* `acx config` without a subcommand: the questions on a terminal, else a
 * usage error that points at `acx config default`. */
int cmd_config_interactive(int argc, char **argv);

#endif /* ACX_CLI_CLI_H */
