/*
 * cmd-quantize.c — `minfer quantize [--pure] [--allow-requantize] IN OUT TYPE`:
 * converts a GGUF model to another element type or quantization mix
 * (rules in docs/quantize.md), and the progress bar the model tools share.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli-opts.h"
#include "commands.h"
#include "minfer/minfer.h"

/* ---- progress bar ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_progress(void *user, uint64_t done, uint64_t total)
{
    static double t0;
    if (!isatty(STDERR_FILENO))
        return;
    if (t0 == 0)
        t0 = now_s();
    const char *label = user ? user : "";
    double f = total ? (double)done / (double)total : 1.0;
    int w = 40, fill = (int)(f * w);
    double el = now_s() - t0;
    fprintf(stderr, "\r%s [", label);
    for (int i = 0; i < w; i++)
        fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %5.1f%%  %.0f MiB  %.1fs", 100.0 * f, (double)done / 1048576.0, el);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* ---- interruption ---- */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL); /* a second one ends the process */
}

const volatile int *cli_catch_interrupt(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    return &interrupted;
}

/* ---- command ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minfer quantize [options] IN.gguf OUT.gguf TYPE\n"
            "  TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K (plain types)\n"
            "        Q4_K_M Q4_K_S Q5_K_M Q5_K_S (mixes; Q4_K and Q5_K mean the _M mix)\n"
            "An input whose weights are already quantized is refused unless\n"
            "--allow-requantize (it is dequantized first, so any type converts to any\n"
            "other, at a cost in quality). OUT must not be IN (also through a link), and\n"
            "must be a regular file or a new name: a device or FIFO is refused, a symlink\n"
            "is followed to its target. The output appears only once it is complete (an\n"
            "unnamed O_TMPFILE file, linked at the end). See docs/quantize.md.\n");
    cli_print_options(f, CMD_QUANTIZE);
}

int cmd_quantize(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0;
    struct minfer_quantize_opts o = {.struct_size = sizeof o};
    struct cli_args a = {"quantize", CMD_QUANTIZE, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        switch (id) {
        case OPT_HELP: usage(stdout); return cli_stdout_done("quantize");
        case OPT_PURE: o.pure = true; break;
        case OPT_ALLOW_REQUANT: o.allow_requantize = true; break;
        case OPT_THREADS:
            if (!cli_num_i32("quantize", a.opt, v, 1, 4096, &o.n_threads))
                return 2;
            cli_check_threads("quantize", o.n_threads);
            break;
        case CLI_POSITIONAL:
            if (npos == 3)
                return cli_usage_error("quantize", "unexpected argument '%s'", v);
            pos[npos++] = v;
            break;
        default: return 2;
        }
    }
    if (npos != 3)
        return cli_usage_error("quantize", "needs IN.gguf OUT.gguf TYPE");
    if (!minfer_ftype_from_name(pos[2], &o.ftype)) {
        return cli_usage_error("quantize", "unknown TYPE '%s'", pos[2]);
    }
    o.progress = cli_progress;
    o.progress_user = "quantize";
    o.cancel = cli_catch_interrupt();
    char err[1024];
    double t0 = now_s();
    minfer_status st = minfer_quantize(pos[0], pos[1], &o, err, sizeof err);
    if (st != MINFER_OK) {
        if (*o.cancel) {
            fprintf(stderr, "\nminfer quantize: interrupted; no file was written\n");
            return 130;
        }
        fprintf(stderr, "minfer quantize: %s\n", err[0] ? err : minfer_status_str(st));
        return 1;
    }
    fprintf(stderr, "minfer quantize: wrote %s (%s%s) in %.2fs\n", pos[1],
            minfer_ftype_name(o.ftype), o.pure ? ", pure" : "", now_s() - t0);
    return 0;
}
