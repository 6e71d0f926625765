#!/usr/bin/env bash
# gradpress-server links no LibTorch: `readelf -d` lists none of its libraries as NEEDED.
# Usage: no_torch_test.sh path/to/gradpress-server
set -euo pipefail
bin=$1
command -v readelf >/dev/null || { echo "readelf not found (binutils)"; exit 77; }
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[[ -n $needed ]] || { echo "FAIL: readelf -d $bin lists no NEEDED libraries"; exit 1; }
if grep -E '^(libtorch|libc10)' <<<"$needed"; then
  echo "FAIL: $bin links LibTorch (above)"
  exit 1
fi
echo "ok: $bin needs $(wc -l <<<"$needed") libraries, none of them LibTorch"
