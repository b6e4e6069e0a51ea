/*
 * slotpool port relay: one TCP connection to a port inside a slot's network namespace (the
 * one its process sessions share, slot-netns.ts), relayed over fd 3, a socket whose other
 * end the sandbox server holds (isolation/port-relay.ts).
 *
 *   port-relay <holder-pid> <port>
 *
 *   1. joins the holder's user namespace, then its network namespace (setns through
 *      /proc/<pid>/ns/{user,net}: the server is root, or the owner of that user namespace);
 *   2. becomes uid/gid 0 of that user namespace, which is the slot's uid on the host (a plain
 *      slot's holder maps the slot's uid to 0; an image slot's namespace maps 0 to it), no new
 *      privileges: it holds nothing of the host's;
 *   3. connects to 127.0.0.1:<port>, else [::1]:<port>, and prints one line on stdout:
 *      "ok" or "refused <reason>" (then exits 2);
 *   4. copies bytes both ways until both have ended, passing each side's end on
 *      (shutdown(SHUT_WR)); an error on either side ends it.
 *
 * Nothing of the host's network is reachable from inside that namespace: the relay reaches
 * what the slot's own commands reach on their loopback, no more. It runs no slot code and
 * dies with its server (PR_SET_PDEATHSIG).
 *
 * Why C: Node cannot enter a namespace, and a process per connection must start in about a
 * millisecond (one exec, libc only).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 65536

static void refuse(const char *what) {
  printf("refused %s: %s\n", what, strerror(errno));
  fflush(stdout);
  exit(2);
}

static long number(const char *s, long max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0 || v > max) {
    fprintf(stderr, "port-relay: bad number %s\n", s);
    exit(64);
  }
  return v;
}

static int dial(int family, int port) {
  int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int rc;
  if (family == AF_INET) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(s, (struct sockaddr *)&a, sizeof a);
  } else {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    rc = connect(s, (struct sockaddr *)&a, sizeof a);
  }
  if (rc < 0) {
    int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

/* One direction of the relay: bytes read from `from`, not yet written to `to`. */
struct way {
  int from, to;
  char buf[BUF];
  size_t len, off;
  int ended;
};

/* Reads what `w.from` has; at its end passes the end on. 0: go on, -1: the relay is over. */
static int pull(struct way *w) {
  ssize_t n = read(w->from, w->buf, BUF);
  if (n > 0) {
    w->len = (size_t)n;
    w->off = 0;
    return 0;
  }
  if (n == 0) {
    w->ended = 1;
    shutdown(w->to, SHUT_WR);
    return 0;
  }
  return errno == EAGAIN || errno == EINTR ? 0 : -1;
}

static int push(struct way *w) {
  ssize_t n = write(w->to, w->buf + w->off, w->len - w->off);
  if (n > 0) {
    w->off += (size_t)n;
    if (w->off == w->len) w->len = w->off = 0;
    return 0;
  }
  return errno == EAGAIN || errno == EINTR ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: port-relay <holder-pid> <port>\n");
    return 64;
  }
  long pid = number(argv[1], 1L << 30);
  int port = (int)number(argv[2], 65535);
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);

  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
  int userns = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
  int netns = open(path, O_RDONLY | O_CLOEXEC);
  if (userns < 0 || netns < 0) refuse("the slot's network namespace is gone");
  if (setns(userns, CLONE_NEWUSER) < 0 || setns(netns, CLONE_NEWNET) < 0) refuse("cannot enter the slot's network namespace");
  close(userns);
  close(netns);
  /* Root of the slot's user namespace = the slot's uid on the host. setgroups may be denied
     there ("deny" in setgroups): the supplementary groups are then already none. */
  setgroups(0, NULL);
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) refuse("cannot become the slot's user");
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);

  int up = dial(AF_INET, port);
  if (up < 0 && (errno == ECONNREFUSED || errno == EADDRNOTAVAIL || errno == ENETUNREACH)) up = dial(AF_INET6, port);
  if (up < 0) refuse("nothing listens on that port");
  printf("ok\n");
  fflush(stdout);
  close(1);

  int down = 3;
  fcntl(down, F_SETFL, fcntl(down, F_GETFL) | O_NONBLOCK);
  fcntl(up, F_SETFL, fcntl(up, F_GETFL) | O_NONBLOCK);
  static struct way in, out;
  in.from = down, in.to = up;   /* client → port */
  out.from = up, out.to = down; /* port → client */
  struct way *ways[2] = {&in, &out};
  while (!(in.ended && in.len == 0 && out.ended && out.len == 0)) {
    struct pollfd p[2] = {{.fd = down}, {.fd = up}};
    for (int i = 0; i < 2; i++) {
      struct way *w = ways[i];
      struct pollfd *pf = w->from == down ? &p[0] : &p[1];
      struct pollfd *pt = w->to == down ? &p[0] : &p[1];
      if (w->len > 0) pt->events |= POLLOUT;
      else if (!w->ended) pf->events |= POLLIN;
    }
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < 2; i++) {
      struct way *w = ways[i];
      struct pollfd *pf = w->from == down ? &p[0] : &p[1];
      struct pollfd *pt = w->to == down ? &p[0] : &p[1];
      if (w->len > 0 && (pt->revents & (POLLOUT | POLLERR | POLLHUP)) && push(w) < 0) return 0;
      else if (w->len == 0 && !w->ended && (pf->revents & (POLLIN | POLLERR | POLLHUP)) && pull(w) < 0) return 0;
    }
  }
  return 0;
}
