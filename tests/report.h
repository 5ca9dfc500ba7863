/* The reporting of every test program, so that every test's log reads the same (made in testutil.c;
 * link it). One line per check: what was checked, the backend it ran on ("host" for checks of host
 * code), then "ok" or "FAIL" (with a value, its metric and bound where report() is used). A program
 * ends with test_summary()'s line:
 *   summary: suite S, backend B: C cases, N checks, F failures, U not supported; validation messages: V
 * Scripts read it (.ci/gpu-all greps '^summary') and the word FAIL. */
#ifndef SIFT_TEST_REPORT_H
#define SIFT_TEST_REPORT_H

#include "sift.h"

#include <stdbool.h>
#include <stdint.h>

extern int n_cases, n_checks, n_failures, n_unsupported;
extern int64_t n_validation_messages;
/* A check with a measured value against its bound, as the conformance cases print it. */
void report(const char *case_name, const char *backend_name, const char *metric, double value, double bound, bool ok);
/* A check that failed, with why. */
void fail(const char *case_name, const char *backend_name, const char *what);
/* The case and backend a failed call is reported under (test_case_begin sets them). */
extern const char *running_case, *running_backend;
/* A check whose outcome is ok; what is a printf format. Returns ok. */
bool test_check(bool ok, const char *backend, const char *what, ...) __attribute__((format(printf, 3, 4)));
/* The same with the measured value beside it (what it means is in the description). */
bool test_check_value(bool ok, const char *backend, double value, const char *what, ...)
    __attribute__((format(printf, 4, 5)));
/* A check that prints only when it fails, "<case> <backend> FAIL: <what>" (for programs of many
 * small checks whose passing lines would say nothing); counted either way. Returns ok. */
bool test_require(bool ok, const char *backend, const char *what, ...) __attribute__((format(printf, 3, 4)));
/* Starts a case: the checks after it, up to the next, are counted as one case in the summary, and
 * TRY reports a failed call under its name and backend. */
void test_case_begin(const char *name, const char *backend);
/* A line that is neither a check nor the summary: what a case measured, or why it was skipped. */
void test_note(const char *backend, const char *what, ...) __attribute__((format(printf, 2, 3)));
/* Adds the context's Vulkan validation messages to the summary's count (each fails the program)
 * and destroys it; NULL is ignored. */
void test_context_done(sift_context *ctx);
/* Prints the closing line (backend NULL: the backends that checks ran on, in order, or "host" where
 * every check was of host code) and gives the exit status: 1 after a failed check or a validation
 * message, else 0. */
int test_summary(const char *suite, const char *backend);

#endif
