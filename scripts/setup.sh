#!/usr/bin/env bash
# Installs, from Debian packages, what gradpress needs to build, test and run.
# Idempotent and non-interactive: packages already present are skipped, and apt is
# called only when something is missing. Works as root or through sudo.
#
#   scripts/setup.sh            # install what is missing
#   scripts/setup.sh --check    # only list what is missing (exit 1 if anything is)
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ccache git
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libcli11-dev catch2 libyaml-cpp-dev zlib1g-dev
  dataset-fashion-mnist
  clang-format gnuplot-nox iproute2 procps
  docker-compose python3-grpcio python3-yaml
  python3-dev pybind11-dev python3-torch python3-pytest fortunes
  python3-venv python3-setuptools python3-wheel
  openssl curl clang-14 libclang-rt-14-dev llvm-14
  slurm-wlm munge
  libjs-chart.js chromium fonts-dejavu-core
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "setup: missing: ${missing[*]}"
  exit 1
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
