/*
 * slotpool-browser-launch: how a slot's browser enters the slot (see
 * src/sandbox/tools/browser/browser-sandbox.ts for why it exists).
 *
 * Playwright starts the browser as its "executable" with the CDP pipe on fds 3 and 4. This
 * helper is that executable: it puts itself where the slot's processes are, then becomes
 * bubblewrap (which becomes Chromium), keeping fds 3 and 4 and its pid all the way:
 *
 *   1. writes its pid to --pidfile (the server kills the browser's namespace by it);
 *   2. joins the slot's cgroups (--cgroup PROCS_FILE, each), before anything forks;
 *   3. opens --args-file and --filter-file on the fds bubblewrap's --args and --seccomp name;
 *   4. becomes the slot's uid and gid (--uid, --gid; root servers), drops every capability
 *      and sets the rlimits (--rlimit NAME=VALUE, hard and soft);
 *   5. with --netns-of PID:STARTTIME, joins the network namespace of that process (the
 *      slot's terminal): it opens /proc/PID/ns/net as the slot's uid (no CAP_SYS_PTRACE
 *      needed, e.g. as root in a container), checks the process is still the one meant (its
 *      start time: a pid may be reused), then enters the user namespace owning that network
 *      namespace (NS_GET_USERNS: bubblewrap nests a second user namespace below it, so
 *      nsenter --user --net, which takes the process's own, is refused) and the network
 *      namespace itself. Allowed because that user namespace belongs to the slot's uid;
 *   6. execs the command after "--" (bubblewrap, which builds the slot's sandbox around
 *      Chromium, with the slot's seccomp filter).
 *
 * Any failure prints one line to stderr and exits 120..127 before the command runs.
 * Build: cc -O2 -o slotpool-browser-launch browser-launch.c  (libc only)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/syscall.h>

#ifndef NS_GET_USERNS
#define NS_GET_USERNS 0xb701
#endif

static void die(int code, const char *what) {
  fprintf(stderr, "slotpool-browser-launch: %s: %s\n", what, strerror(errno));
  _exit(code);
}

static void dief(int code, const char *what) {
  fprintf(stderr, "slotpool-browser-launch: %s\n", what);
  _exit(code);
}

static void write_pid_to(const char *path, int flags) {
  int fd = open(path, flags, 0600);
  if (fd < 0) die(121, path);
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
  if (write(fd, buf, (size_t)n) != n) die(121, path);
  close(fd);
}

static void open_on(const char *path, int target) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) die(122, path);
  if (fd != target) {
    if (dup2(fd, target) < 0) die(122, "dup2");
    close(fd);
  }
}

/* Field 22 of /proc/PID/stat (start time in clock ticks), after the command name. */
static int start_time(int pid, char *out, size_t outlen) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p += 2; /* state */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  size_t len = strcspn(p, " ");
  if (len + 1 > outlen) return -1;
  memcpy(out, p, len);
  out[len] = 0;
  return 0;
}

static void join_netns(const char *spec) {
  char *colon = strchr(spec, ':');
  if (!colon) dief(124, "--netns-of wants PID:STARTTIME");
  int pid = atoi(spec);
  const char *want = colon + 1;
  char path[64], got[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
  int net = open(path, O_RDONLY | O_CLOEXEC);
  if (net < 0) die(124, "the slot's network namespace is gone");
  if (start_time(pid, got, sizeof got) < 0 || strcmp(got, want) != 0) dief(124, "the slot's network namespace is gone (its process ended)");
  int user = ioctl(net, NS_GET_USERNS);
  if (user < 0) die(124, "NS_GET_USERNS");
  if (setns(user, CLONE_NEWUSER) < 0) die(124, "entering the slot's user namespace");
  if (setns(net, CLONE_NEWNET) < 0) die(124, "entering the slot's network namespace");
  close(user);
  close(net);
}

static void drop_caps(void) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) == 0) {
    d[0].inheritable = d[1].inheritable = 0;
    syscall(SYS_capset, &h, d);
  }
}

static int rlimit_named(const char *name) {
  if (!strcmp(name, "nproc")) return RLIMIT_NPROC;
  if (!strcmp(name, "fsize")) return RLIMIT_FSIZE;
  if (!strcmp(name, "data")) return RLIMIT_DATA;
  if (!strcmp(name, "core")) return RLIMIT_CORE;
  if (!strcmp(name, "nofile")) return RLIMIT_NOFILE;
  return -1;
}

int main(int argc, char **argv) {
  const char *pidfile = NULL, *args_file = NULL, *filter_file = NULL, *netns = NULL;
  int args_fd = -1, filter_fd = -1;
  long uid = -1, gid = -1;
  int i = 1;
  /* Applied in order of appearance, after the uid change. */
  char *rlimits[16];
  int nrl = 0;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (i + 1 >= argc) dief(120, "an option lacks its value");
    const char *v = argv[++i];
    if (!strcmp(a, "--pidfile")) pidfile = v;
    else if (!strcmp(a, "--cgroup")) write_pid_to(v, O_WRONLY | O_NOFOLLOW);
    else if (!strcmp(a, "--args-file")) args_file = v;
    else if (!strcmp(a, "--args-fd")) args_fd = atoi(v);
    else if (!strcmp(a, "--filter-file")) filter_file = v;
    else if (!strcmp(a, "--filter-fd")) filter_fd = atoi(v);
    else if (!strcmp(a, "--uid")) uid = atol(v);
    else if (!strcmp(a, "--gid")) gid = atol(v);
    else if (!strcmp(a, "--netns-of")) netns = v;
    else if (!strcmp(a, "--rlimit")) {
      if (nrl == 16) dief(120, "too many --rlimit");
      rlimits[nrl++] = (char *)v;
    } else dief(120, "unknown option");
  }
  if (i >= argc) dief(120, "no command after --");
  if (pidfile) write_pid_to(pidfile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC);
  if (args_file && args_fd >= 0) open_on(args_file, args_fd);
  if (filter_file && filter_fd >= 0) open_on(filter_file, filter_fd);
  if (gid >= 0) {
    if (setgroups(0, NULL) < 0) die(123, "setgroups");
    if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0) die(123, "setresgid");
  }
  if (uid >= 0 && setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) die(123, "setresuid");
  drop_caps();
  for (int r = 0; r < nrl; r++) {
    char *eq = strchr(rlimits[r], '=');
    if (!eq) dief(125, "--rlimit wants NAME=VALUE");
    *eq = 0;
    int res = rlimit_named(rlimits[r]);
    if (res < 0) dief(125, "unknown rlimit");
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = strcmp(eq + 1, "unlimited") == 0 ? RLIM_INFINITY : (rlim_t)strtoull(eq + 1, NULL, 10);
    /* Lowering never fails; raising above the hard limit the server has does: keep its. */
    if (setrlimit(res, &rl) < 0 && errno != EPERM) die(125, "setrlimit");
  }
  if (netns) join_netns(netns);
  execv(argv[i], argv + i);
  die(127, argv[i]);
  return 127;
}
