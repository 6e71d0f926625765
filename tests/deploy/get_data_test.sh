#!/usr/bin/env bash
# scripts/get_data.sh against a local HTTP server (python3 -m http.server on 127.0.0.1) that
# serves small files written here in the real formats: the four gzipped IDX files of MNIST and
# of Fashion-MNIST, and a cifar-10-binary.tar.gz holding cifar-10-batches-bin/. URL and MD5s
# come from GRADPRESS_DATA_URL / GRADPRESS_DATA_MD5S. Checks the layout and bytes it unpacks,
# that a re-run downloads nothing, and that a corrupted download, a truncated archive and a
# 404 exit non-zero naming the file and leave DIR exactly as it was (no temp files either).
# With GRADPRESS_SIM, the produced folders are also read by the real loaders (one step each).
# Usage: get_data_test.sh SOURCE_DIR [GRADPRESS_SIM]
set -euo pipefail
src=$(cd "$1" && pwd)
sim=${2:-}
get=$src/scripts/get_data.sh
command -v python3 >/dev/null || { echo "get_data_test: python3 missing; skipped"; exit 77; }
downloaders=()
for d in curl wget; do if command -v "$d" >/dev/null; then downloaders+=("$d"); fi; done
[[ ${#downloaders[@]} -gt 0 ]] || { echo "get_data_test: neither curl nor wget; skipped"; exit 77; }
start=$SECONDS

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "get_data_test: FAIL: $*" >&2
  for f in "$work"/out "$work"/err; do [[ ! -s $f ]] || { echo "--- ${f##*/}:"; cat "$f"; } >&2; done
  exit 1
}

# The served files, in the real formats.
srv=$work/srv
python3 - "$srv" <<'EOF'
import gzip, io, os, random, struct, sys, tarfile
srv = sys.argv[1]
rng = random.Random(7)

def idx(path, magic, dims, data):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + data)

for folder, n_train, n_test in (("mnist", 6, 4), ("fashion", 5, 3)):
    os.makedirs(f"{srv}/{folder}")
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        idx(f"{srv}/{folder}/{prefix}-images-idx3-ubyte.gz", 0x803, (n, 28, 28),
            bytes(rng.randrange(256) for _ in range(n * 28 * 28)))
        idx(f"{srv}/{folder}/{prefix}-labels-idx1-ubyte.gz", 0x801, (n,),
            bytes(rng.randrange(10) for _ in range(n)))

def batch(n):  # n records: one label byte (0..9), then 3x32x32 pixels
    return b"".join(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072))
                    for _ in range(n))

os.makedirs(f"{srv}/cifar/cifar-10-batches-bin")
members = {f"data_batch_{i}.bin": batch(2) for i in range(1, 6)}
members["test_batch.bin"] = batch(3)
members["batches.meta.txt"] = b"airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n"
with tarfile.open(f"{srv}/cifar/cifar-10-binary.tar.gz", "w:gz") as tar:
    for name, data in members.items():
        with open(f"{srv}/cifar/cifar-10-batches-bin/{name}", "wb") as f:  # the expected bytes
            f.write(data)
        info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

# Damaged copies: MNIST with one label file changed by a byte, CIFAR with a byte flipped
# (checksum mismatch), CIFAR cut short and CIFAR without test_batch.bin (for these two their
# own MD5s are given: the unpacking must catch them).
os.makedirs(f"{srv}/bad")
os.makedirs(f"{srv}/trunc")
os.makedirs(f"{srv}/partial")
with tarfile.open(f"{srv}/partial/cifar-10-binary.tar.gz", "w:gz") as tar:
    for name, data in members.items():
        if name != "test_batch.bin":
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
for name in os.listdir(f"{srv}/mnist"):
    data = bytearray(open(f"{srv}/mnist/{name}", "rb").read())
    if name == "train-labels-idx1-ubyte.gz":
        data[-9] ^= 0xFF
    open(f"{srv}/bad/{name}", "wb").write(data)
data = bytearray(open(f"{srv}/cifar/cifar-10-binary.tar.gz", "rb").read())
open(f"{srv}/trunc/cifar-10-binary.tar.gz", "wb").write(data[: len(data) // 2])
data[len(data) // 2] ^= 0xFF
open(f"{srv}/bad/cifar-10-binary.tar.gz", "wb").write(data)
EOF
(cd "$srv/mnist" && md5sum ./*.gz | sed 's| \./| |') >"$work/mnist.md5"
(cd "$srv/fashion" && md5sum ./*.gz | sed 's| \./| |') >"$work/fashion.md5"
(cd "$srv/cifar" && md5sum cifar-10-binary.tar.gz) >"$work/cifar.md5"
(cd "$srv/trunc" && md5sum cifar-10-binary.tar.gz) >"$work/trunc.md5"
(cd "$srv/partial" && md5sum cifar-10-binary.tar.gz) >"$work/partial.md5"

# The server: port 0, so it picks a free one and prints it; then wait until it answers.
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$srv" >"$work/http.log" 2>&1 &
server_pid=$!
port=""
deadline=$((SECONDS + 20))
while [[ -z $port ]]; do
  port=$(sed -n 's/.* port \([0-9][0-9]*\).*/\1/p' "$work/http.log" | head -1)
  kill -0 "$server_pid" 2>/dev/null || fail "http.server exited: $(cat "$work/http.log")"
  [[ -n $port || $SECONDS -lt $deadline ]] || fail "http.server printed no port in 20 s"
  [[ -n $port ]] || sleep 0.1
done
url=http://127.0.0.1:$port
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
  "$url/mnist/" 2>/dev/null; do
  [[ $SECONDS -lt $deadline ]] || fail "http.server on port $port does not answer after 20 s"
  sleep 0.1
done

# get DOWNLOADER DATASET DIR URL_PATH MD5_FILE: runs get_data.sh, stdout/stderr to out/err.
get() {
  GRADPRESS_DOWNLOADER=$1 GRADPRESS_DATA_URL=$url/$4/ GRADPRESS_DATA_MD5S=$5 \
    bash "$get" "$2" "$3" >"$work/out" 2>"$work/err"
}
# Everything under a folder with size and mtime: a refused download must not change it.
# (Folders without mtime: the temp folder inside DIR comes and goes.)
snapshot() {
  (cd "$1" && { find . -type d -printf '%p/\n'; find . ! -type d -printf '%p %y %s %T@\n'; } | LC_ALL=C sort)
}
no_temp() { [[ -z $(find "$1" -name '.get_data.*') ]] || fail "temp files left in $1: $(find "$1" -name '.get_data.*')"; }
same_files() {  # SERVED_DIR GOT_DIR NAME...
  local a=$1 b=$2 n
  shift 2
  for n in "$@"; do cmp -s "$a/$n" "$b/$n" || fail "$b/$n differs from the served $a/$n"; done
}
idx_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
  t10k-labels-idx1-ubyte.gz)
cifar_files=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin
  test_batch.bin batches.meta.txt)
# expect_refused WHAT FILE: the last get failed, naming FILE.
expect_refused() {
  [[ $rc -ne 0 ]] || fail "$1: get_data.sh exited 0"
  grep -q -- "$2" "$work/err" || fail "$1: the error does not name $2"
}

# 1. Fresh downloads into a DIR that does not exist yet; curl and wget both used.
data=$work/data/sub
get "${downloaders[0]}" mnist "$data" mnist "$work/mnist.md5" || fail "mnist: exit $?"
get "${downloaders[-1]}" fashion-mnist "$data" fashion "$work/fashion.md5" || fail "fashion-mnist: exit $?"
get "${downloaders[0]}" cifar10 "$data" cifar "$work/cifar.md5" || fail "cifar10: exit $?"
same_files "$srv/mnist" "$data/mnist" "${idx_files[@]}"
same_files "$srv/fashion" "$data/fashion-mnist" "${idx_files[@]}"
same_files "$srv/cifar/cifar-10-batches-bin" "$data/cifar-10-batches-bin" "${cifar_files[@]}"
got=$(cd "$data" && find . -mindepth 1 -maxdepth 1 | LC_ALL=C sort | tr '\n' ' ')
[[ $got == "./cifar-10-batches-bin ./fashion-mnist ./mnist " ]] || fail "$data holds: $got"
[[ $(find "$data/mnist" -type f | wc -l) -eq 4 ]] || fail "$data/mnist: not exactly 4 files"
no_temp "$work/data"
echo "get_data_test: downloaded mnist (${downloaders[0]}), fashion-mnist (${downloaders[-1]}), cifar10"

# 2. A re-run downloads nothing (the URL would 404) and changes nothing.
before=$(snapshot "$data")
for spec in "mnist mnist" "fashion-mnist fashion" "cifar10 cifar"; do
  read -r ds sums <<<"$spec"
  get "${downloaders[0]}" "$ds" "$data" missing "$work/$sums.md5" || fail "re-run of $ds: exit $?"
  grep -q "nothing to do" "$work/out" || fail "re-run of $ds did not skip"
done
[[ $(snapshot "$data") == "$before" ]] || fail "a re-run changed $data"

# 3. A present file with another MD5 is fetched again; the others stay untouched.
echo junk >"$data/mnist/t10k-labels-idx1-ubyte.gz"
touch -d '2020-01-01' "$data/mnist/train-images-idx3-ubyte.gz"
kept=$(stat -c %Y "$data/mnist/train-images-idx3-ubyte.gz")
get "${downloaders[0]}" mnist "$data" mnist "$work/mnist.md5" || fail "stale mnist file: exit $?"
same_files "$srv/mnist" "$data/mnist" "${idx_files[@]}"
[[ $(stat -c %Y "$data/mnist/train-images-idx3-ubyte.gz") == "$kept" ]] ||
  fail "a verified file was downloaded again"
no_temp "$data"

# 4. Refusals leave DIR as it was: checksum mismatch (mnist, cifar10), truncated archive and
# archive without test_batch.bin (both with a matching MD5), 404; into an existing DIR with a file of its own and an incomplete
# cifar-10-batches-bin, into a DIR whose mnist/ lacks a file, and into a new DIR.
other=$work/other
mkdir -p "$other/cifar-10-batches-bin"
echo mine >"$other/keep.txt"
cp "$srv/cifar/cifar-10-batches-bin/test_batch.bin" "$other/cifar-10-batches-bin/"
rm "$data/mnist/train-labels-idx1-ubyte.gz"
rm -r "$data/cifar-10-batches-bin"
for d in "${downloaders[@]}"; do
  for target in "$other" "$data"; do
    before=$(snapshot "$target")
    rc=0; get "$d" mnist "$target" bad "$work/mnist.md5" || rc=$?
    expect_refused "corrupt mnist ($d)" train-labels-idx1-ubyte.gz
    want=$(awk '$2 == "train-labels-idx1-ubyte.gz" {print $1}' "$work/mnist.md5")
    have=$(md5sum <"$srv/bad/train-labels-idx1-ubyte.gz" | cut -d' ' -f1)
    grep -q "expected $want, got $have" "$work/err" || fail "corrupt mnist ($d): the error lacks both MD5s"
    rc=0; get "$d" cifar10 "$target" bad "$work/cifar.md5" || rc=$?
    expect_refused "corrupt cifar10 ($d)" cifar-10-binary.tar.gz
    grep -q "MD5 mismatch" "$work/err" || fail "corrupt cifar10 ($d): not refused for its MD5"
    rc=0; get "$d" cifar10 "$target" trunc "$work/trunc.md5" || rc=$?
    expect_refused "truncated cifar10 ($d)" cifar-10-binary.tar.gz
    rc=0; get "$d" cifar10 "$target" partial "$work/partial.md5" || rc=$?
    expect_refused "cifar10 without test_batch.bin ($d)" "has no complete cifar-10-batches-bin"
    rc=0; get "$d" mnist "$target" missing "$work/mnist.md5" || rc=$?
    expect_refused "404 mnist ($d)" "-idx[13]-ubyte.gz"
    grep -q "failed ($d exit [0-9]*: HTTP error)" "$work/err" || fail "404 mnist ($d): not reported as an HTTP error"
    rc=0; get "$d" cifar10 "$target" missing "$work/cifar.md5" || rc=$?
    expect_refused "404 cifar10 ($d)" cifar-10-binary.tar.gz
    grep -q "failed ($d exit [0-9]*: HTTP error)" "$work/err" || fail "404 cifar10 ($d): not reported as an HTTP error"
    [[ $(snapshot "$target") == "$before" ]] || fail "a refused download ($d) changed $target:
$(diff <(echo "$before") <(snapshot "$target"))"
  done
  rc=0; get "$d" mnist "$work/new/deeper" bad "$work/mnist.md5" || rc=$?
  expect_refused "corrupt mnist into a new DIR ($d)" train-labels-idx1-ubyte.gz
  [[ ! -e $work/new ]] || fail "a refused download ($d) left $work/new behind"
done
[[ ! -e $data/mnist/train-labels-idx1-ubyte.gz ]] || fail "the corrupt label file was installed"
echo "get_data_test: refused: checksum mismatch, truncated or incomplete archive, 404 (${downloaders[*]}); DIR unchanged"

# 5. The same DIR heals with the good files; an incomplete cifar-10-batches-bin is replaced.
get "${downloaders[0]}" mnist "$data" mnist "$work/mnist.md5" || fail "mnist after refusals: exit $?"
same_files "$srv/mnist" "$data/mnist" "${idx_files[@]}"
get "${downloaders[0]}" cifar10 "$other" cifar "$work/cifar.md5" || fail "cifar10 over an incomplete folder: exit $?"
same_files "$srv/cifar/cifar-10-batches-bin" "$other/cifar-10-batches-bin" "${cifar_files[@]}"
no_temp "$work"

# 6. Bad arguments and a malformed MD5 override.
rc=0; bash "$get" imagenet "$work/x" >/dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "unknown dataset: exit $rc, expected 2"
echo "zzz  train-images-idx3-ubyte.gz" >"$work/badsum.md5"
rc=0; get "${downloaders[0]}" mnist "$work/x" mnist "$work/badsum.md5" || rc=$?
expect_refused "malformed MD5 override" "not an MD5"
[[ ! -e $work/x ]] || fail "a malformed override left $work/x behind"

# 7. The real loaders read what was unpacked: one step of gradpress-sim on each.
if [[ -n $sim ]]; then
  for spec in "lenet_mnist_m1 mnist $data/mnist" "lenet_mnist_m1 fashion-mnist $data/fashion-mnist" \
    "vgg11_cifar10_m1 cifar10 $other/cifar-10-batches-bin"; do
    read -r config name path <<<"$spec"
    "$sim" --config "$src/configs/$config.yaml" --workers 1 --max-steps 1 --set "dataset.name=$name" \
      --set "dataset.path=$path" --set train.batch_size=2 --set train.epochs=1 --set device=cpu \
      --run-dir "$work/run-$name" --log-level warn >"$work/out" 2>"$work/err" ||
      fail "gradpress-sim could not train on $name in $path"
    [[ -s $work/run-$name/summary.json ]] || fail "gradpress-sim on $name wrote no summary.json"
  done
  echo "get_data_test: gradpress-sim trained a step on each of the three folders"
fi
echo "get_data_test: passed in $((SECONDS - start)) s"
