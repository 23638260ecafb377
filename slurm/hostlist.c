/*
 * slurm/hostlist.c — parsing and expanding Slurm host list expressions.
 *
 * Owns: the grammar below, counting, fetching the i-th host and expanding a
 * whole list. Leaves to others: which variable holds the list and what a
 * malformed one means for a run (launch/env.c), generating lists for
 * sbatch (later). Keeps no global state; a parsed list is read-only and may
 * be shared between threads.
 *
 * Grammar (no whitespace anywhere):
 *
 *   list  := item (',' item)*
 *   item  := (text | group)+             text: any printable but '[' ']' ','
 *   group := '[' range (',' range)* ']'
 *   range := number | number '-' number  (1..18 decimal digits, low <= high)
 *
 * A parsed item is stored as parts, each a literal followed by at most one
 * group: "rack[1-2]-node[01-02]x" is
 *
 *   part 0: "rack" + group 0 {1-2}
 *   part 1: "-node" + group 1 {01-02}
 *   part 2: "x"    (no group)
 *
 * and its hosts are the mixed-radix numbers over the groups' sizes, the
 * first group the most significant digit (Slurm's expansion order): host i
 * of an item with group sizes (2, 2) takes value i / 2 of group 0 and
 * i % 2 of group 1.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "slurm/hostlist.h"

#define MAX_DIGITS 18 /* 10^18 - 1 fits an unsigned long long with room for hi - lo + 1 */

typedef struct hl_range {
    unsigned long long lo, hi;
    int width; /* digits of the low bound as written: the zero padding */
} hl_range_t;

typedef struct hl_group {
    size_t first_range, n_ranges;
    size_t count; /* values in the group, sum of (hi - lo + 1) */
} hl_group_t;

typedef struct hl_part {
    size_t lit_off, lit_len; /* the literal, as a slice of the list's text */
    long group;              /* index into groups[], or -1 */
} hl_part_t;

typedef struct hl_item {
    size_t first_part, n_parts;
    size_t count;   /* hosts: product of its groups' counts */
    size_t max_len; /* longest host name it yields */
} hl_item_t;

struct acx_hostlist {
    char *text;
    size_t count, max_len;
    size_t n_items, n_parts, n_groups, n_ranges;
    /* Each array is sized by the text length, an upper bound for all four
     * (every item, part, group and range consumes at least one character,
     * plus the final part of each item). */
    hl_item_t *items;
    hl_part_t *parts;
    hl_group_t *groups;
    hl_range_t *ranges;
};

/* ---- parsing ---- */

/* Record a syntax error at text[pos]: "host list "<text>", character N: <what>". */
static acx_status_t syntax_error(const char *text, size_t pos, const char *what) {
    size_t len = strlen(text);
    return ACX_ERROR(ACX_ERR_FORMAT, "host list \"%.200s%s\", character %zu: %s", text,
                     len > 200 ? "..." : "", pos + 1, what);
}

static int digits_of(unsigned long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* The number at text[*pos] into *value_p and its digit count into
 * *width_p, advancing *pos past it. `open` is the position of the group's
 * '[' for the "unclosed" message. */
static acx_status_t parse_number(const char *text, size_t *pos, size_t open,
                                 unsigned long long *value_p, int *width_p) {
    size_t p = *pos;
    char what[128];
    if (!isdigit((unsigned char)text[p])) {
        char c = text[p];
        if (c == '\0') return syntax_error(text, open, "'[' is never closed (expected ']')");
        if (c == ']' || c == ',')
            snprintf(what, sizeof what, "empty range before '%c' (expected a number)", c);
        else if (c == '[')
            snprintf(what, sizeof what, "nested '[' (expected a number)");
        else if (isprint((unsigned char)c))
            snprintf(what, sizeof what, "'%c' in a range (expected a number)", c);
        else
            snprintf(what, sizeof what, "byte 0x%02x in a range (expected a number)",
                     (unsigned)(unsigned char)c);
        return syntax_error(text, p, what);
    }
    unsigned long long v = 0;
    int width = 0;
    while (isdigit((unsigned char)text[p])) {
        if (width == MAX_DIGITS) {
            snprintf(what, sizeof what, "number longer than %d digits", MAX_DIGITS);
            return syntax_error(text, *pos, what);
        }
        v = v * 10 + (unsigned long long)(text[p] - '0');
        width++;
        p++;
    }
    *value_p = v;
    *width_p = width;
    *pos = p;
    return ACX_OK;
}

static acx_status_t too_many(const char *text, size_t pos) {
    char what[128];
    snprintf(what, sizeof what, "more than %zu hosts (a typo in a range?)", ACX_HOSTLIST_MAX_HOSTS);
    return syntax_error(text, pos, what);
}

/* The group whose '[' is at text[*pos], appended to hl->groups/ranges;
 * *pos ends past its ']'. */
static acx_status_t parse_group(acx_hostlist_t *hl, size_t *pos) {
    const char *text = hl->text;
    size_t open = *pos, p = *pos + 1;
    hl_group_t *g = &hl->groups[hl->n_groups];
    g->first_range = hl->n_ranges;
    g->n_ranges = 0;
    g->count = 0;
    for (;;) {
        size_t start = p;
        hl_range_t r;
        ACX_CHECK(parse_number(text, &p, open, &r.lo, &r.width));
        r.hi = r.lo;
        if (text[p] == '-') {
            p++;
            int hi_width;
            ACX_CHECK(parse_number(text, &p, open, &r.hi, &hi_width));
            if (r.hi < r.lo) {
                char what[128];
                snprintf(what, sizeof what, "reversed range \"%.*s\" (expected low <= high)",
                         (int)(p - start), text + start);
                return syntax_error(text, start, what);
            }
        }
        if (r.hi - r.lo >= ACX_HOSTLIST_MAX_HOSTS - g->count) return too_many(text, start);
        g->count += (size_t)(r.hi - r.lo + 1);
        hl->ranges[hl->n_ranges++] = r;
        g->n_ranges++;
        if (text[p] == ',') {
            p++;
            continue;
        }
        if (text[p] == ']') break;
        if (text[p] == '\0') return syntax_error(text, open, "'[' is never closed (expected ']')");
        char what[128];
        if (isprint((unsigned char)text[p]))
            snprintf(what, sizeof what, "'%c' after a range (expected ',', '-' or ']')", text[p]);
        else
            snprintf(what, sizeof what, "byte 0x%02x after a range (expected ',', '-' or ']')",
                     (unsigned)(unsigned char)text[p]);
        return syntax_error(text, p, what);
    }
    hl->n_groups++;
    *pos = p + 1;
    return ACX_OK;
}

/* Longest value a group can print: its widest padded or unpadded bound. */
static size_t group_max_len(const acx_hostlist_t *hl, const hl_group_t *g) {
    size_t m = 0;
    for (size_t r = g->first_range; r < g->first_range + g->n_ranges; r++) {
        size_t w = (size_t)hl->ranges[r].width, d = (size_t)digits_of(hl->ranges[r].hi);
        if (w > m) m = w;
        if (d > m) m = d;
    }
    return m;
}

/* Finish the part that began at lit_start (its literal ends at pos). */
static void add_part(acx_hostlist_t *hl, size_t lit_start, size_t pos, long group) {
    hl_part_t *pt = &hl->parts[hl->n_parts++];
    pt->lit_off = lit_start;
    pt->lit_len = pos - lit_start;
    pt->group = group;
}

static acx_status_t parse_list(acx_hostlist_t *hl) {
    const char *text = hl->text;
    size_t pos = 0;
    if (text[0] == '\0') return syntax_error(text, 0, "empty host list (expected a host name)");
    for (;;) {
        size_t item_start = pos, lit_start = pos;
        hl_item_t *it = &hl->items[hl->n_items];
        it->first_part = hl->n_parts;
        it->count = 1;
        it->max_len = 0;
        while (text[pos] != '\0' && text[pos] != ',') {
            unsigned char c = (unsigned char)text[pos];
            if (c == '[') {
                add_part(hl, lit_start, pos, (long)hl->n_groups);
                ACX_CHECK(parse_group(hl, &pos));
                const hl_group_t *g = &hl->groups[hl->n_groups - 1];
                if (it->count > ACX_HOSTLIST_MAX_HOSTS / g->count)
                    return too_many(text, item_start);
                it->count *= g->count;
                it->max_len += group_max_len(hl, g);
                lit_start = pos;
                continue;
            }
            if (c == ']') return syntax_error(text, pos, "']' without a matching '['");
            if (isspace(c) || !isprint(c)) {
                char what[96];
                snprintf(what, sizeof what, "%s 0x%02x (expected a host name character)",
                         isspace(c) ? "whitespace" : "control byte", (unsigned)c);
                return syntax_error(text, pos, what);
            }
            pos++;
        }
        if (pos == item_start)
            return syntax_error(text, pos,
                                text[pos] == ',' ? "empty item before ',' (expected a host name)"
                                                 : "empty item after ',' (expected a host name)");
        add_part(hl, lit_start, pos, -1);
        it->n_parts = hl->n_parts - it->first_part;
        for (size_t i = it->first_part; i < hl->n_parts; i++)
            it->max_len += hl->parts[i].lit_len;
        if (it->count > ACX_HOSTLIST_MAX_HOSTS - hl->count) return too_many(text, item_start);
        hl->count += it->count;
        if (it->max_len > hl->max_len) hl->max_len = it->max_len;
        hl->n_items++;
        if (text[pos] == '\0') return ACX_OK;
        pos++; /* the ',' */
    }
}

acx_status_t acx_hostlist_parse(const char *text, acx_hostlist_t **hl_p) {
    if (text == NULL || hl_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_hostlist_parse: %s is NULL",
                         text == NULL ? "text" : "hl_p");
    acx_status_t status = ACX_ERR_NO_MEMORY;
    size_t len = strlen(text);
    acx_hostlist_t *hl = acx_calloc(1, sizeof *hl, "host list");
    if (hl == NULL) return ACX_ERR_NO_MEMORY;
    hl->text = acx_malloc(len + 1, "host list text");
    /* len + 1 bounds every count: see the struct comment. */
    hl->items = acx_calloc(len + 1, sizeof *hl->items, "host list items");
    hl->parts = acx_calloc(len + 1, sizeof *hl->parts, "host list parts");
    hl->groups = acx_calloc(len + 1, sizeof *hl->groups, "host list groups");
    hl->ranges = acx_calloc(len + 1, sizeof *hl->ranges, "host list ranges");
    if (hl->text == NULL || hl->items == NULL || hl->parts == NULL || hl->groups == NULL ||
        hl->ranges == NULL)
        goto err_free;
    memcpy(hl->text, text, len + 1);
    ACX_CHECK_GOTO(parse_list(hl), status, err_free);
    *hl_p = hl;
    return ACX_OK;

err_free:
    acx_hostlist_destroy(hl);
    return status;
}

void acx_hostlist_destroy(acx_hostlist_t *hl) {
    if (hl == NULL) return;
    free(hl->ranges);
    free(hl->groups);
    free(hl->parts);
    free(hl->items);
    free(hl->text);
    free(hl);
}

/* ---- counting and fetching ---- */

size_t acx_hostlist_count(const acx_hostlist_t *hl) { return hl != NULL ? hl->count : 0; }

size_t acx_hostlist_max_length(const acx_hostlist_t *hl) { return hl != NULL ? hl->max_len : 0; }

/* The value at position `digit` (< g->count) of a group, with its padding. */
static void group_value(const acx_hostlist_t *hl, const hl_group_t *g, size_t digit,
                        unsigned long long *value_p, int *width_p) {
    for (size_t r = g->first_range; r < g->first_range + g->n_ranges; r++) {
        const hl_range_t *rg = &hl->ranges[r];
        unsigned long long n = rg->hi - rg->lo + 1;
        if (digit < n) {
            *value_p = rg->lo + digit;
            *width_p = rg->width;
            return;
        }
        digit -= (size_t)n;
    }
    *value_p = 0; /* unreachable for digit < g->count */
    *width_p = 1;
}

/* Host `idx` (< it->count) of item `it` into dst[cap] (cap > its length),
 * or only its length when dst is NULL. Returns the length. */
static size_t format_host(const acx_hostlist_t *hl, const hl_item_t *it, size_t idx, char *dst,
                          size_t cap) {
    size_t n = 0, rest = it->count;
    for (size_t i = it->first_part; i < it->first_part + it->n_parts; i++) {
        const hl_part_t *pt = &hl->parts[i];
        if (dst != NULL) memcpy(dst + n, hl->text + pt->lit_off, pt->lit_len);
        n += pt->lit_len;
        if (pt->group < 0) continue;
        const hl_group_t *g = &hl->groups[pt->group];
        rest /= g->count; /* hosts per value of this group */
        unsigned long long v;
        int width;
        group_value(hl, g, idx / rest, &v, &width);
        idx %= rest;
        char num[MAX_DIGITS + 2];
        int len = snprintf(num, sizeof num, "%0*llu", width, v);
        if (dst != NULL) memcpy(dst + n, num, (size_t)len);
        n += (size_t)len;
    }
    if (dst != NULL && n < cap) dst[n] = '\0';
    return n;
}

acx_status_t acx_hostlist_get(const acx_hostlist_t *hl, size_t index, char *buf, size_t size) {
    if (hl == NULL || buf == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_hostlist_get: %s is NULL",
                         hl == NULL ? "host list" : "buffer");
    if (index >= hl->count)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_hostlist_get: index %zu out of range for host list \"%.200s\" "
                         "(%zu hosts)",
                         index, hl->text, hl->count);
    const hl_item_t *it = hl->items;
    while (index >= it->count) {
        index -= it->count;
        it++;
    }
    size_t len = format_host(hl, it, index, NULL, 0);
    if (len >= size)
        return ACX_ERROR(ACX_ERR_INVALID_ARG,
                         "acx_hostlist_get: host name of %zu characters does not fit a buffer "
                         "of %zu bytes",
                         len, size);
    format_host(hl, it, index, buf, size);
    return ACX_OK;
}

/* ---- expanding ---- */

acx_status_t acx_hostlist_expand(const char *text, char ***hosts_p, size_t *count_p) {
    if (hosts_p == NULL || count_p == NULL)
        return ACX_ERROR(ACX_ERR_INVALID_ARG, "acx_hostlist_expand: %s is NULL",
                         hosts_p == NULL ? "hosts_p" : "count_p");
    acx_hostlist_t *hl = NULL;
    ACX_CHECK(acx_hostlist_parse(text, &hl));

    /* One block: count pointers, then the NUL-terminated names. */
    size_t bytes = 0;
    for (size_t i = 0; i < hl->n_items; i++)
        for (size_t j = 0; j < hl->items[i].count; j++)
            bytes += format_host(hl, &hl->items[i], j, NULL, 0) + 1;
    char **hosts = acx_malloc(hl->count * sizeof *hosts + bytes, "expanded host list");
    if (hosts == NULL) {
        acx_hostlist_destroy(hl);
        return ACX_ERR_NO_MEMORY;
    }
    char *s = (char *)(hosts + hl->count), *end = s + bytes;
    size_t k = 0;
    for (size_t i = 0; i < hl->n_items; i++)
        for (size_t j = 0; j < hl->items[i].count; j++) {
            hosts[k++] = s;
            s += format_host(hl, &hl->items[i], j, s, (size_t)(end - s)) + 1;
        }
    *hosts_p = hosts;
    *count_p = hl->count;
    acx_hostlist_destroy(hl);
    return ACX_OK;
}
