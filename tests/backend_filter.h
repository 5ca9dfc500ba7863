/* SIFT_TEST_BACKENDS=cpu,vulkan restricts the test programs to the listed backends: the others are
 * skipped with a message. Unset or empty: every backend runs (each still skips where it cannot be
 * opened, unless SIFT_EXPECT_BACKENDS lists it). The CPU reference still runs where a test
 * compares another backend with it. A name that is no backend ends the program (exit 2), so that
 * a typo cannot skip everything unnoticed. */
#ifndef SIFT_TEST_BACKEND_FILTER_H
#define SIFT_TEST_BACKEND_FILTER_H

#include "sift.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NULL when kind is to be tested; else why not, for the skip message. */
static inline const char *test_backend_excluded(sift_backend_kind kind)
{
    const char *list = getenv("SIFT_TEST_BACKENDS");
    if (!list || !*list) return NULL;
    bool listed = false;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        sift_backend_kind k;
        if (len == 0 || len >= sizeof name || sift_backend_kind_parse(name, &k) != SIFT_OK) {
            fprintf(stderr, "SIFT_TEST_BACKENDS=%s: '%.*s' is not a backend (cpu, vulkan, cuda)\n", list, (int)len, p);
            exit(2);
        }
        listed = listed || k == kind;
        p += len;
        if (*p == ',') p++;
    }
    return listed ? NULL : "not in SIFT_TEST_BACKENDS";
}

#endif
