#!/usr/bin/env python3
"""Capture real Prometheus HTTP API answers into tests/unit/fixtures/prometheus/ (see PROVENANCE.md there).

Starts Debian's `prometheus` on loopback with files/prometheus/gpu-alerts.yml, scraping a DCGM-exporter-style
endpoint of two GPUs (lab/tests/prometheus_harness.py), makes GPU 0 raise Xid 79 and run hot, and saves each
answer's body byte for byte. Run it as root or not; it needs only prometheus and loopback.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_DIR, "lab", "tests"))

from prometheus_harness import (  # noqa: E402
    MetricsEndpoint, PrometheusServer, dcgm_labels, ksm_labels,
)

OUT_DIR = os.path.join(REPO_DIR, "tests", "unit", "fixtures", "prometheus")
RULES = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")
HOST = "gpu-node-01"

# file name -> (path, params, method); the body of the answer is saved as is
CAPTURES = {
    "query_vector_gpu_temp.json": ("/api/v1/query", {"query": "DCGM_FI_DEV_GPU_TEMP"}, "POST"),
    "query_vector_max_by_hostname.json": ("/api/v1/query", {"query": "max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)"},
                                          "POST"),
    "query_vector_empty.json": ("/api/v1/query", {"query": 'DCGM_FI_DEV_XID_ERRORS{gpu="7"}'}, "POST"),
    "query_vector_nan.json": ("/api/v1/query",
                              {"query": "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)"}, "POST"),
    "query_vector_allocatable_zero.json": ("/api/v1/query", {"query": 'kube_node_status_allocatable{'
                                                              'resource="nvidia_com_gpu"} == 0'}, "GET"),
    "query_scalar.json": ("/api/v1/query", {"query": "scalar(max(DCGM_FI_DEV_GPU_TEMP))"}, "POST"),
    "query_scalar_inf.json": ("/api/v1/query", {"query": "1/0"}, "POST"),
    "query_string.json": ("/api/v1/query", {"query": '"gpuops"'}, "POST"),
    "query_matrix.json": ("/api/v1/query", {"query": "DCGM_FI_DEV_GPU_TEMP[3s]"}, "POST"),
    "query_error_bad_data_400.json": ("/api/v1/query", {"query": "DCGM_FI_DEV_GPU_TEMP >"}, "POST"),
    "query_error_execution_422.json": ("/api/v1/query",
                                       {"query": "DCGM_FI_DEV_GPU_TEMP + on (Hostname) DCGM_FI_DEV_GPU_UTIL"}, "POST"),
    "not_found_404.txt": ("/prometheus/api/v1/query", {"query": "up"}, "POST"),
    "alerts_firing_xid_pending_temperature.json": ("/api/v1/alerts", None, "GET"),
}


def main() -> int:
    os.makedirs(OUT_DIR, exist_ok=True)
    endpoint = MetricsEndpoint()
    for gpu in (0, 1):
        labels = dcgm_labels(HOST, gpu)
        endpoint.set("DCGM_FI_DEV_GPU_TEMP", labels, 41 + gpu, "GPU temperature (in C).")
        endpoint.set("DCGM_FI_DEV_GPU_UTIL", labels, 0, "GPU utilization (in %).")
        endpoint.set("DCGM_FI_DEV_XID_ERRORS", labels, 0, "Value of the last XID error encountered.")
        endpoint.set("DCGM_FI_DEV_FB_USED", labels, 0 if gpu else 1024, "Framebuffer memory used (in MiB).")
        endpoint.set("DCGM_FI_DEV_FB_FREE", labels, 0 if gpu else 80535, "Framebuffer memory free (in MiB).")
    endpoint.set("kube_node_status_capacity", ksm_labels(HOST), 8)
    endpoint.set("kube_node_status_allocatable", ksm_labels(HOST), 0)
    with tempfile.TemporaryDirectory() as work_dir:
        prometheus = PrometheusServer(work_dir, [endpoint.address], rule_files=[RULES])
        try:
            prometheus.wait_for(lambda: prometheus.query("DCGM_FI_DEV_GPU_TEMP")["data"]["result"], "a scrape")
            status, body = prometheus.get("/api/v1/alerts")
            save("alerts_none.json", status, body)
            endpoint.set("DCGM_FI_DEV_XID_ERRORS", dcgm_labels(HOST, 0), 79)
            endpoint.set("DCGM_FI_DEV_GPU_TEMP", dcgm_labels(HOST, 0), 91)
            prometheus.wait_for(lambda: prometheus.firing("GPUXidError"), "GPUXidError firing")
            for name, (path, params, method) in CAPTURES.items():
                save(name, *prometheus.get(path, params, method))
            version = json.loads(prometheus.get("/api/v1/status/buildinfo")[1])["data"]["version"]
            print("captured from prometheus %s" % version)
        finally:
            prometheus.stop()
            endpoint.close()
    return 0


def save(name: str, status: int, body: str) -> None:
    with open(os.path.join(OUT_DIR, name), "w") as fixture:
        fixture.write(body)
    print("%-45s HTTP %d  %d bytes" % (name, status, len(body)))


if __name__ == "__main__":
    sys.exit(main())
