/*
 * cmd-quantize.c — `minfer quantize [--pure] IN OUT TYPE [--threads N]`:
 * converts a GGUF model to another element type or quantization mix
 * (rules in docs/quantize.md), and the progress bar the model tools share.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
            "usage: minfer quantize [--pure] [--threads N] IN.gguf OUT.gguf TYPE\n"
            "  TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K (plain types)\n"
            "        Q4_K_M Q4_K_S Q5_K_M Q5_K_S (mixes; Q4_K and Q5_K mean the _M mix)\n"
            "  --pure       every 2-D weight gets exactly TYPE (1-D tensors stay F32)\n"
            "  --threads N  worker threads (default: all CPUs)\n"
            "Quantized inputs are dequantized first, so any type converts to any other.\n"
            "The output appears only once it is complete. See docs/quantize.md.\n");
}

int cmd_quantize(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0;
    struct minfer_quantize_opts o = {.struct_size = sizeof o};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--pure")) {
            o.pure = true;
        } else if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t")) {
            char *end;
            if (i + 1 >= argc || (o.n_threads = (int32_t)strtol(argv[i + 1], &end, 10)) < 1 ||
                *end) {
                fprintf(stderr, "minfer quantize: --threads needs a positive number\n");
                return 2;
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "minfer quantize: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = argv[i];
        } else {
            fprintf(stderr, "minfer quantize: unexpected argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (npos != 3) {
        usage(stderr);
        return 2;
    }
    if (!minfer_ftype_from_name(pos[2], &o.ftype)) {
        fprintf(stderr, "minfer quantize: unknown TYPE '%s'\n", pos[2]);
        usage(stderr);
        return 2;
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
