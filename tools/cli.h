/* Helpers the sift command line's files share (defined in sift.c). */
#ifndef SIFT_CLI_H
#define SIFT_CLI_H

#include "sift.h"

#include <stdbool.h>

/* A whole decimal integer. */
bool cli_parse_i64(const char *s, int64_t *out);
/* "off" (SIFT_SEL_CACHE_OFF) or a Selection Cache threshold in [-1, 1]. */
bool cli_parse_sel_cache(const char *val, float *out);
/* The named backend, or the first available of cuda, vulkan, cpu when name is NULL. */
sift_status cli_open_backend(const char *name, sift_context **ctx);
/* `sift eval` (tools/eval.c). */
int cli_eval(int argc, char **argv);

#endif
