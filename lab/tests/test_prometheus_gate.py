"""gpuops.nvidia.prometheus_gate through real `ansible` against a real `prometheus` on loopback, which scrapes a
DCGM-exporter-style endpoint the test changes and evaluates the collection's GPU alert rules: a value under the
threshold passes, a value over it fails (also when it changes in the middle of a soak), a firing alert from the
rules fails the gate, an unreachable Prometheus fails closed, and an HTTPS Prometheus is trusted only through its CA.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import REPO_DIR, collections_path
from prometheus_harness import (
    PROMETHEUS, MetricsEndpoint, PrometheusServer, dcgm_labels, free_port, make_loopback_tls,
)

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)")

RULES = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")
NODE = "gpu-node-01"
GPUS = [dcgm_labels(NODE, gpu) for gpu in (0, 1)]
TEMPERATURE_UNDER_85 = {"name": "GPUs under 85 C", "query": 'DCGM_FI_DEV_GPU_TEMP{Hostname="%s"}' % NODE,
                        "op": "<", "threshold": 85}


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """(endpoint, prometheus): two healthy H100 GPUs, scraped and rule-evaluated every second."""
    endpoint = MetricsEndpoint()
    prometheus = None
    try:
        prometheus = PrometheusServer(str(tmp_path_factory.mktemp("prometheus")), [endpoint.address],
                                      rule_files=[RULES])
        yield endpoint, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        endpoint.close()


@pytest.fixture
def healthy(monitored):
    """Both GPUs at 60 C, no Xid, and Prometheus has seen it (no GPU alert firing)."""
    endpoint, prometheus = monitored
    for labels in GPUS:
        endpoint.set("DCGM_FI_DEV_GPU_TEMP", labels, 60, "GPU temperature (in C).")
        endpoint.set("DCGM_FI_DEV_XID_ERRORS", labels, 0, "Value of the last XID error encountered.")

    def scraped_healthy():
        temperatures = [float(series["value"][1])
                        for series in prometheus.query("DCGM_FI_DEV_GPU_TEMP")["data"]["result"]]
        return temperatures == [60.0, 60.0] and not prometheus.firing("GPUXidError")
    prometheus.wait_for(scraped_healthy, "healthy metrics scraped")
    return endpoint, prometheus


def gate(check_mode=False, timeout=120, **args) -> dict:
    """The result of one prometheus_gate run by `ansible` on localhost; 'rc' is ansible's exit code."""
    path = collections_path()
    if path is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test`")
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
            "ansible_python_interpreter=%s" % sys.executable, "-m", "gpuops.nvidia.prometheus_gate",
            "-a", json.dumps(args)] + (["--check"] if check_mode else [])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=path, ANSIBLE_DEPRECATION_WARNINGS="false",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert "=> " in done.stdout, done.stdout + done.stderr
    result = json.loads(done.stdout[done.stdout.index("=> ") + 3:])
    result["rc"] = done.returncode
    return result


def test_values_under_threshold_pass_over_a_soak(healthy):
    _endpoint, prometheus = healthy
    result = gate(url=prometheus.url, queries=[TEMPERATURE_UNDER_85], firing_alerts={}, duration=2, interval=1)
    assert result["rc"] == 0, result["msg"]
    assert result["passed"] is True and result["evaluations"] == 3
    assert sorted((value["labels"]["gpu"], value["value"]) for value in result["queries"][0]["values"]) == [
        ("0", 60.0), ("1", 60.0)]


def test_value_over_threshold_fails_naming_query_and_gpu(healthy):
    endpoint, prometheus = healthy
    endpoint.set("DCGM_FI_DEV_GPU_TEMP", GPUS[1], 91)
    prometheus.wait_for(lambda: prometheus.query("max(DCGM_FI_DEV_GPU_TEMP) > 90")["data"]["result"], "91 C scraped")
    result = gate(url=prometheus.url, queries=[TEMPERATURE_UNDER_85])
    assert result["rc"] != 0 and result["passed"] is False
    assert result["violations"] == [
        "query 'GPUs under 85 C': %s is 91, not < 85" % format_series(GPUS[1], prometheus)]


def test_a_soak_fails_when_a_value_crosses_the_threshold_during_it(healthy):
    endpoint, prometheus = healthy
    query = dict(TEMPERATURE_UNDER_85, query='max(DCGM_FI_DEV_GPU_TEMP{Hostname="%s"})' % NODE)
    results = []
    soak = threading.Thread(target=lambda: results.append(gate(url=prometheus.url, queries=[query], duration=60,
                                                               interval=1)))
    soak.start()
    try:
        # the GPU heats up once the gate has passed two evaluations
        prometheus.wait_for(lambda: prometheus.queries_answered(query["query"]) >= 2, "two evaluations", timeout_s=60)
        endpoint.set("DCGM_FI_DEV_GPU_TEMP", GPUS[0], 92)
    finally:
        soak.join(timeout=120)
    result = results[0]
    assert result["rc"] != 0
    assert result["evaluations"] >= 3
    assert result["elapsed"] < 20  # stopped at the failure, not after the 60 s soak
    assert result["violations"] == ["query 'GPUs under 85 C': {} is 92, not < 85"]


def test_a_firing_alert_from_the_rules_fails_the_gate_and_filters_apply(healthy):
    endpoint, prometheus = healthy
    endpoint.set("DCGM_FI_DEV_XID_ERRORS", GPUS[1], 79)
    prometheus.wait_for(lambda: prometheus.firing("GPUXidError"), "GPUXidError firing")
    result = gate(url=prometheus.url, queries=[TEMPERATURE_UNDER_85], firing_alerts={"names": ["GPUXidError"]})
    assert result["rc"] != 0
    assert [(alert["name"], alert["labels"]["gpu"]) for alert in result["alerts_firing"]] == [("GPUXidError", "1")]
    assert result["violations"] == ["alert GPUXidError is firing %s since %s" % (
        format_series(dict(GPUS[1], severity="critical"), prometheus), result["alerts_firing"][0]["active_at"])]
    # alerts of other nodes, or other alerts, do not fail it
    assert gate(url=prometheus.url, firing_alerts={"matchers": ['Hostname="gpu-node-02"']})["rc"] == 0
    assert gate(url=prometheus.url, firing_alerts={"names": ["GPUTemperatureHigh"]})["rc"] == 0


def test_check_mode_reports_the_violation_without_failing(healthy):
    endpoint, prometheus = healthy
    endpoint.set("DCGM_FI_DEV_GPU_TEMP", GPUS[0], 88)
    prometheus.wait_for(lambda: prometheus.query("max(DCGM_FI_DEV_GPU_TEMP) == 88")["data"]["result"], "88 C scraped")
    result = gate(check_mode=True, url=prometheus.url, queries=[TEMPERATURE_UNDER_85], duration=600)
    assert result["rc"] == 0
    assert result["passed"] is False and result["evaluations"] == 1
    assert result["violations"][0].endswith(" is 88, not < 85")


def test_a_required_query_without_data_fails(healthy):
    _endpoint, prometheus = healthy
    result = gate(url=prometheus.url, queries=[dict(TEMPERATURE_UNDER_85, query='DCGM_FI_DEV_GPU_TEMP{Hostname="gone"}')])
    assert result["rc"] != 0
    assert "returned no data" in result["violations"][0]


def test_unreachable_prometheus_fails_closed():
    url = "http://127.0.0.1:%d" % free_port()
    result = gate(url=url, queries=[TEMPERATURE_UNDER_85], firing_alerts={})
    assert result["rc"] != 0 and result["passed"] is False
    assert result["violations"][0].startswith(
        "query 'GPUs under 85 C' (%s) failed: cannot reach Prometheus at %s: " % (TEMPERATURE_UNDER_85["query"], url))
    assert result["violations"][1].startswith("alerts could not be read: cannot reach Prometheus at %s" % url)


def format_series(labels: dict, prometheus) -> str:
    """The labels as the gate writes them, with the scrape's job and instance added by Prometheus."""
    scraped = dict(labels, job="dcgm-exporter", instance=prometheus_target(prometheus))
    return "{%s}" % ", ".join('%s="%s"' % (name, scraped[name]) for name in sorted(scraped))


def prometheus_target(prometheus) -> str:
    return prometheus.query("up")["data"]["result"][0]["metric"]["instance"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_https_prometheus_is_trusted_through_ca_path_and_refused_without_it(monitored, tmp_path):
    endpoint, _plain = monitored
    endpoint.set("DCGM_FI_DEV_GPU_TEMP", GPUS[0], 60, "GPU temperature (in C).")
    tls = make_loopback_tls(str(tmp_path))
    secure = PrometheusServer(str(tmp_path), [endpoint.address], tls=(tls["cert"], tls["key"]))
    try:
        secure.wait_for(lambda: secure.query("DCGM_FI_DEV_GPU_TEMP")["data"]["result"], "a scrape over HTTPS")
        query = dict(TEMPERATURE_UNDER_85, query="max(DCGM_FI_DEV_GPU_TEMP)")
        trusted = gate(url=secure.url, ca_path=tls["ca"], queries=[query])
        assert trusted["rc"] == 0, trusted["msg"]
        untrusted = gate(url=secure.url, queries=[query])
        assert untrusted["rc"] != 0
        assert "cannot reach Prometheus at %s: " % secure.url in untrusted["violations"][0]
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted["violations"][0]
        assert gate(url=secure.url, validate_certs=False, queries=[query])["rc"] == 0
    finally:
        secure.stop()
