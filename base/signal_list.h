/*
 * base/signal_list.h — the signal names preemption.signals accepts,
 * and the parser of its text ("USR1,TERM", "sigusr1 SIGTERM", "none").
 *
 * Owns: the list of names (USR1, USR2, TERM, INT, HUP, XCPU) and what a
 * second arrival of each does. Leaves to others: installing handlers and
 * acting on them (runtime/preempt.c), where the text came from and how an
 * error is worded for it (base/config.c, runtime/preempt.c). Pure:
 * no state, no signals touched, so the config layer can check a value long
 * before acx_init installs anything.
 */
#ifndef ACX_BASE_SIGNAL_LIST_H
#define ACX_BASE_SIGNAL_LIST_H

#include <stddef.h>

/* One nameable signal. repeat_ends: a second one while a stop is pending
 * takes the default action (INT only: an impatient Ctrl-C still works). */
typedef struct acx_signal_name {
    const char *name; /* without the SIG prefix, upper case */
    int sig;
    int repeat_ends;
} acx_signal_name_t;

#define ACX_NUM_SIGNAL_NAMES 6

/* The nameable signals, ACX_NUM_SIGNAL_NAMES of them; bit i of a mask from
 * acx_signal_list_parse stands for entry i. */
extern const acx_signal_name_t acx_signal_names[ACX_NUM_SIGNAL_NAMES];

/*
 * Parse a list of signal names separated by commas and/or blanks; each name
 * case-insensitive, with or without the SIG prefix; or the single word
 * "none". On success returns 0 and sets *mask (bit i = acx_signal_names[i];
 * 0 for "none"). On failure returns -1 and writes the reason to why (e.g.
 * "unknown signal 'KILL'; expected ..."), *mask untouched. why may be NULL.
 */
int acx_signal_list_parse(const char *text, int *mask, char *why, size_t why_len);

#endif
