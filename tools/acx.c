/*
 * tools/acx.c — the `acx` program: main() around the library's command
 * line (acx/cli.h; the commands are in cli/). It sees only the installed
 * public headers and links libacx like any user program.
 */
#include "acx/cli.h"

int main(int argc, char **argv) { return acx_cli_main(argc, argv); }
