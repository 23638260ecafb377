/*
 * base/signal_list.c — the signal names preemption.signals accepts
 * and the parser of its text. See signal_list.h.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/signal_list.h"

const acx_signal_name_t acx_signal_names[ACX_NUM_SIGNAL_NAMES] = {
    {"USR1", SIGUSR1, 0}, {"USR2", SIGUSR2, 0}, {"TERM", SIGTERM, 0},
    {"INT", SIGINT, 1},   {"HUP", SIGHUP, 0},   {"XCPU", SIGXCPU, 0}};

static int fail(char *why, size_t why_len, const char *reason, int len, const char *tok) {
    if (why != NULL && why_len > 0) snprintf(why, why_len, reason, len, tok);
    return -1;
}

int acx_signal_list_parse(const char *text, int *mask, char *why, size_t why_len) {
    int m = 0, none = 0, names = 0;
    if (text == NULL) text = "";
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, ", \t");
        if (len == 0) {
            p++;
            continue;
        }
        const char *tok = p, *name = p;
        size_t nlen = len;
        p += len;
        names++;
        if (len == 4 && strncasecmp(tok, "none", 4) == 0) {
            none = 1;
            continue;
        }
        if (nlen > 3 && strncasecmp(name, "SIG", 3) == 0) {
            name += 3;
            nlen -= 3;
        }
        int found = -1;
        for (int i = 0; i < ACX_NUM_SIGNAL_NAMES && found < 0; i++)
            if (strlen(acx_signal_names[i].name) == nlen &&
                strncasecmp(name, acx_signal_names[i].name, nlen) == 0)
                found = i;
        if (found < 0)
            return fail(why, why_len,
                        "unknown signal '%.*s'; expected comma-separated names among USR1, USR2, "
                        "TERM, INT, HUP, XCPU (SIG prefix and case optional), or none",
                        (int)len, tok);
        m |= 1 << found;
    }
    if (none && names > 1)
        return fail(why, why_len, "'none' cannot be combined with signal names%.*s", 0, "");
    if (names == 0)
        return fail(why, why_len, "no signal named; use 'none' to install no handler%.*s", 0, "");
    *mask = m;
    return 0;
}
