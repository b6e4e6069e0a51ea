/*
 * slotpool volume views (root servers): a read-write view of a volume's directory in which
 * the files the volume owner's uid holds on disk appear as one slot's own, so every slot
 * that mounts the volume reads and writes the same files, each as its own uid, and whatever
 * it creates lands on disk as the volume owner's (workspace/volume-views.ts).
 *
 *   volume-mount mount <tree> <target> <disk_uid> <slot_uid> <disk_gid> <slot_gid>
 *     An id-mapped clone of <tree> (open_tree + mount_setattr(MOUNT_ATTR_IDMAP), nosuid,
 *     nodev) moved onto <target> (an existing empty directory); a view mounted there before
 *     is detached first.
 *   volume-mount umount <target>
 *     Detaches the view at <target> (none there: nothing to do).
 *
 * Kept apart from template-mount.c (read-only template views under an overlay) on purpose:
 * a volume view is writable and has no overlay. Why C: Node has no mount syscalls and
 * util-linux 2.38 (Debian 12) has no X-mount.idmap.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/mount.h>

static int fail(const char *what, const char *arg) {
  fprintf(stderr, "volume-mount: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
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
    (void)!read(sync_pipe[0], &c, 1);
    _exit(0);
  }
  close(sync_pipe[0]);
  char path[64], map[96];
  int fd = -1;
  /* The child unshares asynchronously: wait until its user namespace differs from ours. */
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
  snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
  (void)write_file(path, "deny");
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

static int do_umount(const char *target) {
  if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) return fail("umount", target);
  return 0;
}

static unsigned id(const char *s) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v > 4294967294UL) {
    fprintf(stderr, "volume-mount: bad id %s\n", s);
    exit(64);
  }
  return (unsigned)v;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "umount") == 0) return do_umount(argv[2]);
  if (argc != 8 || strcmp(argv[1], "mount") != 0) {
    fprintf(stderr, "usage: volume-mount mount <tree> <target> <disk_uid> <slot_uid> <disk_gid> <slot_gid> | umount <target>\n");
    return 64;
  }
  const char *tree = argv[2], *target = argv[3];
  unsigned disk_uid = id(argv[4]), slot_uid = id(argv[5]), disk_gid = id(argv[6]), slot_gid = id(argv[7]);
  if (do_umount(target) != 0) return 1;
  int ns = idmap_userns(disk_uid, slot_uid, disk_gid, slot_gid);
  if (ns < 0) return fail("creating the id-mapping user namespace", NULL);
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, tree, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return fail("open_tree", tree);
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = (unsigned)ns;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) return fail("mount_setattr (id-mapped mount)", tree);
  if (syscall(SYS_move_mount, t, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) return fail("move_mount", target);
  close(t);
  close(ns);
  return 0;
}
