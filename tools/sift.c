/* The sift command line: its commands, one file each (tools/meson.build lists them), and its
 * options, declared once in tools/options.c. Uses only the public API (sift.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: sift <command> [options]\n"
          "\n"
          "commands:\n"
          "  demo         the retrieval model the repository ships, on 4K-token prompts: answers,\n"
          "               accuracy, KV bytes read per step and speed of dense, tokenselect, quest and\n"
          "               streaming attention (run it from the repository root)\n"
          "  run          generate text from a GGUF model (llama, qwen2, mistral)\n"
          "  chat         chat with a model in its chat template, one message per line of stdin\n"
          "               (sift run -cnv is the same)\n"
          "  logits       write a model's per-step logits as JSON lines (for tests)\n"
          "  tokenize     print the token ids of a text file, one line of decimal ids (the predictor\n"
          "               trainer reads text through it)\n"
          "  eval         quality of every selection policy at given budgets: perplexity and agreement\n"
          "               with dense on a text, retrieval accuracy, attention recall and error\n"
          "  bench-attn   time one layer's decode attention, dense vs the selection pipeline, per stage\n"
          "  bench-decode time a model's decode steps at long contexts, dense vs selected attention\n"
          "  devices      list the backends, their devices, the one each would use, and the automatic choice,\n"
          "               with what sift would use of each Vulkan device (--json: as JSON; --profiles: the\n"
          "               Vulkan device profiles SIFT_VULKAN_PROFILE selects)\n"
          "  help         this text; 'sift <command> --help' for a command's options\n"
          "  --version    print the version\n",
          f);
}

/* The commands by name. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"run", cli_run},
    {"chat", cli_chat},
    {"logits", cli_logits},
    {"eval", cli_eval},
    {"demo", cli_demo},
    {"bench-attn", cli_bench_attn},
    {"bench-decode", cli_bench_decode},
    {"devices", cli_devices},
    {"tokenize", cli_tokenize},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("sift %s\n", sift_version());
        return 0;
    }
    for (int i = 2; !strcmp(cmd, "run") && i < argc; i++) /* llama.cpp's conversation mode */
        if (!strcmp(argv[i], "-cnv") || !strcmp(argv[i], "--conversation")) return cli_chat(argc - 2, argv + 2);
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
        if (!strcmp(cmd, commands[c].name)) return commands[c].run(argc - 2, argv + 2);
    fprintf(stderr, "sift: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
