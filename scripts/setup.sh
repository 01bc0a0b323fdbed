#!/usr/bin/env bash
# Installs the Debian packages shoal needs to build, test, demo and benchmark — only those that
# are missing, so a second run costs nothing. Runs as root (or through sudo) on Debian/Ubuntu.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang clang-format libclang-rt-dev
  libfabric-dev libfabric-bin libfuse3-dev fuse3 liburing-dev libcurl4-openssl-dev
  libsqlite3-dev sqlite3 libhiredis-dev redis-server libssl-dev libcmocka-dev libjansson-dev
  etcd-server etcd-client
  nginx memcached iperf3 fio wrk time iproute2 procps psmisc util-linux curl python3
  prometheus python3-yaml systemd logrotate
)

# systemd brings systemd-analyze, with which test_deploy verifies the units in deploy/; logrotate
# checks deploy/logrotate/shoal (tests/integration/test_deploy.sh).

# clang and libclang-rt-dev (the default clang's libFuzzer and sanitizer runtimes) build the fuzz
# targets that scripts/fuzz.sh runs, also as a step of scripts/test.sh.

# Python package tests (tests/python): pytest, fsspec, numpy, pandas (reads a CSV through
# shoal://; pyarrow is not in Debian 12, so no Parquet check), PyTorch for the DataLoader example
# (python3-torch is large: about 600 MB installed), venv + setuptools + wheel for the offline
# `pip install ./python --no-build-isolation`.
PKGS+=(python3-pytest python3-fsspec python3-numpy python3-pandas python3-torch python3-venv
  python3-setuptools python3-wheel python3-pip)

# The s3:// tests run a real S3 server, s3rver, from npm, and make a TLS certificate with openssl.
# Node may come from elsewhere (NodeSource, nvm): ask Debian for it only when node or npm is absent.
PKGS+=(openssl)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PKGS+=(nodejs npm)
fi

# s3rver goes into the git-ignored .deps/ of this checkout, once.
install_s3rver() {
  local root
  root=$(cd "$(dirname "$0")/.." && pwd)
  [ -f "$root/.deps/node_modules/s3rver/bin/s3rver.js" ] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: no npm; the s3:// tests will be skipped" >&2
    return 0
  fi
  echo "setup: installing s3rver into $root/.deps" >&2
  npm install --prefix "$root/.deps" --no-audit --no-fund --loglevel=error s3rver@3.7.1 >/dev/null
}

# A fork of s3rver that implements UploadPartCopy (s3rver 3.7.1 answers 501), for
# tests/python/test_s3_copy.py: into .deps/s3rver-fork, once.
install_s3rver_fork() {
  local root
  root=$(cd "$(dirname "$0")/.." && pwd)
  [ -f "$root/.deps/s3rver-fork/node_modules/@20minutes/s3rver/package.json" ] && return 0
  command -v npm >/dev/null 2>&1 || return 0
  echo "setup: installing @20minutes/s3rver into $root/.deps/s3rver-fork" >&2
  npm install --prefix "$root/.deps/s3rver-fork" --no-audit --no-fund --loglevel=error \
    @20minutes/s3rver@5.0.0 >/dev/null
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  install_s3rver
  install_s3rver_fork
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "setup: missing packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt (unattended-upgrades on a fresh machine, a second setup) may hold the dpkg lock:
# wait for it rather than fail at once.
APT=(apt-get -o DPkg::Lock::Timeout=600)
$SUDO "${APT[@]}" update -q >/dev/null
# Package scripts may try to start services (nginx, redis, memcached, prometheus); tests start
# their own, on ports of their own.
$SUDO "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}" >/dev/null
install_s3rver
install_s3rver_fork
