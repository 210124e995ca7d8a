/*
 * outfile.h — how every writer of the library creates an output file
 * (quantize and synth through the GGUF writer, session files): the path
 * must be a regular file or a new name (a device, FIFO, socket or
 * directory is refused, so `-o /dev/full` never turns into a regular
 * file); a symlink is followed to its target, which is replaced and the
 * link kept. The data goes to an unnamed O_TMPFILE beside the target and
 * is linked in only when complete, so a killed writer leaves nothing
 * behind (a named temporary is the fallback where O_TMPFILE or /proc is
 * missing). docs/decisions/output-files.md says why.
 */
#ifndef MINFER_CORE_OUTFILE_H
#define MINFER_CORE_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "minfer/ir.h"

struct outfile {
    int fd;                  /* write here; -1 when closed */
    bool anon;               /* an O_TMPFILE without a name until commit */
    char target[4096];       /* where the file appears (a symlink resolved) */
    char tmp[4096 + 64];     /* the temporary's path (/proc/self/fd/N when anon) */
};

/* Applies the path rule to path; *target gets where the data will go.
 * MINFER_ERR_INVALID_ARG naming the kind of file when refused. */
minfer_status outfile_check(const char *path, char *target, size_t target_len, char *err,
                            size_t err_len);
/* outfile_check, then a temporary beside the target opened for writing. */
minfer_status outfile_open(struct outfile *f, const char *path, char *err, size_t err_len);
/* fsync, put the file at its target (atomically replacing an old one),
 * fsync the directory. Closes f->fd. On failure nothing is left behind. */
minfer_status outfile_commit(struct outfile *f, char *err, size_t err_len);
/* Closes and removes the temporary (a no-op after commit). */
void outfile_abort(struct outfile *f);

#endif
