/*
 * slotpool-seccomp-filter: builds the seccomp filter every slot process runs under and
 * writes it, as a compiled classic-BPF program for this machine's architecture, to stdout
 * (bubblewrap loads it with `--seccomp FD`; src/sandbox/isolation/seccomp.ts runs this once
 * at server start and hands the bytes to every sandbox it starts).
 *
 * The policy is Docker's default profile for an unprivileged process (moby/profiles
 * seccomp/default.json v0.2.3, Apache-2.0; the copy shipped in sandbox-image/seccomp.json
 * is that file plus pivot_root), minus what a slot never needs and what has been a route
 * to the kernel's attack surface (docs/security-model.md says why for each):
 *  - allowed: Docker's unconditional list (ALLOW below) without the SysV message queue
 *    calls; ptrace, process_vm_readv/writev (Docker: kernel >= 4.8) unless --no-ptrace;
 *    the per-architecture calls Docker allows (arch_prctl, modify_ldt on x86-64; ...);
 *    personality with Docker's five values; clone without any namespace flag;
 *    socket for AF_UNIX and AF_NETLINK, and AF_INET/AF_INET6 with a stream, datagram or
 *    seqpacket type and a known protocol (no raw sockets, no IPPROTO_MPTCP);
 *  - clone3 answers ENOSYS: its flags sit in memory a filter cannot read, and libc then
 *    falls back to clone, which the filter checks;
 *  - refused with EPERM, by name: new namespaces (unshare, setns), io_uring, bpf,
 *    perf_event_open, userfaultfd, keyrings, kexec and modules, the mount APIs, SysV message
 *    queues, and the rest of Docker's capability-gated calls;
 *  - anything else answers ENOSYS, including syscall numbers this libseccomp does not know
 *    (a newer kernel's calls: libc treats ENOSYS as "not here" and falls back);
 *  - only the native ABI: a 32-bit (int 0x80) or x32 call answers ENOSYS too.
 *
 * Usage: slotpool-seccomp-filter [--no-ptrace] [--list]
 *   --list: print the allowed syscall names (one a line) instead of the program.
 * Build: cc -O2 -o slotpool-seccomp-filter seccomp-filter.c -lseccomp  (Debian: libseccomp-dev)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

/* Docker's default profile, its unconditional allow list, less msgctl/msgget/msgrcv/msgsnd. */
static const char *const ALLOW[] = {
  "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "cachestat", "capget",
  "capset", "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64",
  "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
  "clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat", "dup",
  "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
  "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat",
  "exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate",
  "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
  "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
  "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
  "ftruncate64", "futex", "futex_requeue", "futex_time64", "futex_wait", "futex_waitv",
  "futex_wake", "futimesat", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32",
  "geteuid", "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer",
  "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
  "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list",
  "getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday",
  "getuid", "getuid32", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init",
  "inotify_init1", "inotify_rm_watch", "io_cancel", "ioctl", "io_destroy", "io_getevents",
  "io_pgetevents", "io_pgetevents_time64", "ioprio_get", "ioprio_set", "io_setup", "io_submit",
  "ipc", "kill", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
  "lchown", "lchown32", "lgetxattr", "link", "linkat", "listen", "listmount", "listxattr",
  "listxattrat", "llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64",
  "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir",
  "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect",
  "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
  "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "mremap", "mseal", "msync", "munlock",
  "munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "_newselect", "open",
  "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc",
  "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl", "pread64", "preadv",
  "preadv2", "prlimit64", "process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev",
  "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom",
  "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "removexattrat",
  "rename", "renameat", "renameat2", "restart_syscall", "riscv_hwprobe", "rmdir", "rseq",
  "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
  "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
  "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max",
  "sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
  "sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
  "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl", "semget", "semop",
  "semtimedop", "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg",
  "sendto", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
  "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32", "setresgid",
  "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit",
  "set_robust_list", "setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid",
  "setuid32", "setxattr", "setxattrat", "shmat", "shmctl", "shmdt", "shmget", "shutdown",
  "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn", "socketcall", "socketpair",
  "splice", "stat", "stat64", "statfs", "statfs64", "statmount", "statx", "symlink", "symlinkat",
  "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
  "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
  "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
  "timerfd_settime64", "times", "tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname",
  "unlink", "unlinkat", "uretprobe", "utime", "utimensat", "utimensat_time64", "utimes", "vfork",
  "vmsplice", "wait4", "waitid", "waitpid", "write", "writev",
};

/* Per architecture, as Docker allows them. */
#if defined(__x86_64__)
static const char *const ALLOW_ARCH[] = {"arch_prctl", "modify_ldt"};
#elif defined(__aarch64__)
static const char *const ALLOW_ARCH[] = {"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"};
#else
#error "slotpool-seccomp-filter: only x86-64 and aarch64 are supported"
#endif

static const char *const PTRACE[] = {"ptrace", "process_vm_readv", "process_vm_writev"};

/* Refused with EPERM (a clear "not allowed") rather than ENOSYS. */
static const char *const REFUSE[] = {
  /* new namespaces and their mounts */
  "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr",
  "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr",
  /* kernel surfaces a slot never needs */
  "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd",
  "add_key", "keyctl", "request_key", "kexec_load", "kexec_file_load", "init_module", "finit_module",
  "delete_module", "msgget", "msgctl", "msgrcv", "msgsnd",
  /* the rest of Docker's capability-gated calls */
  "fanotify_init", "lookup_dcookie", "quotactl", "quotactl_fd", "setdomainname", "sethostname",
  "syslog", "reboot", "acct", "kcmp", "pidfd_getfd", "process_madvise", "iopl", "ioperm",
  "settimeofday", "stime", "clock_settime", "get_mempolicy", "mbind", "set_mempolicy",
  "set_mempolicy_home_node", "vhangup", "open_by_handle_at", "swapon", "swapoff", "nfsservctl",
  "lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr",
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int list_only = 0;

static void die(const char *what, int rc) {
  fprintf(stderr, "slotpool-seccomp-filter: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
  exit(1);
}

/* Adds `action` for `name` when this architecture has the call (Docker's list names every arch's calls). */
static void add(scmp_filter_ctx ctx, uint32_t action, const char *name) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR || nr < 0) return;
  if (list_only) {
    if (action == SCMP_ACT_ALLOW) printf("%s\n", name);
    return;
  }
  int rc = seccomp_rule_add(ctx, action, nr, 0);
  if (rc < 0) die(name, rc);
}

static void rule(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n, const struct scmp_arg_cmp *cmp) {
  if (list_only) return;
  int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
  if (rc < 0) die("conditional rule", rc);
}

int main(int argc, char **argv) {
  int ptrace = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-ptrace") == 0) ptrace = 0;
    else if (strcmp(argv[i], "--list") == 0) list_only = 1;
    else {
      fprintf(stderr, "usage: slotpool-seccomp-filter [--no-ptrace] [--list]\n");
      return 2;
    }
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
  if (!ctx) die("seccomp_init", ENOMEM);
  int rc;
  /* Other ABIs (int 0x80, x32) are not added to the filter: they get this action. */
  if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS))) < 0) die("bad-arch action", rc);
  /* bubblewrap sets no_new_privs itself; the exported program does not carry it anyway. */
  if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0) die("no_new_privs attribute", rc);
  /* A binary search over syscall numbers: fewer comparisons per call than a linear list. */
  (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

  for (size_t i = 0; i < N(ALLOW); i++) add(ctx, SCMP_ACT_ALLOW, ALLOW[i]);
  for (size_t i = 0; i < N(ALLOW_ARCH); i++) add(ctx, SCMP_ACT_ALLOW, ALLOW_ARCH[i]);
  for (size_t i = 0; i < N(PTRACE); i++) add(ctx, ptrace ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EPERM), PTRACE[i]);
  for (size_t i = 0; i < N(REFUSE); i++) add(ctx, SCMP_ACT_ERRNO(EPERM), REFUSE[i]);
  if (list_only) {
    printf("personality\nclone\nsocket\n");
    return 0;
  }

  /* personality: Docker's values (PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, query). */
  static const unsigned long PERSONAS[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffffUL};
  for (size_t i = 0; i < N(PERSONAS); i++) {
    struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, PERSONAS[i]);
    rule(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1, &c);
  }

  /* clone: only without namespace flags (the flags are the first argument on x86-64 and aarch64). */
  const unsigned long NS_FLAGS = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
  struct scmp_arg_cmp noNs = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0);
  rule(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, &noNs);
  /* ...and EPERM where any of them is set (one rule per flag: a filter tests bits, not "any"). */
  for (int bit = 0; bit < 64; bit++) {
    unsigned long flag = 1UL << bit;
    if (!(NS_FLAGS & flag)) continue;
    struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    rule(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &c);
  }
  /*
   * clone3: its flags are behind a pointer, which a filter cannot read. ENOSYS is also the
   * default action, so libseccomp refuses an explicit rule (EACCES): the default answers it.
   */
  if (!list_only && (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0 && rc != -EACCES) die("clone3", rc);

  /*
   * socket: the family, type and protocol are C ints, but a raw syscall() passes 64 bits
   * and the kernel reads the low 32: every comparison masks to 32 bits, or a value with
   * high bits set would slip past an equality the kernel then ignores.
   */
  const unsigned long LOW = 0xffffffffUL;
  static const int PLAIN_FAMILIES[] = {AF_UNIX, AF_NETLINK};
  for (size_t i = 0; i < N(PLAIN_FAMILIES); i++) {
    struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, LOW, (unsigned long)PLAIN_FAMILIES[i]);
    rule(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, &c);
  }
  static const int INET_FAMILIES[] = {AF_INET, AF_INET6};
  /* SOCK_TYPE_MASK (0xf): the type without SOCK_NONBLOCK / SOCK_CLOEXEC. */
  static const int TYPES[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET};
  /* 0 (the type's default), ping sockets, TCP, UDP, SCTP, UDP-Lite: not MPTCP, not raw. */
  static const int PROTOCOLS[] = {0, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_UDPLITE};
  for (size_t f = 0; f < N(INET_FAMILIES); f++)
    for (size_t t = 0; t < N(TYPES); t++)
      for (size_t p = 0; p < N(PROTOCOLS); p++) {
        struct scmp_arg_cmp c[3] = {
          SCMP_A0(SCMP_CMP_MASKED_EQ, LOW, (unsigned long)INET_FAMILIES[f]),
          SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (unsigned long)TYPES[t]),
          SCMP_A2(SCMP_CMP_MASKED_EQ, LOW, (unsigned long)PROTOCOLS[p]),
        };
        rule(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 3, c);
      }

  if ((rc = seccomp_export_bpf(ctx, STDOUT_FILENO)) < 0) die("seccomp_export_bpf", rc);
  seccomp_release(ctx);
  return 0;
}
