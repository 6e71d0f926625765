#!/usr/bin/env bash
# The reference BLAS against the installed one: `gradpress-bench train` run in alternated rounds,
# once with Debian's reference libblas.so.3 put in front (LD_LIBRARY_PATH) and once with the
# libblas.so.3 Debian's alternatives choose (OpenBLAS after scripts/setup.sh). Prints each
# round's single-process and parameter-server steps, their medians, and reference / installed.
#
#   scripts/blas_compare.sh                      # 3 rounds of 100 steps, configs/lenet_fmnist_m1.yaml
#   scripts/blas_compare.sh --rounds 5 --steps 200 -- --set cluster.workers=4
#
# Needs build/bench/gradpress-bench (BUILD_DIR to use another build) and Debian's libblas3
# (the reference; LibTorch's package depends on it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
steps=100
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "blas_compare.sh: unknown argument '$1' (expected --rounds N, --steps N, -- ARGS)" >&2
       exit 2 ;;
  esac
done

bench="${BUILD_DIR:-build}/bench/gradpress-bench"
[[ -x "$bench" ]] || { echo "blas_compare.sh: $bench not built (cmake --build build)" >&2; exit 2; }
triplet=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
ref_dir="/usr/lib/$triplet/blas"
[[ -e "$ref_dir/libblas.so.3" ]] || {
  echo "blas_compare.sh: no reference BLAS at $ref_dir (apt-get install libblas3)" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for which in reference installed; do
    env_args=()
    [[ $which == reference ]] && env_args=(LD_LIBRARY_PATH="$ref_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    echo "round $r: $which BLAS" >&2
    env "${env_args[@]}" "$bench" train --json --steps "$steps" "${extra[@]}" \
        >"$out/$which-$r.json" 2>"$out/$which-$r.err" || {
      cat "$out/$which-$r.err" >&2; exit 1; }
  done
done

/usr/bin/python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}  # (which, row label) -> [step_ms per round]
blas = {}
for which in ("reference", "installed"):
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{which}-{r}.json"):
            j = json.loads(line)
            label = f"{j['what']} (threads {j['threads']})" if j["what"] == "single" else j["what"]
            rows.setdefault((which, label), []).append(j["step_ms"])
            blas[which] = j["blas"]
for which in ("reference", "installed"):
    print(f"{which:9s} BLAS: {blas[which]}")
if "reference BLAS" not in blas["reference"]:
    sys.exit("blas_compare.sh: the reference rounds did not run on the reference BLAS")
labels = [l for (w, l) in rows if w == "reference"]
print(f"{'row':34s} {'reference ms':>24s} {'installed ms':>24s} {'ref/inst':>8s}")
for l in labels:
    a, b = rows[("reference", l)], rows[("installed", l)]
    fa = "/".join(f"{x:.1f}" for x in a)
    fb = "/".join(f"{x:.1f}" for x in b)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{l:34s} {fa:>24s} {fb:>24s} {ma / mb:7.2f}x")
EOF
