#!/usr/bin/env bash
# `pip install .` as a user runs it (docs/python.md): a fresh virtual environment with the
# system's site packages (Debian's python3-torch stays visible), `pip install
# --no-build-isolation .` offline, then, from a directory outside the checkout and without
# PYTHONPATH, `python -m gradpress.launch` runs a 2-worker job of examples/torch_fashion_mnist.py
# (method 5, 20 steps) with the server binary the package installed. The build reuses
# BUILD_DIR (GRADPRESS_BUILD_DIR), so only its two targets are brought up to date.
# Exit 77 (skipped) when the extension was not built or the interpreter has no venv module.
#   pip_install_test.sh BUILD_DIR PYTHON
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! compgen -G "$build/python/gradpress/_C*.so" >/dev/null; then
  echo "gradpress._C is not built in $build/python: skipped"
  exit 77
fi
tmp=$(mktemp -d /tmp/gp-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
  cat "$tmp/venv.log"
  echo "no working venv module for $python (python3-venv): skipped"
  exit 77
fi
venv_py="$tmp/venv/bin/python"
echo "== pip install --no-build-isolation $root (GRADPRESS_BUILD_DIR=$build)"
GRADPRESS_BUILD_DIR="$build" "$venv_py" -m pip install --no-build-isolation --no-index -q "$root"

mkdir "$tmp/job"
cd "$tmp/job"
unset PYTHONPATH GRADPRESS_SERVER_BIN
echo "== the installed package, from $tmp/job"
"$venv_py" - "$tmp/venv" <<'PY'
import sys
import gradpress, gradpress._C, gradpress.torch
from gradpress import launch
venv = sys.argv[1]
for what, path in (("gradpress", gradpress.__file__), ("gradpress._C", gradpress._C.__file__),
                   ("gradpress-server", launch.find_server_bin(None))):
    print(f"{what}: {path}")
    assert path.startswith(venv), f"{what} comes from {path}, not the virtual environment {venv}"
PY
test -x "$tmp/venv/bin/gradpress-launch"

echo "== a 2-worker job from $tmp/job"
"$venv_py" -m gradpress.launch --workers 2 "$root/configs/lenet_fmnist_m5.yaml" \
    "$root/examples/torch_fashion_mnist.py" --max-steps 20 2>&1 | tee "$tmp/launch.log"
grep -q "all 2 worker(s) exited 0" "$tmp/launch.log"
summary=$(find "$tmp/job" -name summary.json | head -1)
[[ -n "$summary" ]] || { echo "pip_install_test: no summary.json under $tmp/job" >&2; exit 1; }
"$venv_py" - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"summary: steps {s['steps']}, bytes up/step {s['bytes_up_per_step']:.0f}")
assert s["steps"] == 20, s["steps"]
assert 0 < s["bytes_up_per_step"] < 5000, s["bytes_up_per_step"]  # method 5's payload
PY
echo "pip_install_test: passed"
