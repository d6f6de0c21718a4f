"""Case 5 of diagnose's workloads step through real `ansible` against a real `prometheus` on loopback: a pod whose
DCGM_FI_DEV_FB_USED climbs at every scrape is named by gpuops.nvidia.gpu_memory_leak_report, with the MPS limit as
its fix on an MPS node; a pod whose memory goes up and down (an allocator cache) and an idle pod are not.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import collections_path
from prometheus_harness import PROMETHEUS, MetricsEndpoint, PrometheusServer, dcgm_labels

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)")

NODE = "gpu-node-01"


def pod_labels(gpu, pod):
    labels = dcgm_labels(NODE, gpu)
    labels.update({"namespace": "ml", "pod": pod, "container": "main"})
    return labels


def run_module(name, timeout=120, **args) -> dict:
    path = collections_path()
    if path is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test`")
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
            "ansible_python_interpreter=%s" % sys.executable, "-m", name, "-a", json.dumps(args)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=path, ANSIBLE_DEPRECATION_WARNINGS="false",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert "=> " in done.stdout, done.stdout + done.stderr
    result = json.loads(done.stdout[done.stdout.index("=> ") + 3:])
    result["rc"] = done.returncode
    return result


def test_a_leaking_pod_is_named_and_the_others_are_not(tmp_path):
    endpoint = MetricsEndpoint()
    prometheus = None
    try:
        prometheus = PrometheusServer(str(tmp_path), [endpoint.address])
        leaker, cache, idle = pod_labels(0, "trainer-0"), pod_labels(1, "cache-0"), pod_labels(2, "idle-0")
        for step in range(16):  # one value a second, scraped every second
            endpoint.set("DCGM_FI_DEV_FB_USED", leaker, 20000 + 256 * step, "Framebuffer memory used (in MiB).")
            endpoint.set("DCGM_FI_DEV_FB_USED", cache, 20000 + 1024 * (step % 3), "Framebuffer memory used (in MiB).")
            endpoint.set("DCGM_FI_DEV_FB_USED", idle, 30000, "Framebuffer memory used (in MiB).")
            time.sleep(1)
        result = run_module("gpuops.nvidia.gpu_memory_leak_report", url=prometheus.url, window=60, step=1,
                            min_growth_mib=1024, sharing={NODE: "mps"})
    finally:
        if prometheus is not None:
            prometheus.stop()
        endpoint.close()
    assert result["rc"] == 0, result
    assert result["series"] == 3
    assert [(leak["pod"], leak["gpu"]) for leak in result["leaks"]] == [("trainer-0", "0")]
    (leak,) = result["leaks"]
    assert leak["growth_mib"] >= 2048 and leak["monotonic_share"] >= 0.8 and leak["sharing"] == "mps"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in leak["remedy"]
