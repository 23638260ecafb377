/*
 * tests/unit/test_hostlist.c — Slurm host list expressions (slurm/hostlist.c),
 * single process.
 *
 * Every expected host name and error position below is written out by hand
 * from Slurm's documented expansion rules (scontrol show hostnames gives the
 * same lists), not computed by the code under test.
 */
#include "tests/acx_test.h"

#include "slurm/hostlist.h"

/* ---- helpers ---- */

/* Expand `text` and compare against the NULL-terminated list `want`; also
 * fetch every host through acx_hostlist_get and check the count. Returns 1
 * when everything matches. */
static int expands_to(const char *text, const char *const *want) {
    size_t n_want = 0;
    while (want[n_want] != NULL)
        n_want++;
    char **hosts = NULL;
    size_t count = 0;
    acx_hostlist_t *hl = NULL;
    int ok = 0;
    if (acx_hostlist_expand(text, &hosts, &count) != ACX_OK) {
        fprintf(stderr, "\nexpand(\"%s\") failed: %s\n", text, acx_last_error());
        return 0;
    }
    if (acx_hostlist_parse(text, &hl) != ACX_OK) goto out;
    if (count != n_want || acx_hostlist_count(hl) != n_want) {
        fprintf(stderr, "\n\"%s\": %zu hosts (get: %zu), expected %zu\n", text, count,
                acx_hostlist_count(hl), n_want);
        goto out;
    }
    for (size_t i = 0; i < n_want; i++) {
        char buf[64];
        if (strcmp(hosts[i], want[i]) != 0 || acx_hostlist_get(hl, i, buf, sizeof buf) != ACX_OK ||
            strcmp(buf, want[i]) != 0) {
            fprintf(stderr, "\n\"%s\" host %zu: expand \"%s\", get \"%s\", expected \"%s\"\n", text,
                    i, hosts[i], buf, want[i]);
            goto out;
        }
    }
    ok = 1;
out:
    acx_hostlist_destroy(hl);
    free(hosts);
    return ok;
}

/* Parsing `text` fails with ACX_ERR_FORMAT and exactly this message after
 * the "file:line: " prefix; *hl_p is left alone. */
static int fails_with(const char *text, const char *message) {
    acx_hostlist_t *hl = (acx_hostlist_t *)&hl; /* sentinel: must stay unchanged */
    acx_status_t st = acx_hostlist_parse(text, &hl);
    const char *msg = acx_last_error();
    const char *body = strstr(msg, ": host list");
    if (st != ACX_ERR_FORMAT || hl != (acx_hostlist_t *)&hl ||
        strstr(msg, "slurm/hostlist.c:") == NULL || body == NULL ||
        strcmp(body + 2, message) != 0) {
        fprintf(stderr, "\nparse(\"%s\") returned %d, message:\n  %s\nexpected:\n  %s\n", text,
                (int)st, msg, message);
        return 0;
    }
    /* expand reports the same error and writes nothing. */
    char **hosts = (char **)&hosts;
    size_t count = 12345;
    if (acx_hostlist_expand(text, &hosts, &count) != ACX_ERR_FORMAT || count != 12345 ||
        hosts != (char **)&hosts || strstr(acx_last_error(), message) == NULL)
        return 0;
    return 1;
}

/* ---- expansion ---- */

static int test_ranges(void) {
    TESTING("ranges and lists inside one bracket group");
    CHECK(expands_to("node[01-04,07]",
                     (const char *[]){"node01", "node02", "node03", "node04", "node07", NULL}));
    CHECK(expands_to("n[3]", (const char *[]){"n3", NULL}));
    CHECK(expands_to("n[5,1,3-4]", (const char *[]){"n5", "n1", "n3", "n4", NULL}));
    CHECK(expands_to("n[1-2,2]", (const char *[]){"n1", "n2", "n2", NULL})); /* kept */
    CHECK(expands_to("[3-5]", (const char *[]){"3", "4", "5", NULL}));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_padding(void) {
    TESTING("zero padding follows the first bound's width");
    CHECK(expands_to("n[8-10]", (const char *[]){"n8", "n9", "n10", NULL}));
    CHECK(expands_to("n[08-10]", (const char *[]){"n08", "n09", "n10", NULL}));
    CHECK(expands_to("n[098-101]", (const char *[]){"n098", "n099", "n100", "n101", NULL}));
    CHECK(expands_to("n[0-1]", (const char *[]){"n0", "n1", NULL}));
    CHECK(expands_to("n[007,9]", (const char *[]){"n007", "n9", NULL}));
    /* Only the low bound's width counts; the high bound's zeros do not. */
    CHECK(expands_to("n[9-0011]", (const char *[]){"n9", "n10", "n11", NULL}));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_cartesian(void) {
    TESTING("several groups in a name: cartesian product, first slowest");
    CHECK(expands_to(
        "rack[1-2]-node[01-02]",
        (const char *[]){"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02", NULL}));
    CHECK(expands_to("a[1-2]b[3,5]c", (const char *[]){"a1b3c", "a1b5c", "a2b3c", "a2b5c", NULL}));
    CHECK(expands_to("x[1-2][0-1]", (const char *[]){"x10", "x11", "x20", "x21", NULL}));
    CHECK(expands_to("r[1-3]s[7]", (const char *[]){"r1s7", "r2s7", "r3s7", NULL}));
    /* Random access into a large product: host 1234 of r[00-99]n[000-099] is
     * r12 (1234 / 100) n034 (1234 % 100). */
    acx_hostlist_t *hl = NULL;
    char buf[16];
    CHECK_OK(acx_hostlist_parse("r[00-99]n[000-099]", &hl));
    CHECK(acx_hostlist_count(hl) == 10000);
    CHECK(acx_hostlist_max_length(hl) == 7);
    CHECK_OK(acx_hostlist_get(hl, 1234, buf, sizeof buf));
    CHECK(strcmp(buf, "r12n034") == 0);
    CHECK_OK(acx_hostlist_get(hl, 9999, buf, sizeof buf));
    CHECK(strcmp(buf, "r99n099") == 0);
    acx_hostlist_destroy(hl);
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_lists(void) {
    TESTING("top-level lists and single hosts");
    CHECK(expands_to("a[1-3],b,c[5,7-8]",
                     (const char *[]){"a1", "a2", "a3", "b", "c5", "c7", "c8", NULL}));
    CHECK(expands_to("login01", (const char *[]){"login01", NULL}));
    CHECK(expands_to("a,a", (const char *[]){"a", "a", NULL}));
    CHECK(expands_to("gpu-a100.cluster_x", (const char *[]){"gpu-a100.cluster_x", NULL}));
    CHECK(expands_to("n1-[2-3],m", (const char *[]){"n1-2", "n1-3", "m", NULL}));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_get(void) {
    TESTING("get: index across items, bounds, buffer size");
    acx_hostlist_t *hl = NULL;
    char buf[8];
    CHECK_OK(acx_hostlist_parse("a[1-3],bb,c[10-11]", &hl));
    CHECK(acx_hostlist_count(hl) == 6);
    CHECK(acx_hostlist_max_length(hl) == 3);
    CHECK_OK(acx_hostlist_get(hl, 3, buf, sizeof buf));
    CHECK(strcmp(buf, "bb") == 0);
    CHECK_OK(acx_hostlist_get(hl, 5, buf, sizeof buf));
    CHECK(strcmp(buf, "c11") == 0);
    CHECK_STATUS(acx_hostlist_get(hl, 6, buf, sizeof buf), ACX_ERR_INVALID_ARG,
                 "index 6 out of range for host list \"a[1-3],bb,c[10-11]\" (6 hosts)");
    /* "c11" needs 4 bytes; a 3-byte buffer is refused and left alone. */
    strcpy(buf, "zz");
    CHECK_STATUS(acx_hostlist_get(hl, 5, buf, 3), ACX_ERR_INVALID_ARG,
                 "host name of 3 characters does not fit a buffer of 3 bytes");
    CHECK(strcmp(buf, "zz") == 0);
    CHECK_OK(acx_hostlist_get(hl, 5, buf, 4));
    CHECK(strcmp(buf, "c11") == 0);
    CHECK_STATUS(acx_hostlist_get(NULL, 0, buf, 4), ACX_ERR_INVALID_ARG, "host list is NULL");
    CHECK(acx_hostlist_count(NULL) == 0);
    acx_hostlist_destroy(hl);
    acx_hostlist_destroy(NULL);
    CHECK_STATUS(acx_hostlist_parse(NULL, &hl), ACX_ERR_INVALID_ARG, "text is NULL");
    CHECK_STATUS(acx_hostlist_parse("a", NULL), ACX_ERR_INVALID_ARG, "hl_p is NULL");
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

/* ---- errors ---- */

static int test_syntax_errors(void) {
    TESTING("malformed lists: exact message and character");
    CHECK(fails_with("", "host list \"\", character 1: empty host list (expected a host name)"));
    CHECK(fails_with("node[1-3",
                     "host list \"node[1-3\", character 5: '[' is never closed (expected ']')"));
    CHECK(fails_with("node[1-3,",
                     "host list \"node[1-3,\", character 5: '[' is never closed (expected ']')"));
    CHECK(
        fails_with("node1-3]", "host list \"node1-3]\", character 8: ']' without a matching '['"));
    CHECK(fails_with("node[5-3]", "host list \"node[5-3]\", character 6: reversed range \"5-3\" "
                                  "(expected low <= high)"));
    CHECK(fails_with("n[1,10-09]", "host list \"n[1,10-09]\", character 5: reversed range "
                                   "\"10-09\" (expected low <= high)"));
    CHECK(fails_with("a,,b", "host list \"a,,b\", character 3: empty item before ',' (expected "
                             "a host name)"));
    CHECK(fails_with(",a", "host list \",a\", character 1: empty item before ',' (expected a "
                           "host name)"));
    CHECK(fails_with("a,", "host list \"a,\", character 3: empty item after ',' (expected a "
                           "host name)"));
    CHECK(fails_with("n[a-c]", "host list \"n[a-c]\", character 3: 'a' in a range (expected a "
                               "number)"));
    CHECK(fails_with("n[1-c]", "host list \"n[1-c]\", character 5: 'c' in a range (expected a "
                               "number)"));
    CHECK(fails_with("n[]", "host list \"n[]\", character 3: empty range before ']' (expected a "
                            "number)"));
    CHECK(fails_with("n[1,]", "host list \"n[1,]\", character 5: empty range before ']' "
                              "(expected a number)"));
    CHECK(fails_with("n[1-]", "host list \"n[1-]\", character 5: empty range before ']' "
                              "(expected a number)"));
    CHECK(fails_with("n[,1]", "host list \"n[,1]\", character 3: empty range before ',' "
                              "(expected a number)"));
    CHECK(fails_with("n[[1]]", "host list \"n[[1]]\", character 3: nested '[' (expected a "
                               "number)"));
    CHECK(fails_with("n[1x]", "host list \"n[1x]\", character 4: 'x' after a range (expected "
                              "',', '-' or ']')"));
    CHECK(fails_with("n[1-2-3]", "host list \"n[1-2-3]\", character 6: '-' after a range "
                                 "(expected ',', '-' or ']')"));
    CHECK(fails_with("a b", "host list \"a b\", character 2: whitespace 0x20 (expected a host "
                            "name character)"));
    CHECK(fails_with("a\tb", "host list \"a\tb\", character 2: whitespace 0x09 (expected a host "
                             "name character)"));
    CHECK(fails_with("n[1234567890123456789]", "host list \"n[1234567890123456789]\", "
                                               "character 3: number longer than 18 digits"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

static int test_cap(void) {
    TESTING("at most 1<<20 hosts, counted without expanding");
    acx_hostlist_t *hl = NULL;
    char buf[16];
    CHECK(ACX_HOSTLIST_MAX_HOSTS == 1048576);
    CHECK_OK(acx_hostlist_parse("n[0-1048575]", &hl));
    CHECK(acx_hostlist_count(hl) == 1048576);
    CHECK_OK(acx_hostlist_get(hl, 1048575, buf, sizeof buf));
    CHECK(strcmp(buf, "n1048575") == 0);
    acx_hostlist_destroy(hl);
    CHECK(fails_with("n[0-1048576]", "host list \"n[0-1048576]\", character 3: more than "
                                     "1048576 hosts (a typo in a range?)"));
    CHECK(fails_with("n[0-99999999999999]", "host list \"n[0-99999999999999]\", character 3: "
                                            "more than 1048576 hosts (a typo in a range?)"));
    /* 1024 x 1025 > 1<<20 only as a product. */
    CHECK(fails_with("a[0-1023]b[0-1024]", "host list \"a[0-1023]b[0-1024]\", character 1: "
                                           "more than 1048576 hosts (a typo in a range?)"));
    /* 1<<20 hosts, then one more item. */
    CHECK(fails_with("a[0-1048575],b", "host list \"a[0-1048575],b\", character 14: more than "
                                       "1048576 hosts (a typo in a range?)"));
    /* Ranges of one group add up: 2 x 524288 + 1. */
    CHECK(fails_with("n[0-524287,0-524287,7]", "host list \"n[0-524287,0-524287,7]\", "
                                               "character 21: more than 1048576 hosts (a typo "
                                               "in a range?)"));
    PASSED();
    return 0;
error:
    FAILED();
    return 1;
}

int main(void) {
    acx_test_watchdog(60);
    int failed = 0;
    failed += test_ranges();
    failed += test_padding();
    failed += test_cartesian();
    failed += test_lists();
    failed += test_get();
    failed += test_syntax_errors();
    failed += test_cap();
    if (failed) printf("%d hostlist case(s) FAILED\n", failed);
    return failed ? 1 : 0;
}
