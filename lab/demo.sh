#!/usr/bin/env bash
# The main job against the fleet twin: bring up 4 H100 x8 nodes with a driver, break two of them the way real
# nodes break (a userspace/kernel driver mismatch after a half-done upgrade, a GPU fallen off the bus), run the
# collection's diagnose runbook over real SSH, print the twin's view, and tear everything down.
#   usage: lab/demo.sh STATE_DIR      (make demo; needs root, openssh-server, linux-headers-amd64, dkms)
set -euo pipefail
state_dir=$(realpath -m "${1:-lab-state}")
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="${repo}/lab${PYTHONPATH:+:${PYTHONPATH}}"
: "${ANSIBLE_COLLECTIONS_PATH:?set it to a folder holding ansible_collections/gpuops/nvidia (make demo does)}"

gpulab() { python -m gpulab "$1" --state-dir "${state_dir}" "${@:2}"; }
trap 'gpulab down >/dev/null || true' EXIT

gpulab up --nodes 4 --profile h100x8 --driver 550.54.15
gpulab fault gpu-node-02 driver-mismatch
gpulab fault gpu-node-03 xid:79
gpulab status

ANSIBLE_CALLBACK_RESULT_FORMAT=yaml ANSIBLE_HOST_KEY_CHECKING=false \
  ansible-playbook -i "${state_dir}/inventory.yml" "${repo}/playbooks/diagnose.yml" || true

gpulab status
echo "event log: $(wc -l <"${state_dir}/events.jsonl") node state changes recorded in ${state_dir}/events.jsonl"
