#!/usr/bin/env bash
# kchaos set-up: idempotent, and fast when everything is already there.
#  1. Debian packages the harness needs (only the missing ones are installed)
#  2. a Docker engine (dockerd is started by hand when none answers)
#  3. the virtualenv .venv with the Python dependencies of pyproject.toml, at the versions of constraints.txt
#  4. a class-data-sharing archive of Spark's classes for the checker's JVM
#  5. the local node images of both Kafka versions (no registry) and the setting names each defines
# `scripts/setup.sh --print-packages` prints the Debian packages step 1 would install, and does nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKERD_LOG=${KCHAOS_DOCKERD_LOG:-/var/log/kchaos-dockerd.log}
DOCKERD_PIDFILE=/run/kchaos-dockerd.pid
PACKAGES=(iptables iproute2 e2fsprogs util-linux procps maven openjdk-17-jdk-headless chromium)
OS_RELEASE=${KCHAOS_OS_RELEASE:-/etc/os-release}

step() { printf '\033[1m== %s\033[0m\n' "$*"; }

# The packages the harness needs, one a line. Debian's docker.io only where there is no Docker at all: no
# engine answers and no dockerd is installed. Where one is (docker-ce and containerd.io, Docker Desktop, a
# dockerd of one's own), installing docker.io would conflict with it or replace it.
# mmdebstrap builds the node image's Debian base unless KCHAOS_BASE_IMAGE names a base of one's own; on a
# host that is not Debian (Ubuntu, ...) it needs Debian's keyring to check the suite it fetches.
wanted_packages() {
  if ! docker info >/dev/null 2>&1 && ! command -v dockerd >/dev/null 2>&1; then
    echo docker.io
  fi
  if [ -z "${KCHAOS_BASE_IMAGE:-}" ]; then
    echo mmdebstrap
    grep -qE '^ID="?debian"?$' "$OS_RELEASE" 2>/dev/null || echo debian-archive-keyring
  fi
  printf '%s\n' "${PACKAGES[@]}"
}

# The wanted packages dpkg does not have installed, one a line.
missing_packages() {
  local pkg
  for pkg in $(wanted_packages); do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
}

if [ "${1:-}" = "--print-packages" ]; then
  missing_packages
  exit 0
elif [ $# -gt 0 ]; then
  echo "setup.sh: unknown argument $1 (the only one is --print-packages)" >&2
  exit 2
fi

step "Debian packages"
mapfile -t missing < <(missing_packages)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "all present"
fi

step "Docker engine"
if docker info >/dev/null 2>&1; then
  echo "an engine answers"
else
  echo "starting dockerd (log: $DOCKERD_LOG)"
  nohup dockerd >"$DOCKERD_LOG" 2>&1 &
  echo $! >"$DOCKERD_PIDFILE"
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not come up; see $DOCKERD_LOG" >&2; tail -5 "$DOCKERD_LOG" >&2; exit 2; }
fi

step "Python virtualenv (.venv)"
PYTHON=$(command -v python3.11 || command -v python3)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.kchaos-deps
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)  # a new lock reinstalls
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  { .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -c constraints.txt -e '.[test,docs]'; } \
    >.venv/pip.log 2>&1 \
    || { tail -20 .venv/pip.log >&2; echo "pip install failed; see .venv/pip.log" >&2; exit 2; }
  echo "$want" >"$stamp"
else
  echo "up to date"
fi

step "Spark class archive (the checker's JVM starts from it)"
.venv/bin/python -m spark_analysis.make_class_archive

step "Node images and the setting names of each Kafka version"
# the default releases, and any the nightly names (KAFKA_VERSIONS="3.5.2 4.4.0"); each build's time is printed
.venv/bin/python -m clusters.prepare $(for v in ${KAFKA_VERSIONS:-}; do printf -- '--also %s ' "$v"; done)
