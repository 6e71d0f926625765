#!/usr/bin/env bash
# The test command: install what is missing, configure (Release), build, run ctest.
#
#   scripts/test.sh              # everything
#   scripts/test.sh --fast       # skip tests tagged [slow] (ctest label "slow")
#   BUILD_DIR=build-asan CMAKE_ARGS=-DGP_SANITIZE=address scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ctest_args=()
for arg in "$@"; do
  case "$arg" in
    --fast) ctest_args+=(-LE slow) ;;
    *) echo "test.sh: unknown argument '$arg' (expected --fast)" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
bash scripts/check_format.sh

BUILD_DIR=${BUILD_DIR:-build}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 1500 "${ctest_args[@]}"
