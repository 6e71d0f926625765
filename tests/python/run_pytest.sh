#!/usr/bin/env bash
# ctest's entry to the gradpress.torch tests (tests/python/*.py): pytest with the build tree's
# extension and the source package on PYTHONPATH. Exit 77 (skipped) when the extension was not
# built (no python3-dev, pybind11-dev or python3-torch at configure time) or pytest is missing.
#   run_pytest.sh BUILD_DIR PYTHON [pytest args...]
set -euo pipefail
build=$1
python=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! compgen -G "$build/python/gradpress/_C*.so" >/dev/null; then
  echo "gradpress._C is not built in $build/python: skipped"
  exit 77
fi
if ! "$python" -c "import pytest" 2>/dev/null; then
  echo "no pytest for $python (python3-pytest): skipped"
  exit 77
fi
cd "$root"
PYTHONPATH="$build/python:$root/python" GP_BUILD_DIR="$build" \
  exec "$python" -m pytest -q -p no:cacheprovider tests/python "$@"
