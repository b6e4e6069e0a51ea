/*
 * slotpool fork mounter (root, or a non-root server in its own user namespace): the mount
 * steps of POST /fork (see src/sandbox/fork/fork.ts and docs/fork.md). Runs in `serve` mode, one
 * request per stdin line, fields separated by tabs, answers "ok" or "err <message>":
 *
 *   idmap <src> <mountpoint> <from_uid> <to_uid> <from_gid> <to_gid>
 *     A read-only clone of <src> at <mountpoint>, id-mapped so that files owned by
 *     <from_uid>/<from_gid> (the slot that wrote a layer) appear owned by <to_uid>/<to_gid>
 *     (the slot that reads it): no chown, no copy, O(1). The mapping user namespace is made
 *     once per id pair and kept.
 *   overlay <target> <upper> <work> <lower>...
 *     overlayfs at <target>, stacked on whatever is mounted there, lower layers top first,
 *     given one by one (fsconfig "lowerdir+": no length limit, no escaping of ':' or ',').
 *     userxattr inside a user namespace (a non-root server's own). A lower may be a layer
 *     handle of `keep` (/proc/<pid>/fd/<n>: overlayfs takes its own private clone of it).
 *   overlay-detached <upper> <work> <lower>...
 *     The same overlayfs, not attached anywhere: held as a descriptor of this helper,
 *     answered "ok <fd>" (a `seal` of this helper may name it /proc/self/fd/<fd>).
 *   attach <fd> <target>
 *     That overlay in place of the one on top of <target> (a fork view the slot had):
 *     mounted beneath it (MOVE_MOUNT_BENEATH, Linux 6.5), then the old one detached, so the
 *     stack at <target> does not grow fork after fork. Answers "ok stacked" where the kernel
 *     cannot mount beneath (then it is put on top, as `overlay` does).
 *   attach-top <fd> <target>
 *     That overlay on top of <target> (a fork child's new view, put over the bind of its
 *     new disk once the child's processes are dead: nothing beneath is to be detached).
 *   close <fd>
 *     Drops an overlay of `overlay-detached` that is not to be attached.
 *   keep <src>
 *     A read-only detached clone of <src> (open_tree), held as a file descriptor of this
 *     process and never attached to any mount table: a layer's handle, which keeps the layer
 *     (and the slot disk it lies on) alive after that disk is replaced by a reset. Answers
 *     "ok <fd>"; others name it /proc/<pid>/fd/<fd>. Needs Linux 6.15 (overlayfs taking
 *     detached mounts as layers); `probe` tells.
 *   keep-idmap <src> <from_uid> <to_uid> <from_gid> <to_gid>
 *     The same as an id-mapped clone (see idmap); <src> may be a handle of `keep`.
 *   drop <fd>
 *     Closes a handle of `keep`, in a thread of its own (closing the last reference to a
 *     reset slot disk frees its files there, not in the request loop).
 *   probe <dir>
 *     Whether overlayfs takes a detached mount by /proc/self/fd path here (scratch dirs in
 *     <dir>, removed after): "ok" or "err <why>".
 *   seal <pid> <source>
 *     In the mount namespace of <pid> (the slot's terminal namespace): makes the mount at
 *     /workspace read-only (EBUSY while a process holds a file of it open for writing:
 *     nothing changes then), then mounts a clone of <source> (this namespace's mount at
 *     the slot's workspace) on top of it. Processes whose cwd or open files are on the old
 *     mount keep them, read-only: what the old mount holds cannot change any more.
 *   bind <src> <mountpoint>
 *     A read-only clone of <src> at <mountpoint>: a layer's handle of its own, which keeps
 *     the layer (and the slot disk it lies on) alive after that disk is replaced by a reset.
 *   umount <path>
 *     Detaches the mount at <path> (lazily: a mount in use stays alive for its users).
 *   umount-bg <path>
 *     The same in a detached grandchild, not waited for: when it drops the last reference to
 *     a filesystem (a reset slot disk only a layer still held), the kernel frees its files
 *     in the context of the process that dropped it.
 *
 * Why C: Node has no mount syscalls, and util-linux 2.38 has neither id-mapped mounts nor
 * lowerdir+.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <linux/nsfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
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

#ifndef MOVE_MOUNT_BENEATH
#define MOVE_MOUNT_BENEATH 0x00000200
#endif

static char last_error[1024];
/* Appended to "ok" (a kept handle's fd, or "stacked"). */
static char answer_extra[64];

static int fail(const char *what, const char *arg) {
  snprintf(last_error, sizeof last_error, "%s %s: %s", what, arg ? arg : "", strerror(errno));
  return 1;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace whose maps say: on-disk id <from> is <to>. Returns its fd. */
static int make_idmap_userns(unsigned from_uid, unsigned to_uid, unsigned from_gid, unsigned to_gid) {
  int sync_pipe[2];
  if (pipe2(sync_pipe, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    char c;
    if (unshare(CLONE_NEWUSER) < 0) _exit(1);
    close(sync_pipe[1]);
    (void)!read(sync_pipe[0], &c, 1);
    _exit(0);
  }
  close(sync_pipe[0]);
  char path[64], map[96];
  int fd = -1;
  for (int tries = 0; tries < 2000; tries++) {
    char self[64], child[64];
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    ssize_t a = readlink("/proc/self/ns/user", self, sizeof self - 1);
    ssize_t b = readlink(path, child, sizeof child - 1);
    if (a > 0 && b > 0) {
      self[a] = child[b] = 0;
      if (strcmp(self, child) != 0) break;
    }
    usleep(50);
  }
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  snprintf(map, sizeof map, "%u %u 1\n", from_uid, to_uid);
  if (write_file(path, map) < 0) goto out;
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
  snprintf(map, sizeof map, "%u %u 1\n", from_gid, to_gid);
  if (write_file(path, map) < 0) goto out;
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
out:
  close(sync_pipe[1]);
  waitpid(pid, NULL, 0);
  return fd;
}

/* Mapping namespaces by id pair: a fork of 8 children reuses them (each costs a fork). */
static struct { unsigned fu, tu, fg, tg; int fd; } maps[256];
static int nmaps;

static int idmap_userns(unsigned fu, unsigned tu, unsigned fg, unsigned tg) {
  for (int i = 0; i < nmaps; i++)
    if (maps[i].fu == fu && maps[i].tu == tu && maps[i].fg == fg && maps[i].tg == tg) return maps[i].fd;
  int fd = make_idmap_userns(fu, tu, fg, tg);
  if (fd >= 0 && nmaps < (int)(sizeof maps / sizeof maps[0])) {
    maps[nmaps].fu = fu, maps[nmaps].tu = tu, maps[nmaps].fg = fg, maps[nmaps].tg = tg, maps[nmaps].fd = fd;
    nmaps++;
  }
  return fd;
}

/* A detached read-only clone of <src> id-mapped <from> -> <to> (a[0..4] = src, fu, tu, fg, tg); -1 on failure. */
static int idmapped_clone(char **a) {
  const char *src = a[0];
  unsigned fu = strtoul(a[1], NULL, 10), tu = strtoul(a[2], NULL, 10);
  unsigned fg = strtoul(a[3], NULL, 10), tg = strtoul(a[4], NULL, 10);
  int ns = idmap_userns(fu, tu, fg, tg);
  if (ns < 0) return fail("creating the id-mapping user namespace", NULL), -1;
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return fail("open_tree", src), -1;
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = (unsigned)ns;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
    fail("mount_setattr (id-mapped mount)", src);
    close(t);
    return -1;
  }
  return t;
}

static int do_idmap(char **a) {
  char *b[5] = {a[0], a[2], a[3], a[4], a[5]};
  int t = idmapped_clone(b);
  if (t < 0) return 1;
  int rc = 0;
  if (syscall(SYS_move_mount, t, "", AT_FDCWD, a[1], MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("move_mount", a[1]);
  close(t);
  return rc;
}

static int do_keep_idmap(char **a) {
  int t = idmapped_clone(a);
  if (t < 0) return 1;
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

/* overlayfs of a[0] upper, a[1] work, a[2..n) lowers as a detached mount; its fd, or -1. */
static int make_overlay(char **a, int n) {
  const char *upper = a[0], *work = a[1];
  int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
  if (fs < 0) return fail("fsopen", "overlay"), -1;
  int rc = 0;
  for (int i = 2; i < n && rc == 0; i++)
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+", a[i], 0) < 0) rc = fail("overlay lower layer", a[i]);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0) rc = fail("overlay upperdir", upper);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0) rc = fail("overlay workdir", work);
  if (rc == 0 && in_user_namespace() && syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) rc = fail("overlay userxattr", NULL);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) rc = fail("creating overlayfs with upper", upper);
  int m = -1;
  if (rc == 0 && (m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) fail("fsmount", upper);
  close(fs);
  return m;
}

static int do_overlay(char **a, int n) {
  int m = make_overlay(a + 1, n - 1);
  if (m < 0) return 1;
  int rc = 0;
  if (syscall(SYS_move_mount, m, "", AT_FDCWD, a[0], MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("mounting overlayfs at", a[0]);
  close(m);
  return rc;
}

static int do_overlay_detached(char **a, int n) {
  int m = make_overlay(a, n);
  if (m < 0) return 1;
  snprintf(answer_extra, sizeof answer_extra, "%d", m);
  return 0;
}

/* attach <fd> <target>: the detached mount <fd> in place of the mount on top of <target>. */
static int do_attach(char **a) {
  int m = atoi(a[0]);
  const char *target = a[1];
  int rc = 0;
  if (m < 3) {
    errno = EBADF;
    return fail("attach: not a mount of this helper:", a[0]);
  }
  if (syscall(SYS_move_mount, m, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_BENEATH) == 0) {
    /* In place beneath the old one: detach the old (lazily: a process of the server's
     * namespace inside it keeps it). */
    if (umount2(target, MNT_DETACH) < 0) rc = fail("detaching the old view at", target);
  } else {
    snprintf(answer_extra, sizeof answer_extra, "stacked");
    if (syscall(SYS_move_mount, m, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("mounting overlayfs at", target);
  }
  close(m);
  return rc;
}

/* attach-top <fd> <target>: the detached mount <fd> on top of <target>. */
static int do_attach_top(char **a) {
  int m = atoi(a[0]);
  if (m < 3) {
    errno = EBADF;
    return fail("attach-top: not a mount of this helper:", a[0]);
  }
  int rc = 0;
  if (syscall(SYS_move_mount, m, "", AT_FDCWD, a[1], MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("mounting overlayfs at", a[1]);
  close(m);
  return rc;
}

static int do_close(char **a) {
  int m = atoi(a[0]);
  if (m >= 3) close(m);
  return 0;
}

static int do_seal(char **a) {
  int pid = atoi(a[0]);
  const char *source = a[1];
  char path[96];
  int src = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (src < 0) return fail("open_tree", source);
  snprintf(path, sizeof path, "/proc/%d/ns/mnt", pid);
  int mntns = open(path, O_RDONLY | O_CLOEXEC);
  /* The user namespace that owns the mount namespace (bubblewrap may nest a second one
   * inside it, where the process lives): the one whose capabilities mounting there needs. */
  int userns = mntns >= 0 ? ioctl(mntns, NS_GET_USERNS) : -1;
  snprintf(path, sizeof path, "/proc/%d/root/workspace", pid);
  int old = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (userns < 0 || mntns < 0 || old < 0) {
    int e = errno;
    close(src), close(userns), close(mntns), close(old);
    errno = e;
    return fail("the terminal's namespace is gone:", path);
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) return fail("pipe", NULL);
  pid_t child = fork();
  if (child == 0) {
    /* setns changes this process for good: done in a child, the server keeps its own. */
    char msg[512];
    const char *step = "setns (user)";
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    struct stat mine, theirs;
    int same = stat("/proc/self/ns/user", &mine) == 0 && fstat(userns, &theirs) == 0 && mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
    /* Root of the initial namespace holds every capability there already. */
    if (!same && !(geteuid() == 0 && !in_user_namespace()) && setns(userns, CLONE_NEWUSER) < 0) goto bad;
    step = "setns (mount)";
    if (setns(mntns, CLONE_NEWNS) < 0) goto bad;
    step = "making the old workspace mount read-only";
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (syscall(SYS_mount_setattr, old, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) goto bad;
    step = "mounting the new workspace over the old one";
    /* On top, the old one kept beneath (not detached): a process whose working directory is
     * on it (the spawner of a command namespace, a background job) can still name it
     * (getcwd); the stack grows by one per fork until the namespace ends at the slot's reset,
     * and no new namespace copies it (they copy the server's). */
    if (syscall(SYS_move_mount, src, "", old, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
      int e = errno;
      memset(&attr, 0, sizeof attr);
      attr.attr_clr = MOUNT_ATTR_RDONLY;
      syscall(SYS_mount_setattr, old, "", AT_EMPTY_PATH, &attr, sizeof attr);
      errno = e;
      goto bad;
    }
    _exit(0);
  bad:
    snprintf(msg, sizeof msg, "%s%s: %s", errno == EBUSY ? "busy: " : "", step, strerror(errno));
    (void)!write(pipefd[1], msg, strlen(msg));
    _exit(1);
  }
  close(pipefd[1]);
  int status = 0, rc = 0;
  char buf[512];
  ssize_t got = child > 0 ? read(pipefd[0], buf, sizeof buf - 1) : -1;
  if (child > 0) waitpid(child, &status, 0);
  if (child < 0) rc = fail("fork", NULL);
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    buf[got > 0 ? got : 0] = 0;
    snprintf(last_error, sizeof last_error, "%s", got > 0 ? buf : "sealing the terminal's workspace failed");
    rc = 1;
  }
  close(pipefd[0]), close(src), close(userns), close(mntns), close(old);
  return rc;
}

static int do_bind(char **a) {
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, a[0], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return fail("open_tree", a[0]);
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  int rc = 0;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) rc = fail("mount_setattr (read-only)", a[0]);
  else if (syscall(SYS_move_mount, t, "", AT_FDCWD, a[1], MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("move_mount", a[1]);
  close(t);
  return rc;
}

static int do_keep(char **a) {
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, a[0], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return fail("open_tree", a[0]);
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
    fail("mount_setattr (read-only)", a[0]);
    close(t);
    return 1;
  }
  snprintf(answer_extra, sizeof answer_extra, "%d", t);
  return 0;
}

static void *close_fd(void *arg) {
  close((int)(long)arg);
  return NULL;
}

static int do_drop(char **a) {
  char *end;
  long fd = strtol(a[0], &end, 10);
  if (*end || fd < 3) {
    errno = EBADF;
    return fail("drop: not a handle:", a[0]);
  }
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, close_fd, (void *)fd) != 0) close((int)fd);
  pthread_attr_destroy(&at);
  return 0;
}

static int do_probe(char **a) {
  char l[512], u[512], w[512], p[64];
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
  char wi[600];
  snprintf(wi, sizeof wi, "%s/work", w);
  rmdir(wi), rmdir(w), rmdir(u), rmdir(l), rmdir(a[0]);
  return rc;
}

static int do_umount_bg(char **a) {
  pid_t pid = fork();
  if (pid < 0) return fail("fork", NULL);
  if (pid == 0) {
    if (fork() == 0) {
      umount2(a[0], MNT_DETACH);
      _exit(0);
    }
    _exit(0);
  }
  waitpid(pid, NULL, 0);
  return 0;
}

static int do_umount(char **a) {
  if (umount2(a[0], MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) return fail("umount", a[0]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || strcmp(argv[1], "serve") != 0) {
    fprintf(stderr, "usage: fork-mount serve (requests on stdin, see the source)\n");
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  setvbuf(stdout, NULL, _IOLBF, 0);
  while ((n = getline(&line, &cap, stdin)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = 0;
    char *args[600];
    int count = 0;
    for (char *tok = strtok(line, "\t"); tok && count < 600; tok = strtok(NULL, "\t")) args[count++] = tok;
    int rc;
    last_error[0] = answer_extra[0] = 0;
    if (count == 7 && strcmp(args[0], "idmap") == 0) rc = do_idmap(args + 1);
    else if (count >= 5 && strcmp(args[0], "overlay") == 0) rc = do_overlay(args + 1, count - 1);
    else if (count >= 4 && strcmp(args[0], "overlay-detached") == 0) rc = do_overlay_detached(args + 1, count - 1);
    else if (count == 3 && strcmp(args[0], "attach") == 0) rc = do_attach(args + 1);
    else if (count == 3 && strcmp(args[0], "attach-top") == 0) rc = do_attach_top(args + 1);
    else if (count == 2 && strcmp(args[0], "close") == 0) rc = do_close(args + 1);
    else if (count == 2 && strcmp(args[0], "keep") == 0) rc = do_keep(args + 1);
    else if (count == 6 && strcmp(args[0], "keep-idmap") == 0) rc = do_keep_idmap(args + 1);
    else if (count == 2 && strcmp(args[0], "drop") == 0) rc = do_drop(args + 1);
    else if (count == 2 && strcmp(args[0], "probe") == 0) rc = do_probe(args + 1);
    else if (count == 3 && strcmp(args[0], "seal") == 0) rc = do_seal(args + 1);
    else if (count == 2 && strcmp(args[0], "umount") == 0) rc = do_umount(args + 1);
    else if (count == 2 && strcmp(args[0], "umount-bg") == 0) rc = do_umount_bg(args + 1);
    else if (count == 3 && strcmp(args[0], "bind") == 0) rc = do_bind(args + 1);
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
