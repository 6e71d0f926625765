#!/usr/bin/env bash
# Lays out what the gradpress images add to Debian, as two root trees, so that each image gets
# it in ONE COPY layer (with the vfs storage driver every layer is a full copy of the image:
# one COPY after the package layer instead of five saves minutes per build):
#   OUT/server/   usr/local/bin/gradpress-server, opt/gradpress/{configs/,bin/entrypoint.sh,
#                 bin/health_check.py}
#   OUT/runtime/  usr/local/bin/gradpress-{server,worker[,sim]}, opt/gradpress/{configs/,
#                 bin/entrypoint.sh, bin/health_check.py, bin/launch_worker.sh}
# The binaries are copied and stripped. Used by docker/Dockerfile's build stage and by
# scripts/docker.sh images (docker/Dockerfile.prebuilt, binaries of an existing build tree).
#   stage.sh OUT SOURCE_DIR SERVER_BIN WORKER_BIN [SIM_BIN]
set -euo pipefail
[[ $# -ge 4 ]] || { echo "stage.sh: usage: stage.sh OUT SOURCE_DIR SERVER_BIN WORKER_BIN [SIM_BIN]" >&2; exit 2; }
out=$1 src=$2 server=$3 worker=$4 sim=${5:-}
for b in "$server" "$worker" $sim; do
  [[ -x "$b" ]] || { echo "stage.sh: no executable $b" >&2; exit 2; }
done
rm -rf "$out/server" "$out/runtime"
for image in server runtime; do
  mkdir -p "$out/$image/usr/local/bin" "$out/$image/opt/gradpress/bin"
  cp -r "$src/configs" "$out/$image/opt/gradpress/configs"
  cp "$src/docker/entrypoint.sh" "$src/docker/health_check.py" "$out/$image/opt/gradpress/bin/"
done
cp "$server" "$out/server/usr/local/bin/"
cp "$server" "$worker" $sim "$out/runtime/usr/local/bin/"
cp "$src/scripts/launch_worker.sh" "$out/runtime/opt/gradpress/bin/"
if command -v strip >/dev/null; then strip "$out"/*/usr/local/bin/*; fi
