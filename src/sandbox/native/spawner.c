/*
 * slotpool-spawner: the per-slot process that starts `bash` commands inside the slot's
 * long-lived bubblewrap namespace (see src/sandbox/isolation/spawner.ts for why).
 *
 * It runs as the slot's uid, without capabilities, inside bubblewrap's user, pid, mount,
 * ipc, uts (and, for the no-network holder, net) namespaces, reads requests on stdin and
 * answers with frames on stdout. For each command it forks `bash -c`, relays its output,
 * and when the command ends (or on a kill request) it sends SIGKILL to every other process
 * of the namespace (kill(-1): all but itself, the namespace's init) until none is left.
 * So no process of a call survives the call, and the per-call cost is one fork+exec.
 *
 * Requests (stdin):
 *   "R <cpu_s> <nproc> <fsize_bytes> <as_bytes> <flags> <cmd_len> <cap> <name_len>\n"
 *     + cmd bytes + output file name bytes
 *     <flags>: bit 0 stream, bit 1 keep (see struct req).
 *     stream=1: forward all output (the server caps it); stream=0: forward the first <cap>
 *     bytes only, keep the last <cap>/2 bytes of each stream in a ring, and write the full
 *     output to /workspace/<name> (O_EXCL|O_NOFOLLOW, as the slot's uid) once past the cap,
 *     so the server's memory and CPU do not grow with output size.
 *   "K\n"  kill the running command
 * Frames (stdout): 1 byte type, 4 bytes big-endian length, payload.
 *   'H' hello (spawner ready)   'O' stdout bytes   'E' stderr bytes
 *   'o' / 'e' the kept tail of stdout / stderr (after the cap was passed)
 *   'Z' "<total bytes> <stdout dropped 0|1> <stderr dropped 0|1> <file: 0 none, 1 complete, 2 cut at the file size limit>"
 *   'X' "<exit code>" or "s<signal>" when the command ended (all output sent before)
 *   'F' failure message (the command could not be started)
 *
 * Options (a slot whose root is an image, see src/sandbox/images/): `--dir D` the commands'
 * working directory and where the full-output file goes (default /workspace); `--bash B` the
 * bash to run (default /bin/bash-static if present, else /bin/bash: an image's own bash is
 * never used, the server binds a static one); `--keep-caps` the commands keep the
 * capabilities bubblewrap left them (root of the slot's own user namespace, over the slot's
 * own uids only); `--user UID:GID` the commands run as that user (the image's `User`).
 * `--exec-as UID:GID -- PROGRAM ARG...` only switches to that user and execs PROGRAM (a
 * process session's launcher, which has no setuid of its own).
 *
 * Build: cc -O2 -o slotpool-spawner spawner.c  (no dependencies beyond libc; `-static` for
 * image roots, which have no libc of ours)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

static char inbuf[1 << 20];
static int sigfd = -1;
static size_t inlen = 0;

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void frame(char type, const void *data, uint32_t len) {
  unsigned char hdr[5];
  hdr[0] = (unsigned char)type;
  hdr[1] = (unsigned char)(len >> 24);
  hdr[2] = (unsigned char)(len >> 16);
  hdr[3] = (unsigned char)(len >> 8);
  hdr[4] = (unsigned char)len;
  if (write_all(1, hdr, 5) < 0 || (len && write_all(1, data, len) < 0)) _exit(3);
}

static void drop_caps(void) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int c = 0; c <= 63; c++) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  syscall(SYS_capset, &h, d);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* Options (see the header). */
static const char *work_dir = "/workspace";
static int keep_caps = 0;
static long run_uid = -1, run_gid = -1;

/* The image's user (`--user`): only the group and user ids, its groups being that one group. */
static int switch_user(long uid, long gid) {
  if (gid >= 0) {
    gid_t g = (gid_t)gid;
    if (setgroups(1, &g) < 0 || setresgid(g, g, g) < 0) return -1;
  }
  if (uid >= 0 && setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) return -1;
  return 0;
}

static int parse_ids(const char *s, long *uid, long *gid) {
  char *end;
  *uid = strtol(s, &end, 10);
  if (*end != ':' || *uid < 0) return -1;
  *gid = strtol(end + 1, &end, 10);
  return *end || *gid < 0 ? -1 : 0;
}

static void set_limit(int res, unsigned long long v) {
  if (v == 0) return;
  struct rlimit r = {(rlim_t)v, (rlim_t)v};
  setrlimit(res, &r);
}

struct req {
  unsigned long long cpu, nproc, fsize, as, cap;
  int flags; /* 1: stream (forward all output), 2: keep (stateful holder: do not kill what the command leaves running) */
  int stream, keep;
  char *cmd;
  char *name;
};

/* Output capping (stream=0). */
struct ring {
  char *buf;
  size_t size, start, len;
  int dropped;
};
static unsigned long long out_total = 0;
static int over_cap = 0, file_fd = -1, file_ok = 0;
static unsigned long long file_len = 0, file_max = 0;
static char *pre = NULL; /* the first <cap> bytes, in arrival order, for the file */
static size_t pre_len = 0;
static struct ring rings[2];

static void ring_add(struct ring *r, const char *d, size_t n) {
  if (r->size == 0) return;
  if (n >= r->size) {
    if (n > r->size || r->len > 0) r->dropped = 1;
    memcpy(r->buf, d + (n - r->size), r->size);
    r->start = 0;
    r->len = r->size;
    return;
  }
  size_t overflow = r->len + n > r->size ? r->len + n - r->size : 0;
  if (overflow) {
    r->dropped = 1;
    r->start = (r->start + overflow) % r->size;
    r->len -= overflow;
  }
  size_t w = (r->start + r->len) % r->size;
  while (n > 0) {
    size_t k = r->size - w < n ? r->size - w : n;
    memcpy(r->buf + w, d, k);
    d += k;
    n -= k;
    r->len += k;
    w = (w + k) % r->size;
  }
}

static void file_write(const char *d, size_t n) {
  if (file_fd < 0) return;
  if (file_max && file_len + n > file_max) {
    /* The output file obeys the same size cap as any file the command writes. */
    n = (size_t)(file_max - file_len);
    file_ok = 2;
  }
  file_len += n;
  if (n && write_all(file_fd, d, n) < 0) {
    close(file_fd);
    file_fd = -1;
    file_ok = 0;
  }
}

/* One chunk of output of stream idx (0 stdout, 1 stderr). */
static void on_output(struct req *rq, int idx, const char *d, size_t n) {
  char type = idx == 0 ? 'O' : 'E';
  out_total += n;
  if (rq->stream) {
    frame(type, d, (uint32_t)n);
    return;
  }
  if (!over_cap) {
    size_t room = rq->cap > pre_len ? (size_t)(rq->cap - pre_len) : 0;
    size_t head = n < room ? n : room;
    if (head) {
      frame(type, d, (uint32_t)head);
      memcpy(pre + pre_len, d, head);
      pre_len += head;
    }
    if (head == n) return;
    /* Crossing the cap: the full output goes to the file from here on. */
    over_cap = 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", strcmp(work_dir, "/") == 0 ? "" : work_dir, rq->name);
    file_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    file_ok = file_fd >= 0 ? 1 : 0;
    file_write(pre, pre_len);
    d += head;
    n -= head;
  }
  file_write(d, n);
  ring_add(&rings[idx], d, n);
}

static void send_ring(char type, struct ring *r) {
  if (r->len == 0) return;
  size_t first = r->size - r->start < r->len ? r->size - r->start : r->len;
  /* Two frames at most: the ring may wrap. */
  frame(type, r->buf + r->start, (uint32_t)first);
  if (first < r->len) frame(type, r->buf, (uint32_t)(r->len - first));
}

/* The running command (our direct child) and its wait status once reaped. */
static pid_t main_pid = 0;
static int main_exited = 0, main_status = 0;

/*
 * The bash every call runs: Debian's statically linked build (package bash-static, the same
 * bash version) when the image has it, else /bin/bash. A call's bash is exec'd once per call,
 * and the dynamic loader's work (ld.so, libtinfo, libc, relocations) was about a quarter of
 * that exec's CPU: `bash -c true` 1.23 ms -> 0.94 ms CPU per call (issue 22, docs/performance.md).
 */
static const char *bash_path = "/bin/bash";

/* Reaps exited children without blocking, remembering the command's status. */
static void reap(void) {
  int st;
  pid_t p;
  while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
    if (p == main_pid && !main_exited) {
      main_exited = 1;
      main_status = st;
    }
  }
}

/* SIGKILL every process of the namespace but ourselves (its init), until none is left. */
static void kill_all(void) {
  for (int i = 0; i < 10000; i++) {
    if (kill(-1, SIGKILL) != 0 && errno == ESRCH) return;
    /* Reap so the loop ends: as the namespace's init we are every orphan's parent. */
    reap();
  }
}

/*
 * In the child: limits, no capabilities, stdio, then bash. With script_fd >= 0 this is a
 * pre-forked bash that sources its command from fd 3 (written later, see prefork()).
 */
static void start_command(struct req *rq, int outw, int errw, int errpipe, int script_fd) {
  setsid();
  set_limit(RLIMIT_CPU, rq->cpu);
  set_limit(RLIMIT_NPROC, rq->nproc);
  set_limit(RLIMIT_FSIZE, rq->fsize);
  set_limit(RLIMIT_AS, rq->as);
  struct rlimit core = {0, 0};
  setrlimit(RLIMIT_CORE, &core);
  if (switch_user(run_uid, run_gid) < 0) {
    dprintf(errpipe, "switching to uid %ld gid %ld: %s", run_uid, run_gid, strerror(errno));
    _exit(127);
  }
  if (keep_caps) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  else drop_caps();
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(outw, 1);
  dup2(errw, 2);
  if (script_fd >= 0) dup2(script_fd, 3);
  if (chdir(work_dir) != 0 && chdir("/") != 0) _exit(127);
  signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* errpipe is O_CLOEXEC: a successful exec closes it, which tells the spawner we started. */
  if (script_fd >= 0) execl(bash_path, "bash", "-c", ". /dev/fd/3", (char *)NULL);
  else execl(bash_path, "bash", "-c", rq->cmd, (char *)NULL);
  dprintf(errpipe, "exec %s: %s", bash_path, strerror(errno));
  _exit(127);
}

/*
 * Pre-forked bash: started right after a call ends (off the next call's critical path),
 * it waits in `. /dev/fd/3` until the next command arrives on that pipe. Sourcing runs
 * the command like `bash -c` does (same errors, "bash: line N: ..."; $LINENO from 1) and
 * hides bash's start-up time (≈ 1-2 ms) from the call's latency. Only for plain calls (not
 * keep mode), and only when the limits of the next call match those it was started with.
 */
static struct {
  pid_t pid;
  int out, err, ep, script;
  unsigned long long nproc, fsize, as;
} warm = {0, -1, -1, -1, -1, 0, 0, 0};

static void prefork_discard(void) {
  if (warm.pid > 0) {
    kill(warm.pid, SIGKILL);
    waitpid(warm.pid, NULL, 0);
  }
  if (warm.out >= 0) close(warm.out);
  if (warm.err >= 0) close(warm.err);
  if (warm.ep >= 0) close(warm.ep);
  if (warm.script >= 0) close(warm.script);
  warm.pid = 0;
  warm.out = warm.err = warm.ep = warm.script = -1;
}

static void prefork(struct req *rq) {
  int out[2], err[2], ep[2], sp[2];
  /* An image's user (--user): no bash started ahead. Its call's CPU limit is set with
   * prlimit(), which another user's process refuses without CAP_SYS_RESOURCE (which no slot
   * process gets); and it would open the script pipe (its creator's, 0600) by /dev/fd/3. Each
   * call then starts its bash after its limits are set, as the user. */
  if (run_uid >= 0) return;
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(ep, O_CLOEXEC) || pipe2(sp, O_CLOEXEC)) return;
  struct req limits = *rq;
  limits.cpu = 0; /* set per call with prlimit() */
  pid_t pid = fork();
  if (pid < 0) {
    close(out[0]); close(out[1]); close(err[0]); close(err[1]); close(ep[0]); close(ep[1]); close(sp[0]); close(sp[1]);
    return;
  }
  if (pid == 0) start_command(&limits, out[1], err[1], ep[1], sp[0]);
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  close(sp[0]);
  warm.pid = pid;
  warm.out = out[0];
  warm.err = err[0];
  warm.ep = ep[0];
  warm.script = sp[1];
  warm.nproc = rq->nproc;
  warm.fsize = rq->fsize;
  warm.as = rq->as;
}

static void run(struct req *rq) {
  int out[2], err[2], ep[2];
  pid_t pid;
  int use_pre = !rq->keep && warm.pid > 0 && warm.nproc == rq->nproc && warm.fsize == rq->fsize && warm.as == rq->as;
  if (!use_pre) prefork_discard();
  if (use_pre) {
    pid = warm.pid;
    out[0] = warm.out;
    err[0] = warm.err;
    ep[0] = warm.ep;
    if (rq->cpu) {
      struct rlimit r = {(rlim_t)rq->cpu, (rlim_t)rq->cpu};
      prlimit(pid, RLIMIT_CPU, &r, NULL);
    }
    /* "exec 3<&-;" on the first line closes the script pipe for the command itself
       without shifting its line numbers. */
    static const char prefix[] = "exec 3<&-; ";
    int ok = write_all(warm.script, prefix, sizeof prefix - 1) == 0 && write_all(warm.script, rq->cmd, strlen(rq->cmd)) == 0;
    close(warm.script);
    warm.pid = 0;
    warm.out = warm.err = warm.ep = warm.script = -1;
    if (!ok) {
      /* The pre-forked bash died (e.g. killed by a previous call's kill(-1) race): start fresh. */
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      close(out[0]); close(err[0]); close(ep[0]);
      use_pre = 0;
    }
  }
  if (!use_pre) {
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
      const char *m = "pipe failed";
      frame('F', m, (uint32_t)strlen(m));
      return;
    }
    pid = fork();
    if (pid < 0) {
      char m[256];
      int n = snprintf(m, sizeof m, "fork: %s", strerror(errno));
      frame('F', m, (uint32_t)n);
      close(out[0]); close(out[1]); close(err[0]); close(err[1]); close(ep[0]); close(ep[1]);
      return;
    }
    if (pid == 0) start_command(rq, out[1], err[1], ep[1], -1);
    close(out[1]);
    close(err[1]);
    close(ep[1]);
  }
  out_total = 0;
  over_cap = 0;
  file_ok = 0;
  file_fd = -1;
  file_len = 0;
  file_max = rq->fsize;
  pre_len = 0;
  size_t half = rq->cap / 2 > 0 ? (size_t)(rq->cap / 2) : 1;
  if (!rq->stream) {
    pre = malloc(rq->cap + 1);
    for (int i = 0; i < 2; i++) {
      rings[i].buf = malloc(half);
      rings[i].size = half;
      rings[i].start = rings[i].len = 0;
      rings[i].dropped = 0;
    }
  }
  struct pollfd fds[5];
  int open_out = 1, open_err = 1, open_ep = 1, killed_all = 0;
  main_pid = pid;
  main_exited = 0;
  main_status = 0;
  char fail[512];
  size_t faillen = 0;
  static char buf[65536];
  while (open_out || open_err || open_ep || !main_exited) {
    reap();
    if (main_exited && !killed_all) {
      /* The command is done: nothing it started may outlive it (this also closes the
         pipes that background processes still hold). In keep mode (the stateful
         session's holder) what it started stays; we only stop reading once the pipes
         have nothing more to give. */
      killed_all = 1;
      if (!rq->keep) kill_all();
    }
    if (rq->keep && main_exited) {
      struct pollfd q[2];
      int nq = 0;
      if (open_out) { q[nq].fd = out[0]; q[nq].events = POLLIN; nq++; }
      if (open_err) { q[nq].fd = err[0]; q[nq].events = POLLIN; nq++; }
      if (nq == 0 || poll(q, (nfds_t)nq, 50) <= 0) {
        if (open_out) { close(out[0]); open_out = 0; }
        if (open_err) { close(err[0]); open_err = 0; }
        if (open_ep) { close(ep[0]); open_ep = 0; }
        break;
      }
    }
    if (!open_out && !open_err && !open_ep) {
      if (!main_exited) {
        int st;
        pid_t p = waitpid(pid, &st, 0);
        if (p == pid) { main_exited = 1; main_status = st; }
        else if (p < 0 && errno != EINTR) { main_exited = 1; }
      }
      continue;
    }
    int n = 0;
    fds[n].fd = 0; fds[n].events = POLLIN; n++;
    fds[n].fd = sigfd; fds[n].events = POLLIN; n++;
    int io = -1, ie = -1, ipe = -1;
    if (open_out) { io = n; fds[n].fd = out[0]; fds[n].events = POLLIN; n++; }
    if (open_err) { ie = n; fds[n].fd = err[0]; fds[n].events = POLLIN; n++; }
    if (open_ep) { ipe = n; fds[n].fd = ep[0]; fds[n].events = POLLIN; n++; }
    /* SIGCHLD arrives on sigfd: the command may exit while background processes still
       hold its pipes, and we must notice that to kill them. */
    int r = poll(fds, (nfds_t)n, -1);
    if (r < 0) { if (errno == EINTR) continue; break; }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sigfd, &si, sizeof si) > 0) {
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      ssize_t k = read(0, inbuf + inlen, sizeof inbuf - inlen);
      if (k <= 0) { if (rq->keep) kill(-pid, SIGKILL); else kill_all(); _exit(0); }
      inlen += (size_t)k;
      /* Only "K\n" is meaningful while a command runs. */
      char *nl;
      while ((nl = memchr(inbuf, '\n', inlen)) != NULL) {
        size_t l = (size_t)(nl - inbuf) + 1;
        if (inbuf[0] == 'K') {
          /* keep mode: only the command's own process group (it called setsid). */
          if (rq->keep) kill(-pid, SIGKILL);
          else kill_all();
        }
        memmove(inbuf, inbuf + l, inlen - l);
        inlen -= l;
      }
    }
    if (io >= 0 && (fds[io].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t k = read(out[0], buf, sizeof buf);
      if (k > 0) on_output(rq, 0, buf, (size_t)k);
      else if (k == 0 || errno != EINTR) { open_out = 0; close(out[0]); }
    }
    if (ie >= 0 && (fds[ie].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t k = read(err[0], buf, sizeof buf);
      if (k > 0) on_output(rq, 1, buf, (size_t)k);
      else if (k == 0 || errno != EINTR) { open_err = 0; close(err[0]); }
    }
    if (ipe >= 0 && (fds[ipe].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t k = read(ep[0], fail + faillen, sizeof fail - faillen - 1);
      if (k > 0) faillen += (size_t)k;
      else if (k == 0 || errno != EINTR) { open_ep = 0; close(ep[0]); }
    }
  }
  if (!killed_all && !rq->keep) kill_all();
  int status = main_status;
  main_pid = 0;
  if (!rq->stream) {
    if (over_cap) {
      send_ring('o', &rings[0]);
      send_ring('e', &rings[1]);
      if (file_fd >= 0) close(file_fd);
      char z[96];
      int zl = snprintf(z, sizeof z, "%llu %d %d %d", out_total, rings[0].dropped, rings[1].dropped, file_ok);
      frame('Z', z, (uint32_t)zl);
    }
    free(pre);
    pre = NULL;
    free(rings[0].buf);
    free(rings[1].buf);
    rings[0].buf = rings[1].buf = NULL;
  }
  if (faillen > 0) {
    frame('F', fail, (uint32_t)faillen);
    if (!rq->keep) prefork(rq);
    return;
  }
  char m[32];
  int len;
  if (WIFEXITED(status)) len = snprintf(m, sizeof m, "%d", WEXITSTATUS(status));
  else len = snprintf(m, sizeof m, "s%d", WTERMSIG(status));
  frame('X', m, (uint32_t)len);
  /* Everything of this call is gone (kill_all): start the next call's bash now. */
  if (!rq->keep) prefork(rq);
}

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "--exec-as") == 0 && strcmp(argv[3], "--") == 0) {
    long uid, gid;
    if (argc < 5 || parse_ids(argv[2], &uid, &gid) < 0) return 126;
    if (switch_user(uid, gid) < 0) {
      dprintf(2, "slotpool: switching to uid %ld gid %ld: %s\n", uid, gid, strerror(errno));
      return 126;
    }
    execvp(argv[4], argv + 4);
    dprintf(2, "slotpool: %s: %s\n", argv[4], strerror(errno));
    return errno == ENOENT ? 127 : 126;
  }
  const char *bash_option = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) work_dir = argv[++i];
    else if (strcmp(argv[i], "--bash") == 0 && i + 1 < argc) bash_option = argv[++i];
    else if (strcmp(argv[i], "--keep-caps") == 0) keep_caps = 1;
    else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc) {
      if (parse_ids(argv[++i], &run_uid, &run_gid) < 0) _exit(9);
    } else _exit(9);
  }
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  /*
   * Out of the slot's reach (issue 38): a non-dumpable process cannot be ptraced, nor its
   * /proc/PID/mem or environ opened, by a process without CAP_SYS_PTRACE, which no slot
   * process has. A command could otherwise attach to the spawner (same uid) and leave a
   * thread in it that kill(-1) spares and that runs on through the slot's later calls. The
   * spawner is the namespace's pid 1 (bwrap --as-pid-1), so there is no other process a call
   * outlives: kill(-1) reaches every process but us, and we reap the orphans.
   */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd < 0) _exit(8);
  if (bash_option) bash_path = bash_option;
  else if (access("/bin/bash-static", X_OK) == 0) bash_path = "/bin/bash-static";
  frame('H', "ready", 5);
  for (;;) {
    char *nl = memchr(inbuf, '\n', inlen);
    if (!nl) {
      if (inlen == sizeof inbuf) _exit(4);
      ssize_t k = read(0, inbuf + inlen, sizeof inbuf - inlen);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(0);
      inlen += (size_t)k;
      continue;
    }
    size_t hl = (size_t)(nl - inbuf) + 1;
    if (inbuf[0] == 'K') { /* nothing running */
      memmove(inbuf, inbuf + hl, inlen - hl);
      inlen -= hl;
      continue;
    }
    if (inbuf[0] != 'R') _exit(5);
    struct req rq = {0};
    unsigned long long cmdlen = 0, namelen = 0;
    *nl = 0;
    if (sscanf(inbuf + 1, "%llu %llu %llu %llu %d %llu %llu %llu", &rq.cpu, &rq.nproc, &rq.fsize, &rq.as, &rq.flags, &cmdlen, &rq.cap, &namelen) != 8) _exit(6);
    if (namelen > 255 || rq.cap > (1ULL << 30)) _exit(6);
    rq.stream = rq.flags & 1;
    rq.keep = (rq.flags & 2) != 0;
    unsigned long long want = cmdlen + namelen;
    char *cmd = malloc(want + 2);
    if (!cmd) _exit(7);
    size_t have = inlen - hl;
    if (have > want) have = want;
    memcpy(cmd, inbuf + hl, have);
    size_t used = hl + have;
    memmove(inbuf, inbuf + used, inlen - used);
    inlen -= used;
    while (have < want) {
      ssize_t k = read(0, cmd + have, want - have);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(0);
      have += (size_t)k;
    }
    /* cmd: command bytes, NUL, name bytes, NUL */
    memmove(cmd + cmdlen + 1, cmd + cmdlen, namelen);
    cmd[cmdlen] = 0;
    cmd[cmdlen + 1 + namelen] = 0;
    rq.name = cmd + cmdlen + 1;
    rq.cmd = cmd;
    run(&rq);
    free(cmd);
  }
}
