/* Makes a local folder answer renames and hard links as Cloud Storage FUSE (gcsfuse) does.
 *
 * Built by `ncf-pipelines verify` (vertex_emulator/gcsfuse.py) and put on LD_PRELOAD of every
 * process it starts, so the rule holds for every caller in the process: Python's os module,
 * TensorFlow's C++ file system, Beam, anything that calls libc. The folder is the one named by
 * NCF_VERIFY_GCS_DIR (the /gcs/ mount's stand-in); paths outside it are not touched.
 *
 * Under that folder, as on a gcsfuse mount of a flat-namespace bucket with its default
 * --rename-dir-limit 0 (gcsfuse docs/semantics.md and cmd flags; the kernel's FUSE rename):
 *   - rename/renameat/renameat2 of a directory fail with ENOSYS ("Function not implemented");
 *   - renameat2 with flags (RENAME_EXCHANGE, RENAME_NOREPLACE, ...) fails with EINVAL, the
 *     kernel's answer for a FUSE file system without rename2 support;
 *   - a rename between the folder and elsewhere fails with EXDEV (another file system);
 *   - link/linkat fail with ENOSYS (gcsfuse has no hard links);
 *   - a file rename still works (gcsfuse copies the object, then deletes the old one).
 * Calls made with syscall(2) directly, not through libc, are not intercepted.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOUNT "/gcs/"

static char root[PATH_MAX];      /* NCF_VERIFY_GCS_DIR, without a trailing slash. */
static char real_root[PATH_MAX]; /* The same, symlinks resolved. */

__attribute__((constructor)) static void init(void) {
    const char *dir = getenv("NCF_VERIFY_GCS_DIR");
    if (dir == NULL || dir[0] != '/' || strlen(dir) >= sizeof(root)) return;
    strcpy(root, dir);
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') root[--n] = '\0';
    if (realpath(root, real_root) == NULL) strcpy(real_root, root);
}

static int starts_with_dir(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return n > 0 && strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Whether `path` (relative to `dirfd`) lies under the stand-in folder or the /gcs/ mount path. */
static int on_gcs(int dirfd, const char *path) {
    if (root[0] == '\0' || path == NULL) return 0;
    char full[PATH_MAX * 2];
    if (path[0] == '/') {
        snprintf(full, sizeof(full), "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof(base)) == NULL) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
            ssize_t len = readlink(link, base, sizeof(base) - 1);
            if (len < 0) return 0;
            base[len] = '\0';
        }
        snprintf(full, sizeof(full), "%s/%s", base, path);
    }
    return starts_with_dir(full, root) || starts_with_dir(full, real_root) ||
           strncmp(full, MOUNT, strlen(MOUNT)) == 0;
}

static int is_dir(int dirfd, const char *path) {
    struct stat st;
    return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* The errno gcsfuse would answer, or 0 to let the call through. */
static int refused(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                   unsigned int flags) {
    int from = on_gcs(olddirfd, oldpath), to = on_gcs(newdirfd, newpath);
    if (!from && !to) return 0;
    if (from != to) return EXDEV;
    if (flags != 0) return EINVAL;
    if (is_dir(olddirfd, oldpath)) return ENOSYS;
    return 0;
}

typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned int);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*linkat_fn)(int, const char *, int, const char *, int);
typedef int (*link_fn)(const char *, const char *);

int rename(const char *oldpath, const char *newpath) {
    int err = refused(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
    if (err) {
        errno = err;
        return -1;
    }
    return ((rename_fn)dlsym(RTLD_NEXT, "rename"))(oldpath, newpath);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    int err = refused(olddirfd, oldpath, newdirfd, newpath, 0);
    if (err) {
        errno = err;
        return -1;
    }
    return ((renameat_fn)dlsym(RTLD_NEXT, "renameat"))(olddirfd, oldpath, newdirfd, newpath);
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned int flags) {
    int err = refused(olddirfd, oldpath, newdirfd, newpath, flags);
    if (err) {
        errno = err;
        return -1;
    }
    renameat2_fn next = (renameat2_fn)dlsym(RTLD_NEXT, "renameat2");
    if (next == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return next(olddirfd, oldpath, newdirfd, newpath, flags);
}

int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags) {
    if (on_gcs(olddirfd, oldpath) || on_gcs(newdirfd, newpath)) {
        errno = on_gcs(olddirfd, oldpath) == on_gcs(newdirfd, newpath) ? ENOSYS : EXDEV;
        return -1;
    }
    return ((linkat_fn)dlsym(RTLD_NEXT, "linkat"))(olddirfd, oldpath, newdirfd, newpath, flags);
}

int link(const char *oldpath, const char *newpath) {
    if (on_gcs(AT_FDCWD, oldpath) || on_gcs(AT_FDCWD, newpath)) {
        errno = on_gcs(AT_FDCWD, oldpath) == on_gcs(AT_FDCWD, newpath) ? ENOSYS : EXDEV;
        return -1;
    }
    return ((link_fn)dlsym(RTLD_NEXT, "link"))(oldpath, newpath);
}
