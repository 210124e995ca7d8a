/*
 * main.c — the minfer CLI: dispatches to one subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "minfer/minfer.h"

int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("minfer %s\n", minfer_version());
    return 0;
}

static const struct cli_command commands[] = {
    {"version", "print the library version", cmd_version},
    {"backends", "list backend plugins, their devices or why each was refused", cmd_backends},
    /* ---- gguf ---- */
    {"info", "print a GGUF file's metadata and tensor table", cmd_info},
    /* ---- model tools ---- */
    {"quantize", "convert a GGUF model to another type or quantization mix", cmd_quantize},
    {"synth", "write a random-weight Qwen2/Qwen3 model of a real shape", cmd_synth},
    /* ---- tokens ---- */
    {"tokenize", "print the token ids of a text as a JSON array", cmd_tokenize},
    {"detokenize", "print the text of a list of token ids", cmd_detokenize},
    /* ---- models ---- */
    {"run", "generate text from a prompt (streams; --json for one object)", cmd_run},
    {"chat", "interactive multi-turn chat that keeps the KV cache", cmd_chat},
    {"eval", "write a prompt's logits (f32 rows x n_vocab) to a file", cmd_eval},
    {"bench", "prompt and generation throughput, like llama-bench", cmd_bench},
    {"serve", "OpenAI-compatible HTTP server with continuous batching", cmd_serve},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nminfer COMMAND --help describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "minfer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
