#!/usr/bin/env bash
# Downloads a real dataset from its official location, checks the published MD5 of every file
# and puts it where gradpress's loaders (worker/data/idx.h, worker/data/cifar.h) read it.
#
#   scripts/get_data.sh mnist|fashion-mnist|cifar10 [DIR]     # DIR: data (from the cwd)
#
#   mnist          -> DIR/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
#   fashion-mnist  -> DIR/fashion-mnist/ (the same four file names)
#   cifar10        -> DIR/cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin, ...
#
# dataset.path is that folder: configs/*_cifar10_* read data/cifar-10-batches-bin and
# configs/lenet_mnist_m1.yaml data/mnist, from the repo root. The IDX files stay gzipped (the
# loader reads .gz). Everything is fetched into a temporary
# folder inside DIR, checked, and only then renamed into place: a failed download, an HTTP
# error, a checksum mismatch or a damaged archive exits 1 naming the file (and the expected
# and actual MD5) and leaves DIR as it was. Files already present with the right MD5 are kept
# (for cifar10: a complete cifar-10-batches-bin); a present file with another MD5 is replaced
# once its new copy has been verified. Needs curl or wget, md5sum, and tar for cifar10.
#
# Environment (for mirrors and for tests/deploy/get_data_test.sh):
#   GRADPRESS_DATA_URL=URL        base URL instead of the official one; file names are
#                                 appended to it (end it with /)
#   GRADPRESS_DATA_MD5S=FILE      expected MD5s instead of the published ones, in md5sum's
#                                 output format ("md5  name" per line); names not listed keep
#                                 the published MD5
#   GRADPRESS_DOWNLOADER=curl|wget  which tool to use (default: curl if present, else wget)
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
  echo "get_data: $*" >&2
  exit 1
}

case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  mnist | fashion-mnist | cifar10) ;;
  "") usage >&2; exit 2 ;;
  *) echo "get_data: unknown dataset '$1'; known: mnist, fashion-mnist, cifar10" >&2; exit 2 ;;
esac
[[ $# -le 2 ]] || { echo "get_data: too many arguments; usage: get_data.sh DATASET [DIR]" >&2; exit 2; }
dataset=$1
dir=${2:-data}
[[ $dir == / ]] || dir=${dir%/}

# Official sources and their published MD5s: MNIST from the mirror torchvision uses (its
# datasets/mnist.py lists the same four MD5s), Fashion-MNIST as in zalandoresearch/fashion-mnist's
# README, CIFAR-10's binary version as on https://www.cs.toronto.edu/~kriz/cifar.html.
case $dataset in
  mnist)
    base=https://ossci-datasets.s3.amazonaws.com/mnist/
    target=mnist
    files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
      t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
    md5s=(f68b3c2dcbeaaa9fbdd348bbdeb94873 d53e105ee54ea40749a09fcbcd1e9432
      9fb629c4189551a2d022fa330f9573f3 ec29112dd5afa0611ce80d1b7f02629c)
    ;;
  fashion-mnist)
    base=http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/
    target=fashion-mnist
    files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
      t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
    md5s=(8d4fb7e6c68d591d4c3dfef9ec88bf0d 25c81989df183df01b3e8a0aad5dffbe
      bef4ecab320f06d8554ea6380940ec79 bb300cfdad3c16e7a12a480ee83cd310)
    ;;
  cifar10)
    base=https://www.cs.toronto.edu/~kriz/
    target=cifar-10-batches-bin
    files=(cifar-10-binary.tar.gz)
    md5s=(c32a1d4ab5d03f1284b67883e8d87530)
    ;;
esac
cifar_batches=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin
  data_batch_5.bin test_batch.bin)
base=${GRADPRESS_DATA_URL:-$base}

if [[ -n "${GRADPRESS_DATA_MD5S:-}" ]]; then
  [[ -r $GRADPRESS_DATA_MD5S ]] || die "GRADPRESS_DATA_MD5S=$GRADPRESS_DATA_MD5S: cannot read it"
  for i in "${!files[@]}"; do
    # md5sum's format: "MD5  NAME" or "MD5 *NAME" (binary mode).
    override=$(awk -v f="${files[i]}" '{n = $2; sub(/^\*/, "", n)} n == f {print $1; exit}' \
      "$GRADPRESS_DATA_MD5S")
    [[ -z $override ]] || md5s[i]=$override
  done
fi
for m in "${md5s[@]}"; do
  [[ $m =~ ^[0-9a-f]{32}$ ]] || die "'$m' is not an MD5 (32 lowercase hex digits)"
done

downloader=${GRADPRESS_DOWNLOADER:-}
if [[ -z $downloader ]]; then
  if command -v curl >/dev/null; then downloader=curl
  elif command -v wget >/dev/null; then downloader=wget
  else die "needs curl or wget (scripts/setup.sh installs curl)"; fi
fi
[[ $downloader == curl || $downloader == wget ]] || die "GRADPRESS_DOWNLOADER=$downloader: curl or wget"
command -v "$downloader" >/dev/null || die "$downloader not found"
command -v md5sum >/dev/null || die "md5sum not found (coreutils)"
[[ $dataset != cifar10 ]] || command -v tar >/dev/null || die "tar not found"

md5_of() { md5sum <"$1" | cut -d' ' -f1; }

# A cifar-10-batches-bin as the loader wants it: the six batches, each a positive multiple of
# 3073 bytes (one label byte + 3x32x32 pixels per record).
cifar_complete() {
  local f size
  for f in "${cifar_batches[@]}"; do
    [[ -f $1/$f ]] || return 1
    size=$(stat -c %s "$1/$f")
    ((size > 0 && size % 3073 == 0)) || return 1
  done
}

# Creates DIR if needed and remembers which folders it made, so that a failure removes them.
created=()
probe=$dir
while [[ ! -e $probe ]]; do
  created+=("$probe")
  probe=$(dirname "$probe")
done
if [[ -e $dir && ! -d $dir ]]; then die "$dir exists and is not a folder"; fi
if [[ -e $dir/$target && ! -d $dir/$target ]]; then die "$dir/$target exists and is not a folder"; fi

# What is already in place.
todo=()
if [[ $dataset == cifar10 ]]; then
  if cifar_complete "$dir/$target"; then
    echo "get_data: cifar10: $dir/$target is complete (${#cifar_batches[@]} batches); nothing to do"
    exit 0
  fi
  [[ ! -e $dir/$target ]] || echo "get_data: cifar10: $dir/$target is incomplete; it will be replaced"
  todo=(0)
else
  for i in "${!files[@]}"; do
    f=$dir/$target/${files[i]}
    if [[ -f $f ]]; then
      actual=$(md5_of "$f")
      if [[ $actual == "${md5s[i]}" ]]; then continue; fi
      echo "get_data: $f has MD5 $actual, expected ${md5s[i]}; downloading it again"
    fi
    todo+=("$i")
  done
  if [[ ${#todo[@]} -eq 0 ]]; then
    echo "get_data: $dataset: all ${#files[@]} files present in $dir/$target with their MD5s; nothing to do"
    exit 0
  fi
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.get_data.XXXXXX")
done_ok=0
cleanup() {
  rm -rf "$tmp"
  if [[ $done_ok -eq 0 ]]; then
    for d in "${created[@]}"; do rmdir "$d" 2>/dev/null || break; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fetch() {  # URL OUT
  local rc=0
  if [[ $downloader == curl ]]; then
    if [[ -t 2 ]]; then curl -fL --retry 2 -# -o "$2" "$1" || rc=$?
    else curl -fsSL --retry 2 -o "$2" "$1" || rc=$?; fi
  else
    if [[ -t 2 ]]; then wget -q --show-progress -O "$2" "$1" || rc=$?
    else wget -q -O "$2" "$1" || rc=$?; fi
  fi
  return $rc
}

for i in "${todo[@]}"; do
  name=${files[i]}
  url=$base$name
  echo "get_data: downloading $url"
  rc=0
  fetch "$url" "$tmp/$name" || rc=$?
  if [[ $rc -ne 0 ]]; then
    why="$downloader exit $rc"
    if [[ $downloader/$rc == curl/22 || $downloader/$rc == wget/8 ]]; then why+=": HTTP error"; fi
    die "$name: download from $url failed ($why); nothing written to $dir"
  fi
  actual=$(md5_of "$tmp/$name")
  [[ $actual == "${md5s[i]}" ]] ||
    die "$name: MD5 mismatch: expected ${md5s[i]}, got $actual (from $url); refused, nothing written to $dir"
  echo "get_data: $name: MD5 $actual verified"
done

if [[ $dataset == cifar10 ]]; then
  mkdir "$tmp/x"
  tar -xzf "$tmp/${files[0]}" -C "$tmp/x" --no-same-owner ||
    die "${files[0]}: cannot be unpacked (truncated or not a tar.gz); nothing written to $dir"
  rm -f "$tmp/${files[0]}"
  cifar_complete "$tmp/x/$target" ||
    die "${files[0]}: has no complete $target/ (${cifar_batches[*]}, each a multiple of 3073 bytes); nothing written to $dir"
  if [[ -e $dir/$target ]]; then mv "$dir/$target" "$tmp/old"; fi
  mv "$tmp/x/$target" "$dir/$target"
else
  if [[ -d $dir/$target ]]; then
    for i in "${todo[@]}"; do mv -f "$tmp/${files[i]}" "$dir/$target/${files[i]}"; done
  else
    mkdir "$tmp/x"
    for i in "${todo[@]}"; do mv "$tmp/${files[i]}" "$tmp/x/"; done
    mv "$tmp/x" "$dir/$target"
  fi
fi
done_ok=1
echo "get_data: $dataset ready in $dir/$target (dataset.path: $dir/$target)"
