"""A real Prometheus (Debian's) scraping a lab started with `gpulab up --prometheus`: every node's dcgm-exporter
endpoint and the kube-state-metrics endpoint are up, an injected Xid 79 shows in PromQL (and fires the
collection's GPUXidError rule) within a few scrapes, the node series follow cordon, power and driver state, and
`down` leaves no Prometheus behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import REPO_DIR, start_lab, stop_lab
from gpulab.osutil import process_name

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus not installed (Debian package prometheus)")
RULES = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")


@pytest.fixture(scope="module")
def prom_lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("promlab") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", "595.91.07", "--boot-delay", "0.5",
                    "--prometheus", "--prometheus-rules", RULES)
    yield lab
    stop_lab(lab)


def query(lab, promql: str) -> list:
    url = lab.info["metrics"]["prometheus_url"] + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_query(lab, promql: str, check, what: str, timeout_s: float = 30) -> list:
    deadline, result = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        result = query(lab, promql)
        if check(result):
            return result
        time.sleep(0.5)
    raise AssertionError("%s: %s gave %r after %ss" % (what, promql, result, timeout_s))


def values(result: list) -> dict:
    return {tuple(sorted((k, v) for k, v in one["metric"].items() if k in ("Hostname", "gpu", "node"))):
            float(one["value"][1]) for one in result}


def scrape(target: str) -> str:
    with urllib.request.urlopen("http://%s/metrics" % target, timeout=5) as answer:
        return answer.read().decode()


def kubectl(lab, *args):
    return subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                          capture_output=True, text=True, timeout=60, check=True)


def test_lab_json_and_prometheus_yml_name_every_target(prom_lab):
    metrics = prom_lab.info["metrics"]
    assert sorted(metrics["dcgm_exporter"]) == prom_lab.node_names
    assert metrics["dcgm_exporter"]["gpu-node-01"] == prom_lab.info["nodes"][0]["ip"] + ":9400"
    done = subprocess.run(["promtool", "check", "config", metrics["prometheus_config"]], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    wait_query(prom_lab, "up", lambda r: len(r) == 3 and all(one["value"][1] == "1" for one in r),
               "every target scraped")
    assert {one["metric"]["job"] for one in query(prom_lab, "up")} == {"dcgm-exporter", "kube-state-metrics"}


def test_every_gpu_of_every_node_and_the_allocatable_series(prom_lab):
    temps = wait_query(prom_lab, "DCGM_FI_DEV_GPU_TEMP", lambda r: len(r) == 16, "16 GPUs")
    assert {one["metric"]["DCGM_FI_DRIVER_VERSION"] for one in temps} == {"595.91.07"}
    assert {one["metric"]["modelName"] for one in temps} == {"NVIDIA H100 80GB HBM3"}
    allocatable = wait_query(prom_lab, 'kube_node_status_allocatable{resource="nvidia_com_gpu",unit="integer"}',
                             lambda r: len(r) == 2 and all(one["value"][1] == "8" for one in r), "allocatable 8")
    assert sorted(one["metric"]["node"] for one in allocatable) == prom_lab.node_names


def test_injected_xid_79_shows_in_promql_and_fires_the_alert_rule(prom_lab):
    prom_lab.gpulab("fault", "gpu-node-01", "xid:79:2")
    try:
        result = wait_query(prom_lab, 'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-node-01"} != 0', lambda r: len(r) == 1,
                            "Xid 79 in PromQL", timeout_s=15)
        assert result[0]["metric"]["gpu"] == "2" and result[0]["value"][1] == "79"
        # the GPU off the bus: its readings are gone, the other node's are all there
        wait_query(prom_lab, "count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)",
                   lambda r: values(r) == {(("Hostname", "gpu-node-01"),): 7.0, (("Hostname", "gpu-node-02"),): 8.0},
                   "7 GPUs answering on gpu-node-01")
        wait_query(prom_lab, 'ALERTS{alertname="GPUXidError",alertstate="firing"}',
                   lambda r: [one["metric"]["Hostname"] for one in r] == ["gpu-node-01"], "GPUXidError firing")
    finally:
        prom_lab.gpulab("clear", "gpu-node-01", "xid:79:2")
    wait_query(prom_lab, 'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-node-01"} != 0', lambda r: r == [],
               "Xid gone after the GPU reset")


def test_cordon_and_a_node_without_its_driver(prom_lab):
    kubectl(prom_lab, "cordon", "gpu-node-02")
    try:
        wait_query(prom_lab, "kube_node_spec_unschedulable",
                   lambda r: values(r) == {(("node", "gpu-node-01"),): 0.0, (("node", "gpu-node-02"),): 1.0},
                   "gpu-node-02 unschedulable")
    finally:
        kubectl(prom_lab, "uncordon", "gpu-node-02")
    target = prom_lab.info["metrics"]["dcgm_exporter"]["gpu-node-02"]
    prom_lab.gpulab("fault", "gpu-node-02", "driver-mismatch")
    try:
        assert scrape(target) == ""   # NVML refuses a mismatched driver: DCGM has nothing to say
    finally:
        prom_lab.gpulab("clear", "gpu-node-02", "driver-mismatch")
    assert "DCGM_FI_DEV_GPU_TEMP" in scrape(target)
    since = time.time()
    prom_lab.gpulab("power", "gpu-node-02", "off")
    prom_lab.wait_event("gpu-node-02", "off", since)
    assert scrape(target) == ""
    prom_lab.gpulab("power", "gpu-node-02", "on")
    prom_lab.wait_status("gpu-node-02", "up")
    assert 'Hostname="gpu-node-02"' in scrape(target)


def test_down_stops_prometheus(tmp_path):
    lab = start_lab(str(tmp_path / "state"), "--nodes", "1", "--prometheus")
    pid = lab.info["metrics"]["prometheus_pid"]
    assert process_name(pid) == "prometheus"
    stop_lab(lab)
    assert process_name(pid) != "prometheus"
    assert not os.path.exists(str(tmp_path / "state"))
