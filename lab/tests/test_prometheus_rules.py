"""The GPU alert rules (files/prometheus/gpu-alerts.yml) through the real `promtool` and a real `prometheus`:
`promtool check rules` clean, the promtool unit tests (tests/prometheus/) pass and would catch a rule that never
fires, the PrometheusRule manifest is the rule file's twin, every runbook link has its section in docs/alerts.md,
and a real Prometheus scraping DCGM-exporter-style metrics fires GPUXidError when a GPU reports Xid 79.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_DIR
from prometheus_harness import PROMETHEUS, PROMTOOL, MetricsEndpoint, PrometheusServer, dcgm_labels, ksm_labels

RULES = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")
MANIFEST = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts-prometheusrule.yml")
RULE_TESTS = sorted(glob.glob(os.path.join(REPO_DIR, "tests", "prometheus", "*.test.yml")))
ALERTS_DOC = os.path.join(REPO_DIR, "docs", "alerts.md")
EXPECTED_ALERTS = ["GPUXidError", "GPUMemoryECCUncorrectable", "GPUAllocatableZero", "GPURetiredPagesPending",
                   "GPUTemperatureHigh", "GPUPCIeReplayGrowing", "GPUIdleWithPod", "GPUMemoryPressure"]

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)")


def load_rules(path=RULES) -> list:
    with open(path) as rules_file:
        return [rule for group in yaml.safe_load(rules_file)["groups"] for rule in group["rules"]]


def promtool(*args, cwd=REPO_DIR) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_rule_file_holds_the_eight_gpu_alerts_each_with_severity_summary_and_runbook():
    rules = load_rules()
    assert [rule["alert"] for rule in rules] == EXPECTED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, rule["alert"]


@needs_promtool
def test_promtool_check_rules_is_clean():
    done = promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


@needs_promtool
def test_promtool_unit_tests_pass():
    assert RULE_TESTS, "no tests/prometheus/*.test.yml"
    done = promtool("test", "rules", *RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_firing_and_not_firing_cases_in_the_unit_tests():
    cases = {}
    for path in RULE_TESTS:
        with open(path) as tests_file:
            for group in yaml.safe_load(tests_file)["tests"]:
                for case in group.get("alert_rule_test", []):
                    cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    assert {name: cases.get(name) for name in EXPECTED_ALERTS} == {name: {True, False} for name in EXPECTED_ALERTS}


@needs_promtool
@pytest.mark.parametrize("alert", EXPECTED_ALERTS)
def test_unit_tests_catch_the_rule_when_it_never_fires(tmp_path, alert):
    """Replace one rule's expression by one that never matches: promtool test must fail on that alert."""
    with open(RULES) as rules_file:
        rules = yaml.safe_load(rules_file)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = "vector(0) > 1"
    (tmp_path / "files" / "prometheus").mkdir(parents=True)
    (tmp_path / "tests" / "prometheus").mkdir(parents=True)
    (tmp_path / "files" / "prometheus" / "gpu-alerts.yml").write_text(yaml.safe_dump(rules))
    copies = []
    for path in RULE_TESTS:
        copies.append(str(tmp_path / "tests" / "prometheus" / os.path.basename(path)))
        shutil.copy(path, copies[-1])
    done = promtool("test", "rules", *copies, cwd=str(tmp_path))
    assert done.returncode != 0
    assert "alertname: %s," % alert in done.stdout + done.stderr


def test_prometheusrule_manifest_is_generated_from_the_rule_file():
    done = subprocess.run([sys.executable, os.path.join(REPO_DIR, "hack", "prometheusrule.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with open(MANIFEST) as manifest_file:
        manifest = yaml.safe_load(manifest_file)
    with open(RULES) as rules_file:
        assert manifest["spec"]["groups"] == yaml.safe_load(rules_file)["groups"]
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")


@needs_promtool
def test_the_manifest_rules_pass_promtool_too(tmp_path):
    with open(MANIFEST) as manifest_file:
        spec = yaml.safe_load(manifest_file)["spec"]
    extracted = tmp_path / "from-manifest.yml"
    extracted.write_text(yaml.safe_dump(spec))
    done = promtool("check", "rules", str(extracted))
    assert done.returncode == 0 and "SUCCESS: 8 rules found" in done.stdout, done.stdout + done.stderr


def test_every_runbook_url_points_at_a_section_of_docs_alerts_md():
    with open(ALERTS_DOC) as doc:
        anchors = set(re.findall(r'<a id="([^"]+)"></a>', doc.read()))
    for rule in load_rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://github.com/gpuops/nvidia/blob/main/docs/alerts.md#"), url
        assert url.split("#", 1)[1] in anchors, "%s: no <a id> for %s in docs/alerts.md" % (rule["alert"], url)


@needs_prometheus
def test_real_prometheus_fires_xid_alert_and_holds_the_stale_ledger_pending(tmp_path):
    """Xid 79 on a GPU (value change of DCGM_FI_DEV_XID_ERRORS) fires GPUXidError within seconds; the stale
    ledger (capacity 8, allocatable 0) turns GPUAllocatableZero pending, firing after its 5 minutes."""
    endpoint = MetricsEndpoint()
    healthy, faulty = dcgm_labels("gpu-node-01", 0), dcgm_labels("gpu-node-02", 3)
    for labels in (healthy, faulty):
        endpoint.set("DCGM_FI_DEV_XID_ERRORS", labels, 0)
    endpoint.set("kube_node_status_capacity", ksm_labels("gpu-node-02"), 8)
    endpoint.set("kube_node_status_allocatable", ksm_labels("gpu-node-02"), 8)
    prometheus = None
    try:
        prometheus = PrometheusServer(str(tmp_path), [endpoint.address], rule_files=[RULES])
        prometheus.wait_for(lambda: prometheus.query("DCGM_FI_DEV_XID_ERRORS")["data"]["result"], "a scrape")
        endpoint.set("DCGM_FI_DEV_XID_ERRORS", faulty, 79)
        endpoint.set("kube_node_status_allocatable", ksm_labels("gpu-node-02"), 0)
        firing = prometheus.wait_for(lambda: prometheus.firing("GPUXidError"), "GPUXidError firing")
        assert [(alert["labels"]["Hostname"], alert["labels"]["gpu"], alert["labels"]["UUID"]) for alert in firing] == [
            ("gpu-node-02", "3", faulty["UUID"])]
        assert firing[0]["annotations"]["summary"] == "Xid 79 on GPU 3 of gpu-node-02"

        def stale_ledger_pending():
            _status, body = prometheus.get("/api/v1/alerts")
            return [alert for alert in json.loads(body)["data"]["alerts"]
                    if alert["labels"]["alertname"] == "GPUAllocatableZero"]
        pending = prometheus.wait_for(stale_ledger_pending, "GPUAllocatableZero pending")
        assert [(alert["state"], alert["labels"]["node"]) for alert in pending] == [("pending", "gpu-node-02")]
    finally:
        if prometheus is not None:
            prometheus.stop()
        endpoint.close()
    assert prometheus.process.poll() is not None  # stopped, not left running
