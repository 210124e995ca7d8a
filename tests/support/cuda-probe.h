/*
 * cuda-probe.h — the CUDA suites' skip reason: whether the CUDA plugin
 * loads and finds a device, asked in a child process because CUDA
 * initialised in the test process would not survive the fork of each
 * Check test (cudaErrorInitialization); and cuda_proc, the plugin's test
 * hooks by name. Include once, in a suite that
 * links nothing of CUDA itself.
 */
#ifndef MINFER_TEST_CUDA_PROBE_H
#define MINFER_TEST_CUDA_PROBE_H

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "runtime/plugin.h"
#include "testutil.h"

const char *minfer_test_skip_reason(void)
{
    static char why[600];
    int fd[2];
    if (pipe(fd) != 0)
        return "no CUDA device: pipe() failed, cannot probe";
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        char msg[600] = "";
        void *dl = dlopen(MINFER_PLUGIN_DIR "/libminfer-cuda.so", RTLD_NOW | RTLD_LOCAL);
        minfer_plugin_entry_fn e =
            dl ? (minfer_plugin_entry_fn)dlsym(dl, MINFER_PLUGIN_ENTRY_SYMBOL) : NULL;
        uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
        const struct minfer_backend_iface *t = e ? e(&abi, NULL) : NULL;
        if (!t)
            snprintf(msg, sizeof msg, "no CUDA device: the CUDA plugin is unavailable (%.400s)",
                     dl ? "no entry, or the entry refused" : dlerror());
        else if (t->probe(msg, sizeof msg) > 0)
            msg[0] = 0;
        ssize_t w = write(fd[1], msg, strlen(msg) + 1);
        _exit(w > 0 ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = pid > 0 ? read(fd[0], why, sizeof why - 1) : -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    if (n <= 0)
        return "no CUDA device: the probe process failed";
    why[n] = 0;
    return why[0] ? why : NULL;
}

/* A test hook the loaded CUDA plugin lends through get_proc; the test
 * fails when the plugin lacks it. */
static inline void *cuda_proc(struct minfer_runtime *rt, const char *name)
{
    const struct minfer_plugin *p = runtime_find_backend(rt, "cuda");
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(PLUGIN_HAS(p, get_proc), "the CUDA plugin has no get_proc");
    void *f = p->iface->get_proc(name);
    ck_assert_msg(f, "the CUDA plugin lacks %s", name);
    return f;
}

#endif
