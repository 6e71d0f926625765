#!/usr/bin/env bash
# docker/k8s/gradpress.yaml: parses as YAML (Debian's python3-yaml) and wires what matters: a
# server Deployment + Service on 50051, workers as an Indexed Job whose rank is the completion
# index, GRADPRESS_SERVER = the Service name, the config from a ConfigMap that is a valid
# gradpress config, runs on a PVC. No cluster runs here: nothing is applied. Exit 77 (ctest:
# skipped) when python3-yaml is missing.
#   k8s_test.sh SOURCE_DIR [WORKER_BIN]
set -euo pipefail
src=$1; worker_bin=${2:-}
py=/usr/bin/python3
if ! $py -c 'import yaml' 2>/dev/null; then
  echo "########################################################################"
  echo "k8s_test: SKIPPED: python3-yaml not installed; docker/k8s was NOT checked"
  echo "########################################################################"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$py - "$src/docker/k8s/gradpress.yaml" "$tmp/job.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
def need(cond, what):
    if not cond:
        sys.exit("k8s_test: FAIL: " + what)
for key in [("ConfigMap", "gradpress-config"), ("PersistentVolumeClaim", "gradpress-runs"),
            ("Deployment", "gradpress-server"), ("Service", "gradpress-server"), ("Job", "gradpress-worker")]:
    need(key in by, f"no {key[0]} {key[1]}")
dep, svc, job = by[("Deployment", "gradpress-server")], by[("Service", "gradpress-server")], by[("Job", "gradpress-worker")]
need(dep["apiVersion"] == "apps/v1" and job["apiVersion"] == "batch/v1", "apiVersions")
need(dep["spec"]["replicas"] == 1, "one server replica")
need(svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items(), "Service selects the server pods")
need(svc["spec"]["ports"][0]["port"] == 50051, "Service port 50051")
sc = dep["spec"]["template"]["spec"]["containers"][0]
need(sc["args"] == ["server"] and sc["ports"][0]["containerPort"] == 50051, "server container")
need(sc["readinessProbe"].get("grpc", {}).get("port") == 50051, "gRPC health readiness probe")
js = job["spec"]
need(js["completionMode"] == "Indexed", "completionMode Indexed")
need(js["completions"] == js["parallelism"], "completions == parallelism")
wc = js["template"]["spec"]["containers"][0]
env = {e["name"]: e for e in wc["env"]}
need(wc["args"] == ["worker"], "worker container args")
need(env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] ==
     "metadata.annotations['batch.kubernetes.io/job-completion-index']", "RANK = completion index")
need(env["WORLD_SIZE"]["value"] == str(js["completions"]), "WORLD_SIZE == completions")
need(sc["env"] and {e["name"]: e.get("value") for e in sc["env"]}["WORLD_SIZE"] == str(js["completions"]), "server WORLD_SIZE")
need(env["GRADPRESS_SERVER"]["value"] == f'{svc["metadata"]["name"]}:{svc["spec"]["ports"][0]["port"]}', "GRADPRESS_SERVER = Service:port")
need(not any(n.startswith("MASTER_") for n in env), "no MASTER_ADDR/MASTER_PORT")
for spec in (dep["spec"]["template"]["spec"], js["template"]["spec"]):
    vols = {v["name"]: v for v in spec["volumes"]}
    need(vols["config"]["configMap"]["name"] == "gradpress-config", "config volume")
    need(vols["runs"]["persistentVolumeClaim"]["claimName"] == "gradpress-runs", "runs PVC")
cm = by[("ConfigMap", "gradpress-config")]["data"]["job.yaml"]
cfg = yaml.safe_load(cm)
need(cfg["cluster"]["workers"] == js["completions"], "config cluster.workers == completions")
open(sys.argv[2], "w").write(cm)
print(f"k8s_test: {len(docs)} documents, wiring ok")
PY
$py - "$src/docker/k8s/gradpress-shards.yaml" "$tmp/shards.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
def need(cond, what):
    if not cond:
        sys.exit("k8s_test: FAIL: gradpress-shards.yaml: " + what)
sts, svc = by[("StatefulSet", "gradpress-shard")], by[("Service", "gradpress-shard")]
job = by[("Job", "gradpress-shards-worker")]
need(sts["apiVersion"] == "apps/v1" and svc["spec"]["clusterIP"] == "None", "headless Service")
need(sts["spec"]["serviceName"] == svc["metadata"]["name"], "StatefulSet serviceName")
need(svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items(), "Service selects the shards")
sc = sts["spec"]["template"]["spec"]["containers"][0]
senv = {e["name"]: e for e in sc["env"]}
S = sts["spec"]["replicas"]
need(senv["GRADPRESS_SHARDS"]["value"] == str(S), "GRADPRESS_SHARDS == replicas")
need(senv["GRADPRESS_SHARD"]["valueFrom"]["fieldRef"]["fieldPath"] ==
     "metadata.labels['apps.kubernetes.io/pod-index']", "GRADPRESS_SHARD = the pod's ordinal")
need(sc["args"] == ["server"] and sc["readinessProbe"]["grpc"]["port"] == 50051, "shard container")
js = job["spec"]
wenv = {e["name"]: e for e in js["template"]["spec"]["containers"][0]["env"]}
port = svc["spec"]["ports"][0]["port"]
want = ",".join(f'{sts["metadata"]["name"]}-{i}.{svc["metadata"]["name"]}:{port}' for i in range(S))
need(wenv["GRADPRESS_SERVERS"]["value"] == want, f"GRADPRESS_SERVERS lists the {S} shards in order")
need(wenv["WORLD_SIZE"]["value"] == senv["WORLD_SIZE"]["value"] == str(js["completions"]), "WORLD_SIZE")
cm = by[("ConfigMap", "gradpress-shards-config")]["data"]["job.yaml"]
need(yaml.safe_load(cm)["cluster"]["workers"] == js["completions"], "cluster.workers == completions")
open(sys.argv[2], "w").write(cm)
print(f"k8s_test: gradpress-shards.yaml: {len(docs)} documents, {S} shards, wiring ok")
PY
if [[ -n "$worker_bin" ]]; then
  "$worker_bin" --config "$tmp/job.yaml" --print-config >/dev/null || { echo "k8s_test: FAIL: the ConfigMap's job.yaml is not a valid gradpress config"; exit 1; }
  "$worker_bin" --config "$tmp/shards.yaml" --print-config >/dev/null || { echo "k8s_test: FAIL: gradpress-shards.yaml's job.yaml is not a valid gradpress config"; exit 1; }
  echo "k8s_test: the ConfigMap's job.yaml loads in gradpress-worker"
fi
echo "k8s_test: ok"
