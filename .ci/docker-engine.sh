#!/usr/bin/env bash
# CI: makes sure a Docker engine answers. When `docker info` already works, does nothing;
# otherwise (root only) starts Debian's dockerd in the background and waits until it answers.
#
#   .ci/docker-engine.sh            # exit 0 when an engine answers, 1 (with the reason) if not
#
# --iptables=false: the CI machines may not load netfilter tables; image builds then use
# `--network host` (scripts/build-sandbox-image.sh) and containers publish no ports.
# The engine keeps running after this script (later steps and other jobs share it); its log
# is $SLOTPOOL_DOCKERD_LOG (default /var/log/slotpool-dockerd.log).
set -uo pipefail
log=${SLOTPOOL_DOCKERD_LOG:-/var/log/slotpool-dockerd.log}
wait_s=${SLOTPOOL_DOCKERD_WAIT:-60}

if docker info >/dev/null 2>&1; then
  echo "docker-engine: an engine already answers" >&2
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  echo "docker-engine: no dockerd/docker on PATH; install Debian's docker.io (apt-get install -y docker.io)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "docker-engine: no engine answers and only root can start one (run this as root)" >&2
  exit 1
fi

echo "docker-engine: starting dockerd --iptables=false (log: $log)" >&2
# setsid + nohup: the engine outlives this script and the CI step's process group.
setsid nohup dockerd --iptables=false >>"$log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 "$wait_s"); do
  if docker info >/dev/null 2>&1; then
    echo "docker-engine: dockerd (pid $pid) answers" >&2
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "docker-engine: dockerd exited; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  sleep 1
done
echo "docker-engine: dockerd (pid $pid) did not answer within ${wait_s}s; last lines of $log:" >&2
tail -n 20 "$log" >&2
exit 1
