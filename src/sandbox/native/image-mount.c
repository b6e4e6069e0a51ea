/*
 * slotpool image mounter (root, or a non-root server in its own user namespace): the mount
 * steps that make a slot's root an image (src/sandbox/images/, docs/images.md). Runs in
 * `serve` mode, one request per stdin line, fields separated by tabs, answers "ok", "ok <n>"
 * or "err <message>":
 *
 *   userns <owner_uid> <owner_gid> <uid_map> <gid_map>
 *     A user namespace owned by <owner_uid> (a slot's host uid: bubblewrap, running as that
 *     uid, may join it with --userns), its maps written here as root: "in:out:count[,…]".
 *     Held as a file descriptor of this process: answers "ok <fd>" (others open it as
 *     /proc/<pid>/fd/<fd>). No process runs in it until a sandbox joins it.
 *   keep <src> [<userns_fd>]
 *     A read-only (nosuid, nodev) detached clone of <src> (open_tree), id-mapped through
 *     <userns_fd> when given (on-disk id N appears as that namespace's outside id of N):
 *     an image layer as one slot reads it. Held as a descriptor: "ok <fd>". Never attached
 *     to any mount table, so the slots' namespaces (copies of the server's) do not grow.
 *   overlay <target> <upper> <work> <lower>...
 *     overlayfs at <target> (stacked on what is there), lowers top first through "lowerdir+"
 *     (a lower may be /proc/self/fd/<fd> of a `keep`), nosuid and nodev; userxattr when
 *     this process is in a user namespace (a non-root server's own).
 *   umount <target>
 *     Detaches every overlayfs stacked at <target> (none is fine), never what lies beneath.
 *   drop <fd>
 *     Closes a descriptor of `userns` or `keep`.
 *   whiteouts <dir> <trusted|user>
 *     Turns an unpacked OCI layer's whiteouts into overlayfs ones: `.wh.NAME` becomes a
 *     character device 0/0 named NAME, `.wh..wh..opq` the directory's `<ns>.overlay.opaque`
 *     xattr. Nothing is followed (no symlink of the layer is ever resolved). "ok <count>".
 *   probe <dir>
 *     Whether overlayfs takes a detached mount as a layer here (Linux 6.15+).
 *
 * Why C: Node has no mount, setns or xattr calls, and util-linux 2.38 has neither id-mapped
 * mounts nor lowerdir+.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <linux/mount.h>

#ifndef FSCONFIG_SET_STRING
#define FSCONFIG_SET_STRING 1
#endif
#ifndef FSCONFIG_SET_FLAG
#define FSCONFIG_SET_FLAG 0
#endif
#ifndef FSCONFIG_CMD_CREATE
#define FSCONFIG_CMD_CREATE 6
#endif

#define OVERLAYFS_MAGIC 0x794c7630

static char last_error[1024];
static char answer_extra[64];

static int fail(const char *what, const char *arg) {
  snprintf(last_error, sizeof last_error, "%s %s: %s", what, arg ? arg : "", strerror(errno));
  return 1;
}

/* "in:out:count,in:out:count" -> "in out count\n..." (what uid_map takes); -1 when malformed. */
static int map_lines(const char *spec, char *out, size_t cap) {
  size_t len = 0;
  const char *p = spec;
  while (*p) {
    unsigned long a, b, c;
    char *end;
    a = strtoul(p, &end, 10);
    if (*end != ':') return -1;
    b = strtoul(end + 1, &end, 10);
    if (*end != ':') return -1;
    c = strtoul(end + 1, &end, 10);
    if (*end != ',' && *end != 0) return -1;
    int n = snprintf(out + len, cap - len, "%lu %lu %lu\n", a, b, c);
    if (n < 0 || (size_t)n >= cap - len) return -1;
    len += (size_t)n;
    p = *end ? end + 1 : end;
  }
  return len > 0 ? 0 : -1;
}

/* Writes the whole text in one write(2): a map must be written at once. */
static int write_once(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int do_userns(char **a) {
  uid_t owner = (uid_t)strtoul(a[0], NULL, 10);
  gid_t group = (gid_t)strtoul(a[1], NULL, 10);
  char umap[2048], gmap[2048];
  if (map_lines(a[2], umap, sizeof umap) < 0 || map_lines(a[3], gmap, sizeof gmap) < 0) {
    errno = EINVAL;
    return fail("userns: malformed map", a[2]);
  }
  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) return fail("pipe", NULL);
  pid_t pid = fork();
  if (pid < 0) return fail("fork", NULL);
  if (pid == 0) {
    char c = 0;
    close(ready[0]);
    close(go[1]);
    /* The namespace's owner is the euid of its creator: the slot's uid, so that bubblewrap
     * running as that uid (no capability in the initial namespace) may join it. */
    if (setgroups(0, NULL) < 0 || setresgid(group, group, group) < 0 || setresuid(owner, owner, owner) < 0) _exit(1);
    if (unshare(CLONE_NEWUSER) < 0) _exit(2);
    (void)!write(ready[1], &c, 1);
    /* Stay until the parent holds the namespace (the pipe closes). */
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  int fd = -1, rc = 0;
  if (read(ready[0], &c, 1) != 1) {
    errno = EPERM;
    rc = fail("userns: the child could not create a user namespace as uid", a[0]);
  } else {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    if (write_once(path, umap) < 0) rc = fail("writing uid_map", a[2]);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    if (rc == 0 && write_once(path, gmap) < 0) rc = fail("writing gid_map", a[3]);
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    if (rc == 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) rc = fail("open", path);
  }
  close(ready[0]);
  close(go[1]);
  waitpid(pid, NULL, 0);
  if (rc) return rc;
  snprintf(answer_extra, sizeof answer_extra, "%d", fd);
  return 0;
}

static int do_keep(char **a, int n) {
  int ns = -1;
  if (n == 2) {
    char *end;
    ns = (int)strtol(a[1], &end, 10);
    if (*end || ns < 3) {
      errno = EBADF;
      return fail("keep: not a user namespace of this helper:", a[1]);
    }
  }
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, a[0], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return fail("open_tree", a[0]);
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ns >= 0 ? MOUNT_ATTR_IDMAP : 0);
  if (ns >= 0) attr.userns_fd = (unsigned)ns;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
    fail(ns >= 0 ? "mount_setattr (id-mapped, read-only)" : "mount_setattr (read-only)", a[0]);
    close(t);
    return 1;
  }
  snprintf(answer_extra, sizeof answer_extra, "%d", t);
  return 0;
}

/* Whether this process runs in a user namespace other than the initial one. */
static int in_user_namespace(void) {
  static int known = -1;
  if (known >= 0) return known;
  unsigned inside = 0, outside = 0, count = 0;
  FILE *f = fopen("/proc/self/uid_map", "re");
  known = !(f && fscanf(f, "%u %u %u", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 && count == 4294967295u);
  if (f) fclose(f);
  return known;
}

static int do_overlay(char **a, int n) {
  const char *target = a[0], *upper = a[1], *work = a[2];
  int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
  if (fs < 0) return fail("fsopen", "overlay");
  int rc = 0;
  for (int i = 3; i < n && rc == 0; i++)
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+", a[i], 0) < 0) rc = fail("overlay lower layer", a[i]);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0) rc = fail("overlay upperdir", upper);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0) rc = fail("overlay workdir", work);
  if (rc == 0 && in_user_namespace() && syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) rc = fail("overlay userxattr", NULL);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) rc = fail("creating overlayfs with upper", upper);
  int m = -1;
  if (rc == 0 && (m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) rc = fail("fsmount", upper);
  close(fs);
  if (rc == 0 && syscall(SYS_move_mount, m, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("mounting overlayfs at", target);
  if (m >= 0) close(m);
  return rc;
}

static int is_overlay(const char *path) {
  struct statfs st;
  return statfs(path, &st) == 0 && (unsigned long)st.f_type == OVERLAYFS_MAGIC;
}

static int do_umount(char **a) {
  /* Only overlayfs: the slot's disk bound (its tmpfs bound onto the workspace) lies beneath.
   * EINVAL: not a mount point (a data dir on an overlayfs root, as in Docker). */
  for (int i = 0; i < 64 && is_overlay(a[0]); i++) {
    if (umount2(a[0], MNT_DETACH) < 0) {
      if (errno == EINVAL || errno == ENOENT) return 0;
      return fail("umount", a[0]);
    }
  }
  return 0;
}

static int do_drop(char **a) {
  char *end;
  long fd = strtol(a[0], &end, 10);
  if (*end || fd < 3) {
    errno = EBADF;
    return fail("drop: not a descriptor of this helper:", a[0]);
  }
  close((int)fd);
  return 0;
}

/* The layer's whiteout markers, collected first (the walk must not see its own changes). */
static char **marks;
static size_t nmarks, capmarks;
static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  if (type != FTW_F && type != FTW_SL && type != FTW_SLN) return 0;
  if (strncmp(path + ftw->base, ".wh.", 4) != 0) return 0;
  if (nmarks == capmarks) {
    capmarks = capmarks ? capmarks * 2 : 64;
    char **more = realloc(marks, capmarks * sizeof *marks);
    if (!more) return -1;
    marks = more;
  }
  if (!(marks[nmarks] = strdup(path))) return -1;
  nmarks++;
  return 0;
}

static int do_whiteouts(char **a) {
  const char *ns = a[1];
  if (strcmp(ns, "trusted") != 0 && strcmp(ns, "user") != 0) {
    errno = EINVAL;
    return fail("whiteouts: xattr namespace must be trusted or user, not", ns);
  }
  char opaque[64];
  snprintf(opaque, sizeof opaque, "%s.overlay.opaque", ns);
  nmarks = 0;
  /* FTW_PHYS: symlinks are reported, never followed; FTW_MOUNT: never leave the layer's filesystem. */
  if (nftw(a[0], collect, 64, FTW_PHYS | FTW_MOUNT) != 0) return fail("walking the layer", a[0]);
  int rc = 0;
  unsigned converted = 0;
  for (size_t i = 0; i < nmarks; i++) {
    char *path = marks[i];
    char *slash = strrchr(path, '/');
    const char *name = slash + 5;
    if (rc == 0) {
      if (unlink(path) < 0) rc = fail("unlink", path);
      else if (strcmp(name, ".wh..opq") == 0) {
        /* `.wh..wh..opq`: the directory hides what lower layers have in it. */
        *slash = 0;
        if (lsetxattr(path, opaque, "y", 1, 0) < 0) rc = fail("setting the opaque xattr on", path);
      } else {
        /* `.wh.NAME`: a character device 0/0 named NAME (nothing there in this layer). */
        memmove(slash + 1, name, strlen(name) + 1);
        struct stat st;
        if (lstat(path, &st) == 0) {
          /* The layer has NAME too: the whiteout only hides lower layers' NAME, which it does. */
        } else if (mknod(path, S_IFCHR | 0, makedev(0, 0)) < 0) rc = fail("mknod (whiteout)", path);
      }
      if (rc == 0) converted++;
    }
    free(path);
  }
  nmarks = 0;
  if (rc) return rc;
  snprintf(answer_extra, sizeof answer_extra, "%u", converted);
  return 0;
}

static int do_probe(char **a) {
  char l[512], u[512], w[512], p[64], wi[600];
  snprintf(l, sizeof l, "%s/l", a[0]), snprintf(u, sizeof u, "%s/u", a[0]), snprintf(w, sizeof w, "%s/w", a[0]);
  if ((mkdir(a[0], 0700) < 0 && errno != EEXIST) || mkdir(l, 0700) < 0 || mkdir(u, 0700) < 0 || mkdir(w, 0700) < 0) return fail("probe: mkdir in", a[0]);
  int rc = 0, fs = -1, t = (int)syscall(SYS_open_tree, AT_FDCWD, l, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) rc = fail("open_tree", l);
  snprintf(p, sizeof p, "/proc/self/fd/%d", t);
  if (rc == 0 && (fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC)) < 0) rc = fail("fsopen", "overlay");
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+", p, 0) < 0) rc = fail("overlay lowerdir+ of a detached mount", NULL);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", u, 0) < 0) rc = fail("overlay upperdir", u);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", w, 0) < 0) rc = fail("overlay workdir", w);
  if (rc == 0 && in_user_namespace() && syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) rc = fail("overlay userxattr", NULL);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) rc = fail("overlayfs over a detached mount", NULL);
  if (fs >= 0) close(fs);
  if (t >= 0) close(t);
  snprintf(wi, sizeof wi, "%s/work", w);
  rmdir(wi), rmdir(w), rmdir(u), rmdir(l), rmdir(a[0]);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2 || strcmp(argv[1], "serve") != 0) {
    fprintf(stderr, "usage: image-mount serve (requests on stdin, see the source)\n");
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Every slot's handle of every layer it used is a descriptor here: as many as the hard limit allows. */
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  while ((n = getline(&line, &cap, stdin)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = 0;
    char *args[600];
    int count = 0;
    for (char *tok = strtok(line, "\t"); tok && count < 600; tok = strtok(NULL, "\t")) args[count++] = tok;
    int rc;
    last_error[0] = answer_extra[0] = 0;
    if (count == 5 && strcmp(args[0], "userns") == 0) rc = do_userns(args + 1);
    else if ((count == 2 || count == 3) && strcmp(args[0], "keep") == 0) rc = do_keep(args + 1, count - 1);
    else if (count >= 5 && strcmp(args[0], "overlay") == 0) rc = do_overlay(args + 1, count - 1);
    else if (count == 2 && strcmp(args[0], "umount") == 0) rc = do_umount(args + 1);
    else if (count == 2 && strcmp(args[0], "drop") == 0) rc = do_drop(args + 1);
    else if (count == 3 && strcmp(args[0], "whiteouts") == 0) rc = do_whiteouts(args + 1);
    else if (count == 2 && strcmp(args[0], "probe") == 0) rc = do_probe(args + 1);
    else {
      snprintf(last_error, sizeof last_error, "bad request (%d fields)", count);
      rc = 1;
    }
    if (rc == 0) printf(answer_extra[0] ? "ok %s\n" : "ok\n", answer_extra);
    else printf("err %s\n", last_error);
  }
  free(line);
  return 0;
}
