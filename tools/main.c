/*
 * main.c — the minfer CLI: dispatches to one subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "cli-opts.h"
#include "commands.h"
#include "minfer/minfer.h"

int cmd_version(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-h") && strcmp(argv[1], "--help"))
        return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
    int major = 0, minor = 0;
    minfer_plugin_abi(&major, &minor);
    printf("minfer %s (plugin ABI %d.%d)\n", minfer_version(), major, minor);
    return cli_stdout_done("version");
}

const struct cli_command cli_commands[] = {
    {"version", "print the library version (also minfer --version, -V)", cmd_version,
     CMD_VERSION},
    {"backends", "list backend plugins, their devices or why each was refused", cmd_backends,
     CMD_BACKENDS},
    /* ---- gguf ---- */
    {"info", "print a GGUF file's metadata and tensor table", cmd_info, CMD_INFO},
    /* ---- model tools ---- */
    {"quantize", "convert a GGUF model to another type or quantization mix", cmd_quantize,
     CMD_QUANTIZE},
    {"synth", "write a random-weight Qwen2/Qwen3 model of a real shape", cmd_synth, CMD_SYNTH},
    /* ---- tokens ---- */
    {"tokenize", "print the token ids of a text as a JSON array", cmd_tokenize, CMD_TOKENIZE},
    {"detokenize", "print the text of a list of token ids", cmd_detokenize, CMD_DETOKENIZE},
    /* ---- models ---- */
    {"run", "generate text from a prompt (streams; --json for one object)", cmd_run, CMD_RUN},
    {"chat", "interactive multi-turn chat that keeps the KV cache", cmd_chat, CMD_CHAT},
    {"eval", "write a prompt's logits (f32 rows x n_vocab) to a file", cmd_eval, CMD_EVAL},
    {"bench", "prompt and generation throughput, like llama-bench", cmd_bench, CMD_BENCH},
    {"serve", "OpenAI-compatible HTTP server with continuous batching", cmd_serve, CMD_SERVE},
    /* ---- shell ---- */
    {"completion", "print a bash or zsh completion script (minfer completion bash)",
     cmd_completion, CMD_COMPLETION},
};
const unsigned cli_command_count = sizeof cli_commands / sizeof cli_commands[0];

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer COMMAND [options]\n"
               "       minfer --version | -V | --help | -h\n\ncommands:\n");
    for (unsigned i = 0; i < cli_command_count; i++)
        fprintf(f, "  %-12s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(f, "\nminfer COMMAND --help lists each command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return cli_stdout_done("help");
    }
    if (!strcmp(c, "-V") || !strcmp(c, "--version"))
        return cmd_version(1, argv + 1);
    for (unsigned i = 0; i < cli_command_count; i++)
        if (!strcmp(c, cli_commands[i].name))
            return cli_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "minfer: unknown command '%s' (see 'minfer --help')\n", c);
    return 2;
}
