/*
 * slurm/hostlist.h — Slurm host list expressions (library-private).
 *
 * Slurm writes node sets compactly: "node[01-04,07]" is node01 node02
 * node03 node04 node07; "a[1-3],b,c[5,7-8]" is a list of such items; newer
 * Slurm allows several bracket groups in one name, "rack[1-2]-node[01-02]",
 * meaning their cartesian product with the first group varying slowest
 * (rack1-node01 rack1-node02 rack2-node01 rack2-node02). A number keeps the
 * zero padding of its range's first bound: "[08-10]" is 08 09 10, "[8-10]"
 * is 8 9 10. Duplicates are kept, in the order written (as Slurm's own
 * hostlist_create does).
 *
 * Parse once, then count or fetch the i-th host without expanding; or expand
 * the whole list into one allocation. A list holds at most
 * ACX_HOSTLIST_MAX_HOSTS hosts: a typo such as "n[0-99999999]" is an error,
 * not a gigabyte of names.
 */
#ifndef ACX_SLURM_HOSTLIST_H
#define ACX_SLURM_HOSTLIST_H

#include <stddef.h>

#include "acx/status.h"

#define ACX_HOSTLIST_MAX_HOSTS ((size_t)1 << 20)

typedef struct acx_hostlist acx_hostlist_t; /* opaque; owns a copy of the text */

/* Parse `text` (no whitespace) into *hl_p, which the caller frees with
 * acx_hostlist_destroy. Returns ACX_ERR_FORMAT, naming the text, the
 * 1-based character and what was expected, for: an empty list or item
 * ("a,,b"), unbalanced or nested brackets, an empty or non-numeric range,
 * a reversed range ("[5-3]"), whitespace or a control character, a number
 * of more than 18 digits, and more than ACX_HOSTLIST_MAX_HOSTS hosts;
 * ACX_ERR_INVALID_ARG for NULL arguments; ACX_ERR_NO_MEMORY. */
acx_status_t acx_hostlist_parse(const char *text, acx_hostlist_t **hl_p);

/* Number of hosts (>= 1 for a parsed list; 0 for NULL). */
size_t acx_hostlist_count(const acx_hostlist_t *hl);

/* Length (without the NUL) of the longest host name in the list. */
size_t acx_hostlist_max_length(const acx_hostlist_t *hl);

/* Write host `index` (0-based, in expansion order) into buf[size] as a
 * NUL-terminated string. ACX_ERR_INVALID_ARG if index >= count or the name
 * does not fit (size must exceed its length); buf is written only on
 * success. */
acx_status_t acx_hostlist_get(const acx_hostlist_t *hl, size_t index, char *buf, size_t size);

/* Free a parsed list (NULL is fine). */
void acx_hostlist_destroy(acx_hostlist_t *hl);

/* Parse and expand `text` in one call. On success *hosts_p is an array of
 * *count_p host names in one block of memory (the pointers, then the
 * strings): release everything with a single free(*hosts_p). Statuses as
 * acx_hostlist_parse. */
acx_status_t acx_hostlist_expand(const char *text, char ***hosts_p, size_t *count_p);

#endif /* ACX_SLURM_HOSTLIST_H */
