/*
 * slotpool template mounter (root, or a non-root server in its own user namespace). Gives
 * one slot a copy-on-write view of a template:
 *
 *   template-mount mount <tree> <lower> <upper> <work> <target> <disk_uid> <slot_uid> <disk_gid> <slot_gid>
 *     1. <lower> := a read-only clone of <tree>, id-mapped so that files the template build
 *        wrote as <disk_uid>/<disk_gid> appear owned by the slot's uid/gid (no chown, no
 *        copy: O(1) whatever the template's size). Skipped when the ids are equal
 *        (<tree> is then the lower layer itself).
 *     2. overlayfs at <target> (the slot's workspace): lower = <lower>, upper/work = the
 *        slot's private dirs (outside anything the slot can see).
 *     A view mounted at <target> (overlayfs) and whatever is at <lower> are detached first
 *     (one exec per reset). Other mounts at <target> stay: the slot's disk bound (its tmpfs
 *     bound onto the workspace) lies under the view, and the view's upper/work live on it.
 *   template-mount umount <target> <lower>
 *     Detaches both (either may be absent; at <target>, only overlayfs).
 *   template-mount disk <disk> <workspace> <bytes> <uid> <gid>
 *     A slot's bounded disk, new (server start) or anew (reset): detaches every mount at
 *     <workspace> (a view, the old disk's bind) and at <disk> (the old tmpfs, freed with its
 *     last user), mounts a fresh tmpfs of <bytes> at <disk> holding workspace/, tmp/,
 *     var-tmp/ and shm/ (0700, <uid>:<gid>) and views/ (0700, the server's), and binds
 *     <disk>/workspace onto <workspace>. O(1) in what the slot wrote: nothing is walked.
 *   template-mount root <disk> <workspace> <bytes> <uid> <gid> <root_uid> <root_gid> <lower>...
 *     `disk`, then the slot's root as an image (src/sandbox/images/) in the same request: an
 *     upper (<disk>/views/root-upper, 0755, <root_uid>:<root_gid>) and work dir on the fresh
 *     disk, and overlayfs of <lower>s (top first; the image helper's detached layer handles,
 *     /proc/<pid>/fd/<n>) at <workspace>: a reset into an image costs one request.
 *   template-mount newdisk <disk> <bytes> <uid> <gid> / swap (<old> <next> <workspace>)... / dropdisk <disk>
 *     The same in two steps, for a fork (fork.ts): a fresh disk at a path of its own beside
 *     the slot's current one (nothing of the slot changes); later either the switch (every
 *     mount at <workspace> and <old> detached, <old> freed in the background, <next>'s
 *     workspace bound there) or, the fork having failed, the new disk dropped.
 *
 * Why C: util-linux 2.38 (Debian 12) has no X-mount.idmap, and Node has no mount syscalls.
 * One exec of this helper costs ≈ 1-2 ms; a copy of the tree costs O(files).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/mount.h>

/* The last error, also sent back as the answer in `serve` mode. */
static char last_error[1024];
static int serving;

static int fail(const char *what, const char *arg) {
  snprintf(last_error, sizeof last_error, "%s %s: %s", what, arg ? arg : "", strerror(errno));
  if (!serving) fprintf(stderr, "template-mount: %s\n", last_error);
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
static int idmap_userns(unsigned from_uid, unsigned to_uid, unsigned from_gid, unsigned to_gid) {
  int sync_pipe[2];
  if (pipe2(sync_pipe, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    char c;
    if (unshare(CLONE_NEWUSER) < 0) _exit(1);
    close(sync_pipe[1]);
    /* Wait until the parent has read our namespace (the pipe closes), then leave. */
    (void)!read(sync_pipe[0], &c, 1);
    _exit(0);
  }
  close(sync_pipe[0]);
  char path[64], map[96];
  int fd = -1;
  /* The child unshares asynchronously: retry until its user namespace differs from ours. */
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

static int do_umount(char **a);

/* Whether this process runs in a user namespace other than the initial one (whose uid map
 * is the whole range, "0 0 4294967295"). */
static int in_user_namespace(void) {
  static int known = -1;
  if (known >= 0) return known;
  unsigned inside = 0, outside = 0, count = 0;
  FILE *f = fopen("/proc/self/uid_map", "re");
  known = !(f && fscanf(f, "%u %u %u", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 && count == 4294967295u);
  if (f) fclose(f);
  return known;
}

static int do_mount(char **a) {
  const char *tree = a[0], *lower = a[1], *upper = a[2], *work = a[3], *target = a[4];
  /* A view mounted before (reset from one template view into the next): detach it first,
   * in this same exec. */
  char *old[2] = {(char *)target, (char *)lower};
  if (do_umount(old) != 0) return 1;
  unsigned disk_uid = strtoul(a[5], NULL, 10), slot_uid = strtoul(a[6], NULL, 10);
  unsigned disk_gid = strtoul(a[7], NULL, 10), slot_gid = strtoul(a[8], NULL, 10);
  const char *lowerdir = tree;
  if (disk_uid != slot_uid || disk_gid != slot_gid) {
    int ns = idmap_userns(disk_uid, slot_uid, disk_gid, slot_gid);
    if (ns < 0) return fail("creating the id-mapping user namespace", NULL);
    int t = (int)syscall(SYS_open_tree, AT_FDCWD, tree, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0) return fail("open_tree", tree);
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    attr.userns_fd = (unsigned)ns;
    int rc = 0;
    if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) rc = fail("mount_setattr (id-mapped mount)", tree);
    else if (syscall(SYS_move_mount, t, "", AT_FDCWD, lower, MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("move_mount", lower);
    close(t);
    close(ns);
    if (rc) return rc;
    lowerdir = lower;
  }
  char opts[8192];
  /* In a user namespace (a non-root server's own) overlayfs cannot use trusted.* xattrs:
   * without userxattr, deleting a template directory in a view fails with EIO. */
  int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s%s", lowerdir, upper, work, in_user_namespace() ? ",userxattr" : "");
  if (n < 0 || (size_t)n >= sizeof opts) { errno = ENAMETOOLONG; return fail("overlay options", NULL); }
  if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts) < 0) {
    int e = errno;
    if (lowerdir == lower) umount2(lower, MNT_DETACH);
    errno = e;
    return fail("mounting overlayfs at", target);
  }
  return 0;
}

#define OVERLAYFS_MAGIC 0x794c7630

static int is_overlay(const char *path) {
  struct statfs st;
  return statfs(path, &st) == 0 && (unsigned long)st.f_type == OVERLAYFS_MAGIC;
}

static int do_umount(char **a) {
  int rc = 0;
  /* <target>: only views (overlayfs), never the disk bound's bind mount beneath them.
   * EINVAL: not a mount point (the workspace sits on an overlayfs root, as in Docker). */
  while (is_overlay(a[0])) {
    if (umount2(a[0], MNT_DETACH) < 0) {
      if (errno != EINVAL && errno != ENOENT) rc = fail("umount", a[0]);
      break;
    }
  }
  if (umount2(a[1], MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) rc = fail("umount", a[1]);
  return rc;
}

/* Detaches every mount stacked at <path> (none is fine). */
static int detach_all(const char *path) {
  for (int i = 0; i < 64; i++) {
    if (umount2(path, MNT_DETACH) < 0) {
      if (errno == EINVAL || errno == ENOENT) return 0;
      return fail("umount", path);
    }
  }
  errno = EBUSY;
  return fail("too many mounts at", path);
}

static int make_dir(const char *base, const char *name, int chown_it, unsigned uid, unsigned gid) {
  char p[4096];
  int n = snprintf(p, sizeof p, "%s/%s", base, name);
  if (n < 0 || (size_t)n >= sizeof p) { errno = ENAMETOOLONG; return fail("mkdir", base); }
  if (mkdir(p, 0700) < 0 && errno != EEXIST) return fail("mkdir", p);
  if (chown_it && chown(p, uid, gid) < 0) return fail("chown", p);
  return 0;
}

/*
 * Drops the reference `fd` holds on a detached tmpfs in a detached grandchild: the kernel
 * frees a detached mount's files when its last reference goes, in the context of whoever
 * drops it, and for 150,000 files that takes a few hundred ms. This way the request is
 * answered at once and the freeing happens in the background (the grandchild waits until
 * this process has closed its own copy, so its close is the last).
 */
static void release_in_background_many(const int *fds, int n) {
  int sync_pipe[2];
  if (n == 0) return;
  if (pipe2(sync_pipe, O_CLOEXEC) < 0) {
    for (int i = 0; i < n; i++) close(fds[i]);
    return;
  }
  pid_t child = fork();
  if (child == 0) {
    if (fork() == 0) {
      char c;
      close(sync_pipe[1]);
      close(STDIN_FILENO);
      close(STDOUT_FILENO);
      (void)!read(sync_pipe[0], &c, 1); /* EOF: the server-side helper closed its copy */
      setpriority(PRIO_PROCESS, 0, 19);   /* the freeing must not slow the slots that run */
      for (int i = 0; i < n; i++) close(fds[i]);
      _exit(0);
    }
    _exit(0);
  }
  close(sync_pipe[0]);
  for (int i = 0; i < n; i++) close(fds[i]);
  close(sync_pipe[1]);
  if (child > 0) waitpid(child, NULL, 0);
}

static void release_in_background(int fd) {
  release_in_background_many(&fd, 1);
}

/* A fresh tmpfs of <bytes> at <disk> with the slot's dirs (nothing bound anywhere yet). */
static int new_disk(const char *disk, unsigned long long bytes, unsigned uid, unsigned gid) {
  if (mkdir(disk, 0700) < 0 && errno != EEXIST) return fail("mkdir", disk);
  char opts[256];
  snprintf(opts, sizeof opts, "size=%llu,mode=0700,uid=%u,gid=%u", bytes, uid, gid);
  if (mount("tmpfs", disk, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) return fail("mounting a tmpfs at", disk);
  static const char *slot_dirs[] = {"workspace", "tmp", "var-tmp", "shm"};
  for (size_t i = 0; i < sizeof slot_dirs / sizeof *slot_dirs; i++)
    if (make_dir(disk, slot_dirs[i], 1, uid, gid)) return 1;
  return make_dir(disk, "views", 0, 0, 0);
}

static int bind_workspace(const char *disk, const char *workspace) {
  char ws[4096];
  snprintf(ws, sizeof ws, "%s/workspace", disk);
  if (mount(ws, workspace, NULL, MS_BIND, NULL) < 0) return fail("binding the slot's disk at", workspace);
  return 0;
}

static int do_disk(char **a) {
  const char *disk = a[0], *workspace = a[1];
  /* A reference on the old disk (if one is mounted), so that detaching it frees nothing here. */
  int old = open(disk, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int rc = detach_all(workspace) || detach_all(disk);
  if (old >= 0) release_in_background(old);
  if (rc) return 1;
  if (new_disk(disk, strtoull(a[2], NULL, 10), strtoul(a[3], NULL, 10), strtoul(a[4], NULL, 10))) return 1;
  return bind_workspace(disk, workspace);
}

#ifndef FSCONFIG_SET_STRING
#define FSCONFIG_SET_STRING 1
#endif
#ifndef FSCONFIG_SET_FLAG
#define FSCONFIG_SET_FLAG 0
#endif
#ifndef FSCONFIG_CMD_CREATE
#define FSCONFIG_CMD_CREATE 6
#endif

/* root <disk> <workspace> <bytes> <uid> <gid> <root_uid> <root_gid> <lower>...: a fresh disk, and the image root over it. */
static int do_root(char **a, int n) {
  /* The previous image root (overlayfs on top of the workspace): moved onto the old disk, whose
   * detach below takes it along in the same unmount (each unmount waits for an RCU grace
   * period: one less per reset). */
  if (is_overlay(a[1])) {
    char aside[4200];
    snprintf(aside, sizeof aside, "%s/old-root", a[0]);
    if (mkdir(aside, 0700) == 0 || errno == EEXIST) (void)syscall(SYS_move_mount, AT_FDCWD, a[1], AT_FDCWD, aside, 0);
  }
  if (do_disk(a)) return 1;
  char upper[4096], work[4096];
  snprintf(upper, sizeof upper, "%s/views/root-upper", a[0]);
  snprintf(work, sizeof work, "%s/views/root-work", a[0]);
  if (mkdir(upper, 0755) < 0 || chmod(upper, 0755) < 0) return fail("mkdir", upper);
  if (chown(upper, strtoul(a[5], NULL, 10), strtoul(a[6], NULL, 10)) < 0) return fail("chown", upper);
  if (mkdir(work, 0700) < 0) return fail("mkdir", work);
  int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
  if (fs < 0) return fail("fsopen", "overlay");
  int rc = 0;
  for (int i = 7; i < n && rc == 0; i++)
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+", a[i], 0) < 0) rc = fail("overlay lower layer", a[i]);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0) rc = fail("overlay upperdir", upper);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0) rc = fail("overlay workdir", work);
  if (rc == 0 && in_user_namespace() && syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) rc = fail("overlay userxattr", NULL);
  if (rc == 0 && syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) rc = fail("creating overlayfs with upper", upper);
  int m = -1;
  if (rc == 0 && (m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0) rc = fail("fsmount", upper);
  close(fs);
  if (rc == 0 && syscall(SYS_move_mount, m, "", AT_FDCWD, a[1], MOVE_MOUNT_F_EMPTY_PATH) < 0) rc = fail("mounting the image root at", a[1]);
  if (m >= 0) close(m);
  return rc;
}

/* newdisk <disk> <bytes> <uid> <gid>: a fork's new disk for a slot, beside its current one. */
static int do_newdisk(char **a) {
  return new_disk(a[0], strtoull(a[1], NULL, 10), strtoul(a[2], NULL, 10), strtoul(a[3], NULL, 10));
}

/* swap (<old> <next> <workspace>)...: for each slot, every mount at <workspace> and the old
 * disk detached, <next>'s workspace bound there; the old disks all freed in one detached
 * low-priority grandchild (one fork for a whole fork's children, not one per child). */
static int do_swap(char **a, int n) {
  int fds[64], held = 0, rc = 0;
  for (int i = 0; i < n; i++) {
    const char *old_disk = a[3 * i], *next = a[3 * i + 1], *workspace = a[3 * i + 2];
    int old = open(old_disk, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (old >= 0) fds[held++] = old;
    if (detach_all(workspace) || detach_all(old_disk)) { rc = 1; continue; }
    if (strcmp(old_disk, next) != 0) (void)rmdir(old_disk);
    if (bind_workspace(next, workspace)) rc = 1;
  }
  release_in_background_many(fds, held);
  return rc;
}

/* dropdisk <disk>: undoes a `newdisk` (a fork that failed). */
static int do_dropdisk(char **a) {
  if (detach_all(a[0])) return 1;
  (void)rmdir(a[0]);
  return 0;
}

/*
 * `serve`: one request per stdin line, its arguments separated by tabs (as on the command
 * line); answers "ok" or "err <message>" per line. The server keeps one helper running, so a
 * reset costs no fork + exec (30+ ms on a loaded box).
 */
static int serve(void) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  serving = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  while ((n = getline(&line, &cap, stdin)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = 0;
    char *args[256];
    int count = 0;
    for (char *tok = strtok(line, "\t"); tok && count < 256; tok = strtok(NULL, "\t")) args[count++] = tok;
    int rc;
    last_error[0] = 0;
    if (count == 10 && strcmp(args[0], "mount") == 0) rc = do_mount(args + 1);
    else if (count == 3 && strcmp(args[0], "umount") == 0) rc = do_umount(args + 1);
    else if (count == 6 && strcmp(args[0], "disk") == 0) rc = do_disk(args + 1);
    else if (count >= 9 && strcmp(args[0], "root") == 0) rc = do_root(args + 1, count - 1);
    else if (count == 5 && strcmp(args[0], "newdisk") == 0) rc = do_newdisk(args + 1);
    else if (count >= 4 && count <= 1 + 3 * 64 && (count - 1) % 3 == 0 && strcmp(args[0], "swap") == 0) rc = do_swap(args + 1, (count - 1) / 3);
    else if (count == 2 && strcmp(args[0], "dropdisk") == 0) rc = do_dropdisk(args + 1);
    else {
      snprintf(last_error, sizeof last_error, "bad request (%d fields)", count);
      rc = 1;
    }
    if (rc == 0) printf("ok\n");
    else printf("err %s\n", last_error);
  }
  free(line);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "serve") == 0) return serve();
  if (argc == 11 && strcmp(argv[1], "mount") == 0) return do_mount(argv + 2);
  if (argc == 4 && strcmp(argv[1], "umount") == 0) return do_umount(argv + 2);
  if (argc == 7 && strcmp(argv[1], "disk") == 0) return do_disk(argv + 2);
  if (argc == 6 && strcmp(argv[1], "newdisk") == 0) return do_newdisk(argv + 2);
  if (argc >= 5 && argc <= 2 + 3 * 64 && (argc - 2) % 3 == 0 && strcmp(argv[1], "swap") == 0) return do_swap(argv + 2, (argc - 2) / 3);
  if (argc == 3 && strcmp(argv[1], "dropdisk") == 0) return do_dropdisk(argv + 2);
  fprintf(stderr, "usage: template-mount mount <tree> <lower> <upper> <work> <target> <disk_uid> <slot_uid> <disk_gid> <slot_gid>\n"
                  "       template-mount umount <target> <lower>\n"
                  "       template-mount disk <disk> <workspace> <bytes> <uid> <gid>\n");
  return 2;
}
