/* SIFT_TEST_BACKENDS=cpu,vulkan restricts the test programs to the listed backends: the others are
 * skipped with a message. Unset or empty: every backend runs (each still skips where it cannot be
 * opened, unless SIFT_EXPECT_BACKENDS lists it). The CPU reference still runs where a test
 * compares another backend with it. A name that is no backend ends the program (exit 2), so that
 * a typo cannot skip everything unnoticed. */
#ifndef SIFT_TEST_BACKEND_FILTER_H
#define SIFT_TEST_BACKEND_FILTER_H

#include "sift.h"
#include "report.h" /* test_case_begin, test_summary */

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

/* Whether the model file a test was given exists; where not, prints the skip line. */
static inline bool test_model_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skipped %s: not found\n", path);
        return false;
    }
    fclose(f);
    return true;
}

/* A context of backend kind for a test, or NULL after a line (led by label: a model's name, or "")
 * saying why the backend is skipped: SIFT_TEST_BACKENDS, or the backend's own error. The CPU
 * reference of a comparison passes reference = true: it runs whatever the filter says. */
static inline sift_context *test_context_open(sift_backend_kind kind, const char *label, bool reference)
{
    const char *excluded = reference ? NULL : test_backend_excluded(kind);
    sift_context *ctx = NULL;
    if (excluded || sift_context_create(kind, &ctx) != SIFT_OK) {
        printf("%-18s %-7s skipped: %s\n", label, sift_backend_kind_name(kind), excluded ? excluded : sift_last_error());
        return NULL;
    }
    return ctx;
}

/* The body of main() of a test (suite) of one model file on every backend: run(kind, path) for
 * each, a case apiece where it checked anything (a backend run skips reports nothing), then the
 * closing line (report.h); 77 (skipped) without the file, 2 without an argument. */
static inline int test_main_one_model(int argc, char **argv, const char *suite,
                                      void (*run)(sift_backend_kind kind, const char *path))
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    if (!test_model_exists(argv[1])) return 77;
    for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
        const int checks_before = n_checks;
        test_case_begin(argv[1], sift_backend_kind_name((sift_backend_kind)kind));
        run((sift_backend_kind)kind, argv[1]);
        if (n_checks == checks_before) n_cases--; /* skipped: no case ran */
    }
    return test_summary(suite, NULL);
}

#endif
