#!/usr/bin/env bash
# Builds the sandbox image (sandbox-image/Dockerfile) on a machine that reaches no image
# registry: the tests' and CI's way to get a real image. Users do not need this script:
#
#   docker build -f sandbox-image/Dockerfile -t slotpool-sandbox:local .
#
# pulls the official base (node:20-bookworm-slim) and is the documented command.
#
#   scripts/build-sandbox-image.sh [TAG]      # TAG defaults to slotpool-sandbox:local
#
# 1. When the Dockerfile's base image (its FROM name) is not present locally, builds a
#    stand-in from Debian's packages: mmdebstrap --variant=minbase bookworm, plus this
#    machine's own node binary and npm (Debian's nodejs is older than the project's Node
#    >= 20.18), imported with `docker import` under the FROM name so the unchanged Dockerfile
#    builds. An already present base (e.g. the pulled official one) is used as it is.
# 2. docker build --network host (CI's engine runs with --iptables=false, so the default
#    bridge has no way out), with the machine's CA settings: where NODE_EXTRA_CA_CERTS /
#    SSL_CERT_FILE name a CA bundle (an egress proxy's CA, say), the stand-in base holds a
#    copy of that bundle and points NODE_EXTRA_CA_CERTS/SSL_CERT_FILE at it, so npm, curl
#    and git inside the build trust what the host trusts. (A stand-in base only: it is a
#    test image for this machine; the official base holds no such thing.)
#
# Needs root (mmdebstrap, docker), docker.io, mmdebstrap, and a Docker engine that answers
# (.ci/docker-engine.sh starts one). Environment: SLOTPOOL_DEBIAN_MIRROR (default
# http://deb.debian.org/debian).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-slotpool-sandbox:local}
dockerfile="$repo/sandbox-image/Dockerfile"
mirror=${SLOTPOOL_DEBIAN_MIRROR:-http://deb.debian.org/debian}

die() { echo "build-sandbox-image: $*" >&2; exit 1; }
command -v docker >/dev/null 2>&1 || die "no docker on PATH (apt-get install -y docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start one: .ci/docker-engine.sh, as root)"

# The base every stage starts FROM (all stages use the same one).
base=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$dockerfile")
[ -n "$base" ] || die "no FROM line in $dockerfile"

# The CA bundle the host's tools are told to trust, if any.
ca_file=""
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE CURL_CA_BUNDLE; do
  f=${!v:-}
  if [ -n "$f" ] && [ -f "$f" ]; then ca_file=$f; break; fi
done

build_base() {
  command -v mmdebstrap >/dev/null 2>&1 || die "$base is not present and mmdebstrap is missing (apt-get install -y mmdebstrap), or pull $base"
  [ "$(id -u)" = 0 ] || die "$base is not present; building a stand-in needs root (or pull $base)"
  local node npm_dir tmp ca_in_image=/usr/local/share/slotpool-host-ca/ca-bundle.crt
  node=$(command -v node) || die "no node on PATH to copy into the stand-in base"
  node=$(readlink -f "$node")
  npm_dir=$(readlink -f "$(dirname "$node")/../lib/node_modules/npm")
  [ -f "$npm_dir/bin/npm-cli.js" ] || die "npm not found next to $node (looked in $npm_dir)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  # The official image keeps node and npm under /usr/local; do the same.
  mkdir -p "$tmp/usr/local/bin" "$tmp/usr/local/lib/node_modules"
  cp "$node" "$tmp/usr/local/bin/node"
  cp -a "$npm_dir" "$tmp/usr/local/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$tmp/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$tmp/usr/local/bin/npx"
  local changes=(--change 'CMD ["node"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
  if [ -n "$ca_file" ]; then
    mkdir -p "$tmp$(dirname "$ca_in_image")"
    cp "$ca_file" "$tmp$ca_in_image"
    changes+=(--change "ENV NODE_EXTRA_CA_CERTS=$ca_in_image" --change "ENV SSL_CERT_FILE=$ca_in_image")
    echo "build-sandbox-image: the stand-in base trusts the host's CA bundle ($ca_file)" >&2
  fi
  echo "build-sandbox-image: $base is not present; building a stand-in (mmdebstrap minbase bookworm + node $("$node" --version))" >&2
  # libstdc++6: node's own dependency (minbase has it through apt, named here to be sure).
  mmdebstrap --quiet --variant=minbase --include=libstdc++6 \
    --customize-hook="sync-in $tmp /" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$tmp/rootfs.tar" "$mirror"
  docker import "${changes[@]}" "$tmp/rootfs.tar" "$base" >/dev/null
  docker run --rm --network none "$base" node -e 'process.exit(0)' || die "the stand-in base's node does not run"
  echo "build-sandbox-image: imported $base" >&2
}

if docker image inspect "$base" >/dev/null 2>&1; then
  echo "build-sandbox-image: using the present $base" >&2
else
  build_base
fi

echo "build-sandbox-image: docker build -f sandbox-image/Dockerfile -t $tag --network host ." >&2
# The legacy builder when buildx is absent (Debian's docker.io ships none); it needs no registry.
if ! docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=0; fi
docker build --network host -f "$dockerfile" -t "$tag" "$repo"
