/* `sift tokenize`: the token ids of a text file. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const cli_command tokenize_command = {
    "tokenize", CLI_TOKENIZE, "-m MODEL.gguf -f TEXT [--no-bos] [--special]",
    "Prints the token ids of TEXT (BOS first unless --no-bos), space-separated, on one line.\n", NULL};

/* sift tokenize -m MODEL -f FILE [--no-bos]: the ids of the file's text on one line. */
int cli_tokenize(int argc, char **argv)
{
    cli_params p = cli_params_default(&tokenize_command);
    int rc = 0;
    if (!cli_parse(&tokenize_command, argc, argv, &p, &rc)) return rc;
    const char *model = p.model, *file = p.prompt_file;
    const int add_bos = !p.no_bos, parse_special = p.special;
    if (!model || !file) {
        fprintf(stderr, "sift tokenize: needs -m MODEL and -f FILE\n");
        return 2;
    }
    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) {
        fprintf(stderr, "sift tokenize: cannot read '%s': %s\n", file, cli_read_error(errno));
        return 1;
    }
    sift_context *ctx;
    sift_model *m;
    if (cli_open_model("sift tokenize", "cpu", 1, false, model, &ctx, &m) != 0) {
        free(text);
        return 1;
    }
    const size_t cap = 4 * len + 8; /* a byte may become several tokens (a space without a "▁" piece: three) */
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    const sift_status st = ids ? sift_model_tokenize_special(m, text, len, add_bos, parse_special, ids, cap, &n) : SIFT_E_NOMEM;
    if (st != SIFT_OK) fprintf(stderr, "sift tokenize: %s\n", sift_last_error());
    for (size_t i = 0; st == SIFT_OK && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (st == SIFT_OK) printf("\n");
    free(ids);
    free(text);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    return st == SIFT_OK ? 0 : 1;
}
