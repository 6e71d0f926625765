#!/usr/bin/env bash
# Fails (exit 1) listing every C++ file of the tree (tracked, or new and not ignored) that
# clang-format (.clang-format, Google base) would change. `--fix` rewrites them instead; a new
# file is checked before its first commit, as a fresh clone's CI will check it.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null ||
  find . -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check_format: clang-format would change: ${bad[*]}" >&2
  echo "check_format: run scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files clean"
