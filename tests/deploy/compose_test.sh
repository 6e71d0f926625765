#!/usr/bin/env bash
# docker/: the Dockerfile's build stage runs scripts/setup.sh and nothing else from apt; its
# server and runtime stages are Dockerfile.prebuilt's, and docker/stage.sh lays out their files;
# the runtime stage installs the Debian package of every shared library the built binaries need;
# the entrypoint assigns distinct, restart-stable ranks under concurrency; health_check.py
# gets SERVING from a real gradpress-server; and `docker-compose config` accepts the compose
# file. No image is built here: tests/deploy/compose_run_test.sh (label docker) does that. Exit 77 (ctest: skipped) only when
# docker-compose is missing, after every other check has passed.
#   compose_test.sh SOURCE_DIR [SERVER_BIN WORKER_BIN SIM_BIN]
set -euo pipefail
src=$1; shift
bins=("$@")
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "compose_test: FAIL: $*" >&2; exit 1; }
df=$src/docker/Dockerfile

# -- Dockerfile: two stages; the build stage's packages are exactly scripts/setup.sh's.
[[ $(grep -c '^FROM debian:bookworm' "$df") -eq 3 ]] || fail "expected three 'FROM debian:bookworm' stages"
build_stage=$(awk '/^FROM /{n++} n==1' "$df")
server_stage=$(awk '/^FROM /{n++} n==2 && !/^#/' "$df")
runtime_stage=$(awk '/^FROM /{n++} n==3' "$df")
grep -q '^FROM debian:bookworm AS server' <<<"$server_stage" || fail "second stage is not 'AS server'"
if grep -Eq 'libtorch|gradpress-worker|gradpress-sim' <<<"$server_stage"; then
  fail "server stage holds LibTorch or the worker"
fi
grep -q -- '^COPY --from=build /out/server/ /$' <<<"$server_stage" || fail "server stage does not copy /out/server/ (docker/stage.sh)"
grep -Eq '^RUN bash /src/scripts/setup\.sh' <<<"$build_stage" || fail "build stage does not RUN scripts/setup.sh"
grep -Eq 'COPY scripts/setup\.sh ' <<<"$build_stage" || fail "build stage does not COPY scripts/setup.sh"
if grep -Eq 'apt-get|apt install|dpkg -i' <<<"$build_stage"; then
  fail "build stage installs packages itself; it must only run scripts/setup.sh"
fi
grep -q 'CMAKE_BUILD_TYPE=Release' <<<"$build_stage" || fail "build stage is not a Release build"
grep -q -- '--from=build' <<<"$runtime_stage" || fail "runtime stage does not copy from the build stage"
if grep -Eq 'build-essential|-dev\b|cmake ' <<<"$runtime_stage"; then fail "runtime stage holds build tools"; fi
for f in $(sed -n 's/^COPY \(docker\/[^ ]*\|scripts\/[^ ]*\) .*/\1/p; s/^COPY docker\/entrypoint.sh \(.*\) \/opt.*/\1/p' "$df" | tr ' ' '\n' | sort -u); do
  [[ -e "$src/$f" ]] || fail "Dockerfile copies $f, which does not exist"
done
grep -q -- '^COPY --from=build /out/runtime/ /$' <<<"$runtime_stage" || fail "runtime stage does not copy /out/runtime/ (docker/stage.sh)"
grep -q 'docker/stage.sh /out ' <<<"$build_stage" || fail "build stage does not lay out /out with docker/stage.sh"
# docker/stage.sh: the two root trees hold what the entrypoint needs; the server's no worker.
for f in docker/entrypoint.sh docker/health_check.py scripts/launch_worker.sh docker/stage.sh; do
  [[ -x "$src/$f" ]] || fail "$f is not executable"
done
mkdir -p "$tmp/fake"
for b in gradpress-server gradpress-worker gradpress-sim; do cp /bin/true "$tmp/fake/$b"; done
bash "$src/docker/stage.sh" "$tmp/stage" "$src" "$tmp/fake/gradpress-server" "$tmp/fake/gradpress-worker" \
  "$tmp/fake/gradpress-sim" || fail "docker/stage.sh failed"
for f in runtime/usr/local/bin/gradpress-server runtime/usr/local/bin/gradpress-worker runtime/usr/local/bin/gradpress-sim \
         runtime/opt/gradpress/bin/entrypoint.sh runtime/opt/gradpress/bin/health_check.py \
         runtime/opt/gradpress/bin/launch_worker.sh runtime/opt/gradpress/configs/lenet_fmnist_m5.yaml \
         server/usr/local/bin/gradpress-server server/opt/gradpress/bin/entrypoint.sh \
         server/opt/gradpress/bin/health_check.py server/opt/gradpress/configs/lenet_fmnist_m5.yaml; do
  [[ -e "$tmp/stage/$f" ]] || fail "docker/stage.sh did not make $f"
done
[[ ! -e "$tmp/stage/server/usr/local/bin/gradpress-worker" ]] || fail "docker/stage.sh put the worker in the server tree"
# docker/Dockerfile.prebuilt (the fast path): the same server and runtime stages, files from the context.
pre=$src/docker/Dockerfile.prebuilt
diff <(awk '/^FROM /{n++} n>=2' "$df" | sed 's|^COPY --from=build /out/|COPY |') \
     <(awk '/^FROM /{n++} n>=1' "$pre") >"$tmp/prediff" ||
  fail "docker/Dockerfile.prebuilt's stages differ from docker/Dockerfile's: $(cat "$tmp/prediff")"
runtime_pkgs=$(tr -s ' \\\n' '\n' <<<"$runtime_stage" | grep -E '^[a-z0-9][a-z0-9.+-]+$' || true)
server_pkgs=$(tr -s ' \\\n' '\n' <<<"$server_stage" | grep -E '^[a-z0-9][a-z0-9.+-]+$' || true)
if [[ ${#bins[@]} -gt 0 ]] && command -v dpkg >/dev/null; then
  needed=()
  server_needed=()
  for b in "${bins[@]}"; do
    [[ -x "$b" ]] || fail "no binary $b"
    ldd "$b" >"$tmp/ldd"
    while read -r lib; do
      # The dynamic loader (libc6, in every image): a NEEDED entry where the CUDA runtime is
      # linked statically (compressors/cuda), which ldd lists without a "=> path".
      [[ $lib == ld-linux* ]] && continue
      path=$(awk -v l="$lib" '$1 == l {print $3}' "$tmp/ldd" | head -1)
      [[ -n "$path" ]] || fail "$b: $lib not found by ldd"
      pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1) || true
      [[ -n "$pkg" ]] || pkg=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1) || true
      [[ -n "$pkg" ]] || fail "$b: no Debian package owns $path"
      needed+=("$pkg")
      [[ "$b" != "${bins[0]}" ]] || server_needed+=("$pkg")
    done < <(readelf -d "$b" >"$tmp/needed"; sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' "$tmp/needed")
  done
  for pkg in $(printf '%s\n' "${needed[@]}" | sort -u); do
    case "$pkg" in libc6|libgcc-s1|libstdc++6) continue ;; esac   # in every bookworm image
    grep -qx "$pkg" <<<"$runtime_pkgs" || fail "runtime stage lacks $pkg (a shared library of the binaries)"
  done
  for pkg in $(printf '%s\n' "${server_needed[@]}" | sort -u); do
    case "$pkg" in libc6|libgcc-s1|libstdc++6) continue ;; esac
    grep -qx "$pkg" <<<"$server_pkgs" || fail "server stage lacks $pkg (a shared library of gradpress-server)"
  done
  echo "compose_test: runtime packages cover the binaries' libraries: $(printf '%s\n' "${needed[@]}" | sort -u | tr '\n' ' ')"
fi

# -- entrypoint: 4 containers start at once -> ranks 0..3; a restart keeps its rank.
for h in c1 c2 c3 c4; do
  GRADPRESS_RUNS=$tmp/runs RUN_ID=j GRADPRESS_HOSTNAME=$h WORLD_SIZE=4 \
    bash "$src/docker/entrypoint.sh" rank >"$tmp/rank-$h" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "entrypoint.sh rank failed"; done
pids=()
ranks=$(cat "$tmp"/rank-c* | awk '{print $1}' | sort -n | tr '\n' ' ')
[[ "$ranks" == "0 1 2 3 " ]] || fail "concurrent ranks: '$ranks', expected '0 1 2 3 '"
again=$(GRADPRESS_RUNS=$tmp/runs RUN_ID=j GRADPRESS_HOSTNAME=c3 WORLD_SIZE=4 bash "$src/docker/entrypoint.sh" rank)
[[ "$again" == "$(awk '{print $1}' "$tmp/rank-c3") 1" ]] || fail "restart of c3 gave '$again'"
rc=0
GRADPRESS_RUNS=$tmp/runs RUN_ID=j GRADPRESS_HOSTNAME=c5 WORLD_SIZE=4 GRADPRESS_WORKER_BIN=/bin/false \
  bash "$src/docker/entrypoint.sh" worker >"$tmp/c5.log" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "rank 4 but WORLD_SIZE is 4" "$tmp/c5.log" || fail "a 5th replica: rc $rc, $(cat "$tmp/c5.log")"
# A given rank (Kubernetes: JOB_COMPLETION_INDEX) is kept and its starts are counted.
a=$(GRADPRESS_RUNS=$tmp/runs RUN_ID=k JOB_COMPLETION_INDEX=1 WORLD_SIZE=2 bash "$src/docker/entrypoint.sh" rank)
b=$(GRADPRESS_RUNS=$tmp/runs RUN_ID=k JOB_COMPLETION_INDEX=1 WORLD_SIZE=2 bash "$src/docker/entrypoint.sh" rank)
[[ "$a|$b" == "1 0|1 1" ]] || fail "JOB_COMPLETION_INDEX=1 twice gave '$a' then '$b'"
echo "compose_test: entrypoint ranks ok"

# -- health_check.py against a real server (Debian's python3-grpcio).
if [[ ${#bins[@]} -gt 0 ]] && /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  "${bins[0]}" --listen 127.0.0.1:0 >"$tmp/server.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 150); do grep -q "listening on port" "$tmp/server.log" && break; sleep 0.1; done
  port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/server.log")
  [[ -n "$port" ]] || fail "server did not start: $(cat "$tmp/server.log")"
  /usr/bin/python3 "$src/docker/health_check.py" "127.0.0.1:$port" | grep -q SERVING || fail "health check not SERVING"
  kill -TERM "${pids[0]}"; wait "${pids[0]}" || true; pids=()
  if /usr/bin/python3 "$src/docker/health_check.py" "127.0.0.1:$port" 2>/dev/null; then fail "health check passed on a stopped server"; fi
  echo "compose_test: health_check.py: SERVING from a live server, failure after it stopped"
else
  echo "compose_test: WARNING: python3-grpcio missing (scripts/setup.sh installs it): health_check.py not run"
fi

# -- the compose file.
if ! command -v docker-compose >/dev/null; then
  echo "########################################################################"
  echo "compose_test: SKIPPED: docker-compose not found (scripts/setup.sh installs"
  echo "Debian's docker-compose); the compose file was NOT validated"
  echo "########################################################################"
  exit 77
fi
cd "$src/docker"
docker-compose -f docker-compose.yml config -q || fail "docker-compose config rejects docker-compose.yml"
rendered=$(WORLD_SIZE=3 RUN_ID=job7 docker-compose -f docker-compose.yml config)
/usr/bin/python3 - "$rendered" <<'PY' || fail "rendered compose file lacks a required field"
import sys, yaml
c = yaml.safe_load(sys.argv[1])
s, w = c["services"]["server"], c["services"]["worker"]
assert s["environment"]["WORLD_SIZE"] == "3" and w["environment"]["WORLD_SIZE"] == "3", "WORLD_SIZE"
assert w["environment"]["RUN_ID"] == "job7"
assert w["environment"]["GRADPRESS_SERVER"] == "server:50051"
assert "health_check.py" in " ".join(s["healthcheck"]["test"]), "healthcheck"
assert w["depends_on"]["server"]["condition"] == "service_healthy"
assert any(v.endswith(":/config/job.yaml:ro") for v in w["volumes"]), "config mount"
assert any(v.startswith("runs:/runs") for v in w["volumes"]) and "runs" in c["volumes"], "runs volume"
assert "ports" not in w and "container_name" not in w, "worker must be scalable"
PY
# Two shards (docker-compose.shards.yml layered on the file).
rendered=$(WORLD_SIZE=2 RUN_ID=job8 docker-compose -f docker-compose.yml -f docker-compose.shards.yml config) ||
  fail "docker-compose config rejects docker-compose.shards.yml"
/usr/bin/python3 - "$rendered" <<'PY' || fail "rendered sharded compose file is wrong"
import sys, yaml
c = yaml.safe_load(sys.argv[1])
s0, s1, w = c["services"]["server"], c["services"]["server-1"], c["services"]["worker"]
assert (s0["environment"]["GRADPRESS_SHARD"], s1["environment"]["GRADPRESS_SHARD"]) == ("0", "1")
assert s0["environment"]["GRADPRESS_SHARDS"] == s1["environment"]["GRADPRESS_SHARDS"] == "2"
assert s1["command"] == ["server"] and "health_check.py" in " ".join(s1["healthcheck"]["test"])
assert w["environment"]["GRADPRESS_SERVERS"] == "server:50051,server-1:50051"
assert set(w["depends_on"]) == {"server", "server-1"}
PY
echo "compose_test: ok ($(docker-compose version --short)), 2-shard override too"
