/*
 * outfile.c — output files that appear only when complete and never
 * replace anything but a regular file (see outfile.h).
 */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"

static const char *kind_of(mode_t m)
{
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISDIR(m))
        return "a directory";
    return "not a regular file";
}

minfer_status outfile_check(const char *path, char *target, size_t target_len, char *err,
                            size_t err_len)
{
    if (!path || !*path || strlen(path) >= target_len)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "no usable output path");
    struct stat sb;
    if (lstat(path, &sb) < 0) {
        if (errno != ENOENT)
            return errf(err, err_len, MINFER_ERR_IO, "%s: %s", path, strerror(errno));
        snprintf(target, target_len, "%s", path); /* a new name */
        return MINFER_OK;
    }
    if (S_ISLNK(sb.st_mode)) {
        char real[PATH_MAX];
        if (!realpath(path, real))
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "%s is a symlink whose target cannot be used (%s); name a regular "
                        "file or a new name", path, strerror(errno));
        if (stat(real, &sb) < 0)
            return errf(err, err_len, MINFER_ERR_IO, "%s: %s", real, strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "%s is a symlink to %s, which is %s; minfer writes only regular files",
                        path, real, kind_of(sb.st_mode));
        if (strlen(real) >= target_len)
            return errf(err, err_len, MINFER_ERR_INVALID_ARG, "%s: path too long", real);
        snprintf(target, target_len, "%s", real);
        return MINFER_OK;
    }
    if (!S_ISREG(sb.st_mode))
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "%s is %s; minfer writes only regular files (or a new name)", path,
                    kind_of(sb.st_mode));
    snprintf(target, target_len, "%s", path);
    return MINFER_OK;
}

static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* A fresh name beside target (for the fallback temporary and the
 * moment between linkat and rename). */
static void temp_name(const char *target, char *out, size_t n)
{
    static _Atomic unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, n, "%s.tmp-%ld-%u-%lx", target, (long)getpid(), counter++,
             (unsigned long)ts.tv_nsec);
}

minfer_status outfile_open(struct outfile *f, const char *path, char *err, size_t err_len)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    minfer_status st = outfile_check(path, f->target, sizeof f->target, err, err_len);
    if (st != MINFER_OK)
        return st;
    char dir[sizeof f->target];
    dir_of(f->target, dir, sizeof dir);
    /* a replaced file keeps its permissions */
    struct stat sb;
    mode_t keep = stat(f->target, &sb) == 0 ? (sb.st_mode & 07777) : (mode_t)-1;
#ifdef O_TMPFILE
    /* an unnamed file: nothing to clean up if the process dies; linking it
     * later needs /proc (linkat with AT_EMPTY_PATH needs a capability) */
    if (access("/proc/self/fd", X_OK) == 0) {
        f->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (f->fd >= 0) {
            f->anon = true;
            snprintf(f->tmp, sizeof f->tmp, "/proc/self/fd/%d", f->fd);
            if (keep != (mode_t)-1)
                fchmod(f->fd, keep);
            return MINFER_OK;
        }
    }
#endif
    for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
        temp_name(f->target, f->tmp, sizeof f->tmp);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd < 0 && errno != EEXIST)
            break;
    }
    if (f->fd < 0)
        return errf(err, err_len, MINFER_ERR_IO, "cannot create a temporary file in %s: %s",
                    dir, strerror(errno));
    if (keep != (mode_t)-1)
        fchmod(f->fd, keep);
    return MINFER_OK;
}

minfer_status outfile_commit(struct outfile *f, char *err, size_t err_len)
{
    minfer_status st = MINFER_OK;
    if (fsync(f->fd) < 0) {
        st = errf(err, err_len, MINFER_ERR_IO, "fsync: %s", strerror(errno));
        goto fail;
    }
    char named[sizeof f->tmp];
    if (f->anon) {
        int rc = -1;
        for (int tries = 0; rc < 0 && tries < 100; tries++) {
            temp_name(f->target, named, sizeof named);
            rc = linkat(AT_FDCWD, f->tmp, AT_FDCWD, named, AT_SYMLINK_FOLLOW);
            if (rc < 0 && errno != EEXIST)
                break;
        }
        if (rc < 0) {
            st = errf(err, err_len, MINFER_ERR_IO, "cannot link the finished file into %s: %s",
                      f->target, strerror(errno));
            goto fail;
        }
    } else {
        snprintf(named, sizeof named, "%s", f->tmp);
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) < 0) {
        st = errf(err, err_len, MINFER_ERR_IO, "close: %s", strerror(errno));
        unlink(named);
        goto fail;
    }
    if (rename(named, f->target) < 0) {
        st = errf(err, err_len, MINFER_ERR_IO, "rename of %s: %s", named, strerror(errno));
        unlink(named);
        goto fail;
    }
    f->tmp[0] = 0;
    char dir[sizeof f->target];
    dir_of(f->target, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return MINFER_OK;
fail:
    outfile_abort(f);
    return st;
}

void outfile_abort(struct outfile *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (!f->anon && f->tmp[0])
        unlink(f->tmp);
    f->tmp[0] = 0;
}
