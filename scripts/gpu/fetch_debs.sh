#!/usr/bin/env bash
# Downloads, on this Debian 12 (bookworm) machine, the .deb files that the GPU machine lacks
# to build gradpress against the LibTorch inside its PyTorch: gRPC, protobuf (+ protoc and
# grpc_cpp_plugin), abseil, c-ares, re2, spdlog, fmt, yaml-cpp, CLI11, Catch2, OpenSSL and
# zlib headers, and their runtime libraries. It also copies the Fashion-MNIST IDX files.
#
#   scripts/gpu/fetch_debs.sh            # -> .gpu/debs/*.deb, .gpu/src.tar.gz (HEAD),
#                                        #    .gpu/data/fashion-mnist/*.gz
#   scripts/gpu/fetch_debs.sh --extract  # also dpkg -x them into .gpu/root (local check)
#
# .gpu/ is kept out of git through .git/info/exclude. Copy it with the checkout to the GPU
# machine, which extracts the debs itself
# (scripts/gpu/build_and_test.sh), since the .debs are smaller than the extracted tree.
set -euo pipefail
cd "$(dirname "$0")/../.."

PACKAGES=(
  # gRPC 1.51 and the code generator
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc
  # protobuf 3.21
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  # gRPC's dependencies (gRPCConfig.cmake finds each of them)
  libabsl-dev libabsl20220623 libc-ares-dev libc-ares2 libre2-dev libre2-9
  libssl-dev libssl3 zlib1g-dev zlib1g
  # logging, config, command line, tests
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7
  libcli11-dev catch2
  # the dashboard's Chart.js (server/CMakeLists.txt embeds it)
  libjs-chart.js
  # header-only, in case the wheel's public headers include <nlohmann/json.hpp>
  nlohmann-json3-dev
)

exclude=$(git rev-parse --git-common-dir)/info/exclude
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"

mkdir -p .gpu/debs
(cd .gpu/debs && rm -f ./*.deb && apt-get download "${PACKAGES[@]}")

# The source to build: a snapshot of HEAD, so that uncommitted edits in this checkout (which
# travels with every call) do not end up in the GPU build. .gp_commit records which commit.
git archive --format=tar HEAD >.gpu/src.tar
commit=$(git rev-parse HEAD)
tmp=$(mktemp -d)
echo "$commit" >"$tmp/.gp_commit"
tar -rf .gpu/src.tar -C "$tmp" .gp_commit
rm -rf "$tmp"
gzip -f .gpu/src.tar
echo "source: HEAD $commit -> .gpu/src.tar.gz"

# The dataset: gzipped IDX, as the Debian package dataset-fashion-mnist installs it.
src=/usr/share/datasets/fashion-mnist
mkdir -p .gpu/data/fashion-mnist
cp "$src"/*.gz .gpu/data/fashion-mnist/

if [[ "${1:-}" == "--extract" ]]; then
  rm -rf .gpu/root && mkdir -p .gpu/root
  for f in .gpu/debs/*.deb; do dpkg -x "$f" .gpu/root; done
  du -sh .gpu/root
fi
du -sh .gpu/debs .gpu/data .gpu/src.tar.gz
ls .gpu/debs | wc -l
