"""A batch's roll-out records written in ONE module process (``node_upgrade_record`` with ``records:``, run_once
over ``ansible_play_batch``) against the API twin over HTTPS, for a batch of 4 and of 8 nodes: one module result per
batch whatever its size, two requests per node (read, conditional patch), and a node whose write fails (it is not
in the cluster) fails alone in the per-host follow-up task while the others go on; then ``node_drain`` with
``names:`` cordons the nodes left in the batch, again in one module process. No root needed: the API twin runs
in this process; the hosts are local (the step runs on the controller, as the runbook's Kubernetes steps do)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("kubernetes")

from conftest import collections_path, lab_env  # noqa: E402
from gpulab.kube.api.kubeconfig import write_kubeconfig  # noqa: E402
from gpulab.kube.api.recorder import Recorder  # noqa: E402
from gpulab.kube.api.server import ApiServer  # noqa: E402
from gpulab.kube.api.store import Store  # noqa: E402

RECORD = "gpuops.nvidia/driver-upgrade"
MISSING = "gpu-node-3"   # in the inventory, not in the cluster: its write fails


def run_batch(tmp_path, size):
    records = str(tmp_path / "kube-records.jsonl")
    store = Store(recorder=Recorder(records))
    names = ["gpu-node-%d" % index for index in range(1, size + 1)]
    for name in names:
        if name != MISSING:
            store.create("nodes", {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
                                   "spec": {}})
    server = ApiServer(store, "127.0.0.1", 0, str(tmp_path / "ca")).start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.url, server.ca_pem, server.token)
        inventory = tmp_path / "inventory.ini"
        inventory.write_text("[gpu_nodes]\n" + "".join("%s ansible_connection=local ansible_python_interpreter=%s\n"
                                                       % (name, sys.executable) for name in names))
        playbook = tmp_path / "playbook.yml"
        playbook.write_text(json.dumps([{
            "name": "One batch", "hosts": "gpu_nodes", "gather_facts": False, "serial": size,
            "module_defaults": {"group/gpuops.nvidia.k8s": {"kubeconfig": kubeconfig}},
            "tasks": [
                {"name": "Record that the batch is being drained",
                 "gpuops.nvidia.node_upgrade_record": {
                     "records": "{{ ansible_play_batch | map('community.general.dict_kv', 'name') | list"
                                " | map('combine', {'state': 'draining'}) | list }}",
                     "from_version": "595.91.07", "to_version": "615.71.09", "run_id": "batch-test"},
                 "run_once": True, "register": "batch_records"},
                {"name": "Record that the node is being drained",
                 "ansible.builtin.assert": {
                     "that": ["not batch_records.nodes[inventory_hostname].failed"],
                     "fail_msg": "{{ batch_records.nodes[inventory_hostname].msg }}", "quiet": True}},
                {"name": "Cordon the batch",
                 "gpuops.nvidia.node_drain": {"names": "{{ ansible_play_batch }}", "state": "cordon"},
                 "run_once": True, "register": "batch_cordon"},
                {"name": "Cordon the node",
                 "ansible.builtin.assert": {
                     "that": ["batch_cordon.nodes[inventory_hostname].unschedulable"], "quiet": True}},
            ]}]))
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        env = {name: value for name, value in lab_env().items()
               if not name.startswith("K8S_AUTH_") and name != "KUBECONFIG"}
        env.update(HOME=str(home), ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                   ANSIBLE_COLLECTIONS_PATH=collections_path() or "")
        env.pop("KUBERNETES_SERVICE_HOST", None)
        done = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], capture_output=True,
                              text=True, env=env, timeout=300)
        assert "{" in done.stdout, done.stdout + done.stderr
        report = json.loads(done.stdout[done.stdout.index("{"):])
        nodes = dict((name, store.get("nodes", name) if name != MISSING else None) for name in names)
    finally:
        server.stop()
    with open(records) as stream:
        requests = [json.loads(line) for line in stream if '"record":"request"' in line]
    requests = [one for one in requests if "gpuops.nvidia" in (one.get("user_agent") or "")]
    return done.returncode, report, nodes, requests


@pytest.mark.parametrize("size", [4, 8])
def test_one_module_process_writes_the_whole_batch_and_a_failing_node_fails_alone(tmp_path, size):
    returncode, report, nodes, requests = run_batch(tmp_path, size)
    batch_task, per_host_task, cordon_task, per_host_cordon = report["plays"][0]["tasks"]
    # one module process for the batch: run_once yields one module result, whatever the batch's size
    assert len(batch_task["hosts"]) == 1, batch_task["hosts"]
    result = next(iter(batch_task["hosts"].values()))
    assert sorted(result["nodes"]) == sorted(nodes) and result["failed_nodes"] == [MISSING]
    # records: two requests per node that exists (read, patch), one for the missing one (its read answered 404);
    # then the cordon of the nodes left in the play (the failed one is out of ansible_play_batch): two a node
    assert len(requests) == 2 * (size - 1) + 1 + 2 * (size - 1), requests
    assert sorted(one["verb"] for one in requests) == sorted(["get"] * (2 * size - 1) + ["patch"] * (2 * size - 2))
    assert len(cordon_task["hosts"]) == 1
    cordoned = next(iter(cordon_task["hosts"].values()))
    assert sorted(cordoned["nodes"]) == sorted(name for name in nodes if name != MISSING)
    assert cordoned["failed_nodes"] == [] and sorted(per_host_cordon["hosts"]) == sorted(cordoned["nodes"])
    # the follow-up task fails only the node whose write failed
    assert returncode == 2
    failed = sorted(host for host, outcome in per_host_task["hosts"].items() if outcome.get("failed"))
    assert failed == [MISSING]
    assert "gpu-node-3" in per_host_task["hosts"][MISSING]["msg"]
    for name, node in nodes.items():
        if name != MISSING:
            record = json.loads(node["metadata"]["annotations"][RECORD])
            assert record["state"] == "draining" and record["run_id"] == "batch-test"
            assert node["spec"]["unschedulable"] is True
