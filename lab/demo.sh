#!/usr/bin/env bash
# The main job against the fleet twin: a driver upgrade as an SRE runs it at 2 AM. Brings up 8 H100 x8 nodes on
# driver 595.91.07 (with the 595.91.07 and 615.71.09 runfiles, a Kubernetes API twin, a dcgm-exporter per node and
# a real Prometheus scraping them with the collection's GPU alert rules), runs the `gpuops.nvidia.driver_upgrade`
# runbook first as the dry run (the plan), then confirmed to 615.71.09 (canary, batches, short soaks gated on
# Prometheus), prints the summary, and brings the twin down (also on failure or Ctrl-C).
#   usage: lab/demo.sh STATE_DIR      (make demo; needs root, openssh-server, linux-headers-amd64, dkms, prometheus)
# Knobs (environment): DEMO_NODES (8), DEMO_FROM (595.91.07), DEMO_TO (615.71.09), DEMO_RUNS (the run records'
# folder, default $TMPDIR/gpuops-demo-runs: kept after the twin is gone).
set -euo pipefail
started=$(date +%s)
state_dir=$(realpath -m "${1:-lab-state}")
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="${repo}/lab${PYTHONPATH:+:${PYTHONPATH}}"
: "${ANSIBLE_COLLECTIONS_PATH:?set it to a folder holding ansible_collections/gpuops/nvidia (make demo does)}"
nodes=${DEMO_NODES:-8}
from_version=${DEMO_FROM:-595.91.07}
to_version=${DEMO_TO:-615.71.09}
runs_dir=$(realpath -m "${DEMO_RUNS:-${TMPDIR:-/tmp}/gpuops-demo-runs}")
cluster=gpulab-demo

gpulab() { python -m gpulab "$1" --state-dir "${state_dir}" "${@:2}"; }
step() { printf '\n\033[1m== %s (%ss)\033[0m\n' "$1" "$(($(date +%s) - started))"; }
finish() {
  rc=$?
  step "twin down"
  gpulab down >/dev/null 2>&1 || gpulab down || true
  echo "demo: $( ((rc == 0)) && echo done || echo "FAILED (exit ${rc})") in $(($(date +%s) - started)) s;" \
       "run records in ${runs_dir}"
  exit "${rc}"
}
trap finish EXIT
trap 'exit 130' INT TERM

step "fleet twin up: ${nodes} x H100 x8 on ${from_version}, Kubernetes API twin, dcgm-exporters, Prometheus"
gpulab up --nodes "${nodes}" --profile h100x8 --driver "${from_version}" --runfile "${from_version}" \
  --runfile "${to_version}" --cluster-name "${cluster}" \
  --prometheus --prometheus-rules "${repo}/files/prometheus/gpu-alerts.yml"
prometheus_url=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics"]["prometheus_url"])' \
  "${state_dir}/lab.json")

export ANSIBLE_HOST_KEY_CHECKING=false ANSIBLE_DEPRECATION_WARNINGS=false
# one progress line per node step (batch i/n, elapsed, ETA) beside the normal output
export ANSIBLE_CALLBACKS_ENABLED=gpuops.nvidia.upgrade_progress
inventory="${state_dir}/inventory.yml"
common=(-e "gpuops_driver_version=${to_version}" -e "gpuops_run_record_dir=${runs_dir}")
# The twin serves its runfiles from DIR/runfiles; a lab whose inventory names a runfile mirror needs no more.
if ! grep -q nvidia_driver_runfile_url "${inventory}"; then
  common+=(-e "nvidia_driver_runfile_src=${state_dir}/runfiles/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run")
fi

step "dry run: the plan (nothing is changed)"
ansible-playbook -i "${inventory}" gpuops.nvidia.driver_upgrade "${common[@]}"

step "confirmed roll-out to ${to_version}: canary, then batches of 25 %, soaks gated on ${prometheus_url}"
# Short soaks for the demo (the defaults are 600 s after the canary, 300 s after each batch). The gate: no GPU
# reports an Xid, every GPU of the fleet answers DCGM, every GPU is allocatable, none runs hot, no alert fires.
gate=$(cat <<EOF
{"gpuops_confirm": "${cluster}",
 "gpuops_soak_seconds": {"canary": 10, "batch": 4},
 "gpuops_max_unavailable": 2,
 "gpuops_prometheus_url": "${prometheus_url}",
 "gpuops_prometheus_queries": [
   {"name": "no GPU reports an Xid", "query": "DCGM_FI_DEV_XID_ERRORS != 0", "op": "==", "threshold": 0,
    "required": false},
   {"name": "every GPU answers DCGM", "query": "count(DCGM_FI_DEV_GPU_TEMP)", "op": "==",
    "threshold": $((nodes * 8))},
   {"name": "every GPU allocatable",
    "query": "sum(kube_node_status_allocatable{resource=\"nvidia_com_gpu\"})", "op": "==",
    "threshold": $((nodes * 8))},
   {"name": "no GPU runs hot", "query": "max(DCGM_FI_DEV_GPU_TEMP)", "op": "<", "threshold": 85}]}
EOF
)
ansible-playbook -i "${inventory}" gpuops.nvidia.driver_upgrade "${common[@]}" -e "${gate}"

step "what the twin shows afterwards"
gpulab status
python - "${prometheus_url}" <<'PY'
import json, sys, urllib.parse, urllib.request
query = "count by (DCGM_FI_DRIVER_VERSION) (DCGM_FI_DEV_GPU_TEMP)"
with urllib.request.urlopen(sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": query})) as answer:
    for one in json.load(answer)["data"]["result"]:
        print("Prometheus: %s GPUs report driver %s" % (one["value"][1], one["metric"]["DCGM_FI_DRIVER_VERSION"]))
PY
