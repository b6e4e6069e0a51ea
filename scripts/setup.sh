#!/usr/bin/env bash
# Sets up a fresh Debian machine for slotpool: the system tools the sandbox needs
# (bubblewrap for isolation, libseccomp for the slots' seccomp filter, tmux for stateful
# terminals, a C compiler for the sandbox's fast path), then the npm dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v tar >/dev/null 2>&1 || need+=(tar)
# A C compiler for the sandbox's per-slot spawner (the fast path; compiled at first server
# start). Without it the server still works, one bubblewrap per call (slower).
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
# libseccomp (headers + library): the server builds the seccomp filter every slot process runs
# under with it (src/sandbox/native/seccomp-filter.c, compiled at first start); without it the
# server refuses to start (fail closed), as without bubblewrap.
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
# Ordinary agent tools the seccomp filter must leave working (test/security/workloads.test.ts
# runs each inside a slot): small Debian packages.
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v gdb >/dev/null 2>&1 || need+=(gdb)
command -v git >/dev/null 2>&1 || need+=(git)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# getfattr/setfattr (attr): E2B file metadata is user xattrs the server reads and writes with
# them inside the slot (src/e2b/file-metadata.ts); E2B code sets them with setfattr too.
command -v setfattr >/dev/null 2>&1 || need+=(attr)
# The security suite runs a small Python program inside a slot (test/security/fixtures).
command -v python3 >/dev/null 2>&1 || need+=(python3)
# `python` as well as `python3` in a slot (python-is-python3: the /usr/bin/python link): E2B
# code and E2B's own tests run `python -m http.server` (test/e2b/upstream), agents do too.
[ -e /usr/bin/python ] || need+=(python-is-python3)
# openssl: the tests make a throwaway CA and certificate for the E2B server's HTTPS port
# (test/support/test-tls.ts).
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# ca-certificates: the bundle E2B's suites bind their fake internet's CA over, in a mount
# namespace of their own (test/e2b/upstream/fake-internet.ts); curl in a slot reads it.
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# The tests' virtualenv of real Python clients (scripts/setup-python.sh) needs venv support in
# the system's python3, which a non-root user runs (Debian splits it into python3-venv).
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then need+=(python3-venv)
  else echo "setup: optional: python3-venv lets the tests run the real Python clients (sudo apt-get install -y python3-venv)" >&2; fi
fi
# Chromium: the slots' browser tools (each slot's browser runs the host's /usr/lib/chromium
# inside the slot's sandbox, docs/browser.md) and the report's browser tests (test/report),
# driven by playwright-core, which never downloads a browser of its own. Large (~300 MB with
# its libraries).
[ -x /usr/bin/chromium ] || need+=(chromium)
# Network on = the internet, never the host: slirp4netns links each network-on slot's own
# namespace out; unshare (util-linux) and ip (iproute2) set it up; the tests curl from a slot.
command -v slirp4netns >/dev/null 2>&1 || need+=(slirp4netns)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
# tini: the image's init (PID 1, reaps orphans); test/sandbox/image-entrypoint.test.ts runs the
# image's ENTRYPOINT as written, tini first.
command -v tini >/dev/null 2>&1 || need+=(tini)
# nft confines the DNS forwarder of a network-on slot to DNS (port 53); without it the
# server turns the forwarder off (src/sandbox/isolation/network.ts).
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
# bash-static: the sandbox's per-call bash without the dynamic loader's work (about a quarter
# of each call's exec CPU, docs/performance.md); optional: without it calls run /bin/bash.
if [ ! -x /bin/bash-static ]; then
  if [ "$(id -u)" = 0 ]; then need+=(bash-static)
  else echo "setup: optional: bash-static makes each bash call cheaper (sudo apt-get install -y bash-static)" >&2; fi
fi
# Task images (docs/images.md): skopeo fetches them (registries, the Docker engine, OCI
# layouts, archives); a slot whose root is an image runs static tools of ours, never the
# image's: busybox-static (its helpers' applets) beside bash-static; GNU tar unpacks layers.
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need+=(busybox-static)
# The image tests run their own registry on loopback (Debian's docker-registry) and build a
# Debian image with python3 from mmdebstrap (test/support/test-images.ts).
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: please install ${need[*]} (e.g. sudo apt-get install -y ${need[*]})" >&2
    exit 1
  fi
fi

# Exactly the locked dependencies. The lock is complete for every platform: rollup is pinned
# (package.json "overrides") to a release whose platform packages are all published.
echo "setup: npm ci (the locked dependencies)…" >&2
npm ci --no-audit --no-fund --loglevel=error

# The real Python clients (E2B SDK, OpenEnv client) for the tests that use them; never fatal.
./scripts/setup-python.sh
