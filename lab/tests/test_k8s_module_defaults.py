"""One ``module_defaults`` block for the Kubernetes modules of both collections, run with real ansible-playbook
against the API twin over HTTPS: ``group/gpuops.nvidia.k8s`` extends ``kubernetes.core.k8s`` (meta/runtime.yml),
so the kubeconfig set once reaches ``kubernetes.core.k8s_info`` and ``gpuops.nvidia.rollout_lock`` alike, while
``group/kubernetes.core.k8s``, which only kubernetes.core's runtime.yml defines, cannot reach this collection's
modules. The twin's request log shows who asked what. No root needed: the API twin runs in this process."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

pytest.importorskip("kubernetes")

from conftest import collections_path, lab_env  # noqa: E402
from gpulab.kube.api.kubeconfig import write_kubeconfig  # noqa: E402
from gpulab.kube.api.recorder import Recorder  # noqa: E402
from gpulab.kube.api.server import ApiServer  # noqa: E402
from gpulab.kube.api.store import Store  # noqa: E402


@pytest.fixture
def api_twin(tmp_path):
    records = str(tmp_path / "kube-records.jsonl")
    store = Store(recorder=Recorder(records))
    store.create("nodes", {"metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.present": "true"}},
                           "spec": {}})
    server = ApiServer(store, "127.0.0.1", 0, str(tmp_path / "ca")).start()
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.url, server.ca_pem, server.token)
    yield kubeconfig, records
    server.stop()


def run_playbook(tmp_path, group, kubeconfig):
    """Both collections' modules under one module_defaults block for ``group``; the kubeconfig is nowhere else
    (no K8S_AUTH_* or KUBECONFIG, an empty HOME without ~/.kube/config)."""
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(json.dumps([{
        "name": "One connection block", "hosts": "localhost", "gather_facts": False,
        "module_defaults": {group: {"kubeconfig": kubeconfig}},
        "tasks": [
            {"name": "kubernetes.core reads the nodes",
             "kubernetes.core.k8s_info": {"kind": "Node", "label_selectors": ["nvidia.com/gpu.present=true"]},
             "register": "nodes", "ignore_errors": True},
            {"name": "gpuops.nvidia takes the roll-out lock",
             "gpuops.nvidia.rollout_lock": {"name": "defaults", "namespace": "kube-system", "holder": "sre/run-1"},
             "register": "lock", "ignore_errors": True},
            {"name": "Report", "ansible.builtin.debug": {
                "msg": "RESULTS={{ {'nodes': nodes, 'lock': lock} | to_json }}"}},
        ]}]))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {name: value for name, value in lab_env().items()
           if not name.startswith("K8S_AUTH_") and name != "KUBECONFIG"}
    env.update(HOME=str(home), ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=collections_path() or "", ANSIBLE_STDOUT_CALLBACK="default")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(["ansible-playbook", str(playbook)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(one for one in done.stdout.splitlines() if "RESULTS=" in one)
    return json.loads(json.loads("{%s}" % line.strip())["msg"][len("RESULTS="):])


def requests_by(records, agent_part, path_part):
    with open(records) as stream:
        found = [json.loads(line) for line in stream if '"record":"request"' in line]
    return [one for one in found if agent_part in (one.get("user_agent") or "") and path_part in one.get("path", "")]


def test_one_gpuops_group_block_configures_kubernetes_core_and_gpuops_modules(tmp_path, api_twin):
    kubeconfig, records = api_twin
    results = run_playbook(tmp_path, "group/gpuops.nvidia.k8s", kubeconfig)
    assert not results["nodes"].get("failed"), results["nodes"]
    assert [node["metadata"]["name"] for node in results["nodes"]["resources"]] == ["gpu-node-1"]
    assert not results["lock"].get("failed"), results["lock"]
    assert results["lock"]["changed"] and results["lock"]["holder"] == "sre/run-1"
    # both went to the twin: kubernetes.core's client listed the nodes, ours wrote the Lease
    node_lists = [one for one in requests_by(records, "", "/api/v1/nodes") if one.get("verb") == "list"]
    assert node_lists and all("gpuops.nvidia" not in (one.get("user_agent") or "") for one in node_lists)
    assert requests_by(records, "gpuops.nvidia", "/namespaces/kube-system/leases")


def test_kubernetes_core_group_block_does_not_reach_gpuops_modules(tmp_path, api_twin):
    kubeconfig, records = api_twin
    results = run_playbook(tmp_path, "group/kubernetes.core.k8s", kubeconfig)
    assert not results["nodes"].get("failed"), results["nodes"]
    assert results["lock"]["failed"] and "no cluster to talk to" in results["lock"]["msg"]
    assert not requests_by(records, "gpuops.nvidia", "/")
    assert os.path.exists(kubeconfig)
