/*
 * commands.h — the minfer CLI's subcommands. Each lives in its own
 * tools/cmd-<name>.c and is listed once in main.c's table (struct
 * cli_command, cli-opts.h).
 * A command returns the process exit status (0 ok, 1 failure, 2 usage).
 */
#ifndef MINFER_TOOLS_COMMANDS_H
#define MINFER_TOOLS_COMMANDS_H

int cmd_completion(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_backends(int argc, char **argv);
/* ---- gguf ---- */
int cmd_info(int argc, char **argv);
/* ---- model tools ---- */
#include <stdint.h>
int cmd_quantize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
/* A progress bar on stderr when it is a terminal (user: the label). */
void cli_progress(void *user, uint64_t done, uint64_t total);
/* Catches SIGINT/SIGTERM once: the returned flag becomes nonzero (pass it as
 * the tools' cancel pointer); a second signal kills as usual. */
const volatile int *cli_catch_interrupt(void);

/* ---- tokens ---- */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);

/* ---- models: run, chat, eval, bench ---- */
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv); /* tools/serve/ */

#endif
