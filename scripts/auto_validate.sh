#!/usr/bin/env bash
# compress.auto against the fixed choices (docs/planner.md): for each link rate, VGG11 on
# synthetic CIFAR-shaped data under scripts/netem.sh (W workers, a link each), the median
# step of never-compress (none both ways), always-compress (method 5: top-k 1% + QSGD 16 with
# error feedback both ways) and compress.auto (the push codec per key among none, fp16 and
# method 5's, chosen for that rate; the pull method 5's). Rounds alternate the order, so a
# drift of the shared machine falls on every variant alike.
#
#   scripts/auto_validate.sh                             # 1gbit and 100mbit, 2 rounds
#   scripts/auto_validate.sh --rates "1gbit" --rounds 3 --model resnet20
#
# Options: --rates "1gbit 100mbit" (tc rates), --rounds N (2), --workers W (2), --steps K
# (measured steps per run, default 12; the first 2 are left out as warm-up), --model vgg11 |
# resnet20, --out DIR. Prints one line per rate and variant: the median step of rank 0 per
# round, their median, and auto's choice (keys per codec, from worker-0.log). Needs root
# (network namespaces) like netem.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
rates="1gbit 100mbit"
rounds=2
workers=2
steps=12
model=vgg11
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rates) rates=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "auto_validate.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "auto_validate.sh: --rounds '$rounds'?" >&2; exit 2; }
case $model in
  vgg11) config=configs/vgg11_cifar10_m5.yaml; msets=() ;;
  resnet20) config=configs/resnet18_cifar10_m5.yaml; msets=(--set model=resnet20) ;;
  *) echo "auto_validate.sh: model '$model' is not vgg11 or resnet20" >&2; exit 2 ;;
esac
out=${out:-runs/auto-validate/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
synth=runs/data/synthetic-cifar
[[ -f $synth/test_batch.bin ]] || /usr/bin/python3 scripts/synth_cifar.py "$synth" --train 5000 --test 500 >&2
sets=("${msets[@]}" --set dataset.name=cifar10 --set "dataset.path=$synth" --set train.threads=1
  --set sync.exchange=gradients)
gbps() { case $1 in *gbit) echo "${1%gbit}" ;;
  *mbit) awk -v r="${1%mbit}" 'BEGIN { print r / 1000 }' ;;
  *) echo "auto_validate.sh: rate '$1' (use Nmbit or Ngbit)" >&2; exit 2 ;; esac; }
printf "%-8s %-7s %-28s %9s  %s\n" rate variant "step ms per round" median choice
for rate in $rates; do
  declare -A got=()
  choice=""
  for ((r = 1; r <= rounds; r++)); do
    order="never always auto"
    ((r % 2 == 0)) && order="auto always never"
    for v in $order; do
      runs_file=$out/runs-$rate-$v-$r
      rm -f "$runs_file"
      case $v in
        never) vs=(--set "push={codec: none}" --set "pull={codec: none}") ;;
        always) vs=() ;;
        auto) vs=(--set compress.auto=true --set "compress.link_gbps=$(gbps "$rate")"
          --set compress.topology=links) ;;
      esac
      bash scripts/netem.sh --rate "$rate" --topology links --workers "$workers" "$config" \
        "${sets[@]}" "${vs[@]}" --max-steps "$steps" --runs-root "$out/runs" \
        --runs-file "$runs_file" >"$out/$rate-$v-$r.log" 2>&1 ||
        { echo "auto_validate.sh: the run failed, see $out/$rate-$v-$r.log" >&2; exit 1; }
      dir=$(cat "$runs_file")
      got[$v]+="$(/usr/bin/python3 scripts/median_step.py "$dir" 2) "
      if [[ $v == auto && -z $choice ]]; then
        # Keys that travel compressed at all (the others are none under every choice).
        choice=$(grep 'compress.auto: ' "$dir/worker-0.log" | grep -v 'compress.min_numel' |
          grep -o 'compress.auto: [^ ]*: [a-z0-9]*' | awk '{print $3}' | sort | uniq -c |
          awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
      fi
    done
  done
  for v in never always auto; do
    read -r -a xs <<<"${got[$v]}"
    med=$(printf "%s\n" "${xs[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
    printf "%-8s %-7s %-28s %9s  %s\n" "$rate" "$v" "${got[$v]}" "$med" \
      "$([[ $v == auto ]] && echo "$choice")" | tee -a "$out/points.txt"
  done
  unset got
done
echo "auto_validate.sh: $out/points.txt" >&2
