"""Chaos seed 15 (connection faults: the API server restarting while a node was installing): the node's record
write failed after the k8s client's 3 retries over 3.5 s and the run stopped. The client now retries transient
errors with back-off until a deadline (30 s by default, plugins/module_utils/k8s/client.py). Here the API twin
restarts for real in the middle of a step: its listener closed for ~10 s (connections refused, as while
kube-apiserver's process is down), then a new server on the same port, CA and store (etcd kept the objects); the
step, a cordon with its reason by `gpuops.nvidia.node_drain`, succeeds."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store
from gpulab.testkit.lab import module_command

NODE = "gpu-node-01"
DOWN_S = 10


def start_module(module, **args) -> subprocess.Popen:
    argv, env = module_command(module, args)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_a_cordon_rides_out_an_api_server_restart_of_10_s(tmp_path):
    pytest.importorskip("kubernetes")
    store = Store()
    store.create("nodes", {"metadata": {"name": NODE}, "spec": {}})
    faults = tmp_path / "api-faults.json"
    # the step's first read of the node is held 3 s: the server goes down while the step is under way
    faults.write_text(json.dumps([{"path": "^/api/v1/nodes/%s$" % NODE, "methods": ["GET"], "hang_s": 3}]))
    ca_dir = str(tmp_path / "ca")
    server = ApiServer(store, "127.0.0.1", 0, ca_dir, faults_path=str(faults)).start()
    port, token = server.port, server.token
    kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), server.url, server.ca_pem, token)
    running = start_module("gpuops.nvidia.node_drain", kubeconfig=kubeconfig, name=NODE, state="cordon",
                           reason="chaos seed 15: the API server restarts")
    restarted = None
    try:
        deadline = time.monotonic() + 120
        while server.faults._rules and server.faults._rules[0]["left"] > 0:    # the held read has begun
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()
            time.sleep(0.05)
        server.stop()                   # the listener closed: every new connection refused
        down_at = time.monotonic()
        time.sleep(DOWN_S)
        restarted = ApiServer(store, "127.0.0.1", port, ca_dir, token=token).start()
        up_at = time.monotonic()
        out, err = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
        if restarted is not None:
            restarted.stop()
    assert up_at - down_at >= DOWN_S
    assert running.returncode == 0, out + err
    result = json.loads(out[out.index("=> ") + 3:])
    assert result["changed"] is True
    node = store.get("nodes", NODE)
    assert node["spec"].get("unschedulable") is True
