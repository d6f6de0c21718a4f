"""Chaos seed 364 (connection faults: the API server restarting while gpu-node-02 drained): the drain timed out
and named its pods "not evicted: its disruption budget allowed no disruption while the drain waited" although the
budget allowed one: the eviction was still in the k8s client's retries (up to 30 s) when the drain's own timeout
passed. An eviction's retries now end with the drain: the pod is reported with the API error, within the drain's
timeout. The API twin restarts (listener closed 12 s) at the first eviction of a drain with a 6 s timeout."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store
from gpulab.testkit.lab import module_command

NODE = "gpu-node-02"


def run_module(module, **args):
    argv, env = module_command(module, args)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    assert "=> " in done.stdout, done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout[done.stdout.index("=> ") + 3:])


def test_a_drain_whose_eviction_meets_an_api_server_restart_fails_in_time_naming_the_api_error(tmp_path):
    pytest.importorskip("kubernetes")
    store = Store()
    store.create("namespaces", {"metadata": {"name": "chaos"}})
    store.create("nodes", {"metadata": {"name": NODE}, "spec": {}})
    store.create("pods", {"metadata": {"name": "trainer", "namespace": "chaos"},
                          "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
                          "status": {"phase": "Running"}})
    faults = tmp_path / "api-faults.json"
    faults.write_text(json.dumps([{"path": "/eviction$", "refuse": True, "for_s": 12}]))
    server = ApiServer(store, "127.0.0.1", 0, str(tmp_path / "ca"), faults_path=str(faults)).start()
    try:
        kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.url, server.ca_pem, server.token)
        started = time.monotonic()
        rc, result = run_module("gpuops.nvidia.node_drain", kubeconfig=kubeconfig, name=NODE, state="drain",
                                force=True, timeout=6)
        took = time.monotonic() - started
    finally:
        server.stop()
    assert rc != 0, result
    assert "disruption budget" not in result["msg"], result["msg"]
    assert "evict chaos/trainer" in result["msg"] and "attempts" in result["msg"], result["msg"]
    assert result["elapsed"] < 6 + 8, result       # the drain's 6 s, then its reason written once the API is back
    assert took < 60
