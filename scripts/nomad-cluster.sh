#!/usr/bin/env bash
# A real multi-node Nomad cluster on one machine (what nomad/dev.hcl is to one node): one
# server and N client nodes (default 3), each client in a network namespace of its own on a
# private bridge, with the raw_exec driver. Needs root, `nomad` on PATH (1.1.2 is what CI
# runs), ip (iproute2), nsenter (util-linux) and curl. Nothing leaves the machine: the
# addresses are private ones on a bridge this script creates (no route, no NAT).
#
#   sudo scripts/nomad-cluster.sh up   [DIR]   # prints NOMAD_ADDR=... when the nodes are ready
#   sudo scripts/nomad-cluster.sh down [DIR]   # stops everything and removes what `up` made
#   sudo scripts/nomad-cluster.sh start-client I [DIR]   # starts client I's agent again (after a kill)
#
# DIR (default /tmp/slotpool-cluster) holds the configs, data dirs, logs and pid files.
# Settings (environment): SLOTPOOL_CLUSTER_PREFIX (default spc; names the bridge
# ${PREFIX}br, the namespaces ${PREFIX}n1.., the veths ${PREFIX}v1..), SLOTPOOL_CLUSTER_SUBNET
# (default 10.231.7: the server on .1, client i on .(10+i)), SLOTPOOL_CLUSTER_CLIENTS (3).
#
# Clients are started with `nsenter --net=/var/run/netns/NAME`, not `ip netns exec`: the
# latter remounts /sys, which hides the cgroup hierarchies from the client.
set -euo pipefail

cmd=${1:-}
dir=${2:-${SLOTPOOL_CLUSTER_DIR:-/tmp/slotpool-cluster}}
prefix=${SLOTPOOL_CLUSTER_PREFIX:-spc}
subnet=${SLOTPOOL_CLUSTER_SUBNET:-10.231.7}
clients=${SLOTPOOL_CLUSTER_CLIENTS:-3}
bridge=${prefix}br
server_ip=$subnet.1

die() { echo "nomad-cluster: $*" >&2; exit 1; }

stop_pid() { # pidfile: SIGINT, then SIGKILL after 15 s
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  # Clients first: what a client ran (task executors, sandbox servers) lives in its network
  # namespace and outlives the agent by design (Nomad reattaches to it), so every process
  # left in the namespace is killed with it.
  for i in $(seq "$clients"); do
    stop_pid "$dir/client$i.pid"
    if [ -e "/var/run/netns/${prefix}n$i" ]; then
      for pid in $(ip netns pids "${prefix}n$i" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
      for _ in $(seq 50); do [ -z "$(ip netns pids "${prefix}n$i" 2>/dev/null)" ] && break; sleep 0.1; done
      ip netns del "${prefix}n$i" 2>/dev/null || true # takes the veth pair with it
    fi
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  stop_pid "$dir/server.pid"
  ip link del "$bridge" 2>/dev/null || true
  if [ -d "$dir" ]; then
    # The sandbox servers' workspaces of this cluster's allocations (raw_exec without an image).
    for alloc in "$dir"/client*/data/alloc/*; do
      [ -d "$alloc" ] && rm -rf "/tmp/slotpool-nomad/$(basename "$alloc")"
    done
    # Nomad mounts a tmpfs per task (secrets); unmount before removing the data dirs.
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$dir"
  fi
}

wait_ready() { # every client ready with a healthy raw_exec driver
  local body ready
  for _ in $(seq 120); do
    body=$(curl -sf "http://$server_ip:4646/v1/nodes" 2>/dev/null || true)
    # "raw_exec":{"Attributes":{...},"Detected":true,"HealthDescription":"Healthy","Healthy":true,...}
    ready=$(printf '%s' "$body" | grep -o '"raw_exec":{"Attributes":{[^}]*},[^}]*"Healthy":true' | wc -l || true)
    nodes=$(printf '%s' "$body" | grep -o '"Status":"ready"' | wc -l || true)
    if [ "$ready" -ge "$clients" ] && [ "$nodes" -ge "$clients" ]; then return 0; fi
    sleep 0.5
  done
  echo "--- server log" >&2; tail -20 "$dir/server.log" >&2 || true
  for i in $(seq "$clients"); do echo "--- client $i log" >&2; tail -20 "$dir/client$i.log" >&2 || true; done
  die "the $clients clients were not ready with raw_exec within 60 s (last: $nodes ready, $ready with raw_exec)"
}

start_client() { # I: the client's agent in its namespace (its config and data dir are kept)
  local i=$1
  [ -f "$dir/client$i.hcl" ] || die "no client $i in $dir"
  setsid nsenter --net="/var/run/netns/${prefix}n$i" "$(command -v nomad)" agent -config "$dir/client$i.hcl" >>"$dir/client$i.log" 2>&1 </dev/null &
  echo $! >"$dir/client$i.pid"
}

check_up() { # before anything is made: a refusal here must not tear down someone else's cluster
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, and a Nomad client runs tasks as other users)"
  command -v nomad >/dev/null || die "no nomad on PATH (docs/nomad.md: 'A multi-node cluster on one machine')"
  for t in ip nsenter curl; do command -v "$t" >/dev/null || die "needs $t"; done
  [ ! -e "$dir/server.pid" ] || die "$dir already holds a cluster: run '$0 down $dir' first"
  if ip link show "$bridge" >/dev/null 2>&1; then die "a link named $bridge exists already (another cluster? set SLOTPOOL_CLUSTER_PREFIX)"; fi
  if ip -o -4 addr | grep -q " $subnet\."; then die "$subnet.0/24 is in use on this machine (set SLOTPOOL_CLUSTER_SUBNET)"; fi
}

up() {
  mkdir -p "$dir"
  local nomad
  nomad=$(command -v nomad)

  ip link add "$bridge" type bridge
  ip addr add "$server_ip/24" dev "$bridge"
  ip link set "$bridge" up

  # Fast heartbeats: a node that stops answering is declared down in seconds, not minutes.
  cat >"$dir/server.hcl" <<EOF
name       = "${prefix}-server"
# No call home: nothing of this cluster leaves the machine.
disable_update_check       = true
disable_anonymous_signature = true
datacenter = "dc1"
data_dir   = "$dir/server/data"
bind_addr  = "$server_ip"
server {
  enabled           = true
  bootstrap_expect  = 1
  heartbeat_grace   = "4s"
  min_heartbeat_ttl = "3s"
}
EOF
  setsid "$nomad" agent -config "$dir/server.hcl" >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/server.pid"

  for i in $(seq "$clients"); do
    local ns=${prefix}n$i ip=$subnet.$((10 + i))
    ip netns add "$ns"
    ip link add "${prefix}v$i" type veth peer name "${prefix}p$i"
    ip link set "${prefix}p$i" netns "$ns"
    ip -n "$ns" link set "${prefix}p$i" name eth0
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "${prefix}v$i" master "$bridge"
    ip link set "${prefix}v$i" up
    # Its own namespace: the default ports do not collide with the other clients'.
    cat >"$dir/client$i.hcl" <<EOF
name       = "${prefix}-node$i"
disable_update_check       = true
disable_anonymous_signature = true
datacenter = "dc1"
data_dir   = "$dir/client$i/data"
bind_addr  = "$ip"
client {
  enabled           = true
  servers           = ["$server_ip:4647"]
  network_interface = "eth0"
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
EOF
    start_client "$i"
  done
  wait_ready
  echo "NOMAD_ADDR=http://$server_ip:4646"
}

case "$cmd" in
  up)
    check_up
    # A failed start removes what it made.
    trap 'rc=$?; [ "$rc" = 0 ] || down; exit "$rc"' EXIT
    up
    ;;
  down) down ;;
  start-client)
    i=${2:-}
    dir=${3:-${SLOTPOOL_CLUSTER_DIR:-/tmp/slotpool-cluster}}
    [[ "$i" =~ ^[0-9]+$ ]] || die "usage: $0 start-client I [DIR]"
    start_client "$i"
    ;;
  *) die "usage: $0 up|down [DIR], or start-client I [DIR]" ;;
esac
