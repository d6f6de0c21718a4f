"""The weekly health check runbook (playbooks/health_check.yml) over the twin: real ansible-playbook, real HTTPS to
the API twin, real SSH to the nodes it looks at.

- 8 nodes, three faults (stale device plugin, Xid 79, driver/library mismatch): each is named on its node, the
  three nodes come first in the report, only they are looked at over SSH, the run fails (critical);
- bad input (unknown node, malformed threshold, unreachable Prometheus) fails before any report is written;
- 1 node + 1,000 api-only nodes: the same constant number of list calls (the report's count, confirmed by the
  API twin's records log), no per-node request.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import time

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab
from gpulab.testkit.api_records import requests
from gpulab.testkit.modules import wait_allocatable

PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "health_check.yml")
DRIVER = "550.54.15"
FAULTS = {"gpu-node-02": "stale-device-plugin", "gpu-node-05": "xid:79", "gpu-node-07": "driver-mismatch"}


def run_health_check(lab, report_dir, timeout=300, **extravars):
    env = dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path() or "")
    argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), PLAYBOOK,
            "-e", json.dumps(dict({"gpuops_report_dir": str(report_dir)}, **extravars))]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def latest_report(report_dir) -> dict:
    with open(os.path.join(str(report_dir), "latest.json")) as stream:
        return json.load(stream)


def assert_constant_requests(lab, since, report):
    """Each of the two reports: one discovery GET of /apis and the list calls its report counts; nothing per node."""
    assert report["api"]["lists"][:3] == ["nodes", "pods", "daemonsets"]
    assert report["api"]["list_calls"] == len(report["api"]["lists"]) <= 4
    ours = requests(lab.state_dir, since, user_agent_part="gpuops.nvidia")
    lists = [record for record in ours if record["verb"] == "list"]
    assert len(lists) == 2 * report["api"]["list_calls"]
    assert [record["path"] for record in ours if record["verb"] != "list"] == ["/apis/", "/apis/"]
    return ours


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("health") / "state")
    lab = start_lab(state_dir, "--nodes", "8", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        for node in FAULTS:
            assert wait_allocatable(lab, node, "8") == "8"
        for node, fault in FAULTS.items():
            lab.gpulab("fault", node, fault)
        assert wait_allocatable(lab, "gpu-node-02", "0") == "0"
        yield lab
    finally:
        stop_lab(lab)


def test_three_faults_named_on_their_nodes_worst_first(fleet, tmp_path):
    since = time.time()
    done = run_health_check(fleet, tmp_path / "reports")
    assert done.returncode != 0, done.stdout
    assert "critical:" in done.stdout
    report = latest_report(tmp_path / "reports")
    codes = dict((name, node["codes"]) for name, node in report["nodes"].items())
    assert "stale_ledger" in codes["gpu-node-02"]
    assert "xid_79" in codes["gpu-node-05"] and "gpu_off_the_bus" in codes["gpu-node-05"]
    assert "version_mismatch" in codes["gpu-node-07"]
    for name in set(report["nodes"]) - set(FAULTS):
        assert report["nodes"][name]["worst"] == "ok", (name, codes[name])
    # only the three flagged nodes were looked at over SSH
    assert sorted(report["summary"]["nodes_looked_at"]) == sorted(FAULTS)
    assert report["nodes"]["gpu-node-02"]["nvml_gpu_count"] == 8
    assert report["nodes"]["gpu-node-05"]["nvml_gpu_count"] == 7
    # worst first: findings, and the Markdown node table
    ranks = ["critical", "error", "warning", "info"]
    severities = [ranks.index(item["severity"]) for item in report["findings"]]
    assert severities == sorted(severities)
    markdown = open(glob.glob(os.path.join(str(tmp_path / "reports"), "health-*.md"))[0]).read()
    section = markdown.split("## Nodes, worst first")[1].split("\n## ")[0]
    table = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| gpu-node-")]
    assert sorted(table) == sorted(FAULTS)
    assert "5 node(s) without findings" in markdown
    # a constant number of list calls: 2 reports of LIST_CALLS each; no per-node request
    assert_constant_requests(fleet, since, report)


def test_previous_report_is_the_xid_baseline(fleet, tmp_path):
    reports = tmp_path / "reports"
    run_health_check(fleet, reports)
    done = run_health_check(fleet, reports)
    assert done.returncode != 0
    report = latest_report(reports)
    assert "xid_79" not in report["nodes"]["gpu-node-05"]["codes"]     # seen last time
    assert "gpu_off_the_bus" in report["nodes"]["gpu-node-05"]["codes"]  # still off the bus
    assert report["baseline"].endswith("latest.json")


@pytest.mark.parametrize("extravars, message", [
    ({"gpuops_health_nodes": ["gpu-node-99"]}, "gpu-node-99 is not a GPU node of the cluster"),
    ({"gpuops_pending_threshold": "soon"}, "pending_threshold: 'soon' is not a duration"),
    ({"gpuops_prometheus_url": "http://127.0.0.1:9"}, "cannot reach Prometheus at http://127.0.0.1:9"),
])
def test_bad_input_fails_before_anything(fleet, tmp_path, extravars, message):
    since = time.time()
    done = run_health_check(fleet, tmp_path / "reports", **extravars)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
    assert not os.path.exists(str(tmp_path / "reports"))
    if "gpuops_health_nodes" not in extravars:   # checked before the cluster is read at all
        assert requests(fleet.state_dir, since, user_agent_part="gpuops.nvidia") == []


def test_a_thousand_api_only_nodes_take_the_same_list_calls(tmp_path):
    lab = start_lab(str(tmp_path / "state"), "--nodes", "1", "--driver", DRIVER, "--api-only", "1000")
    try:
        since = time.time()
        started = time.monotonic()
        done = run_health_check(lab, tmp_path / "reports", timeout=600, gpuops_health_look_at="none")
        wall_s = time.monotonic() - started
        report = latest_report(tmp_path / "reports")
        assert report["summary"]["gpu_nodes"] == 1001, done.stdout[-2000:]
        ours = assert_constant_requests(lab, since, report)
        assert report["summary"]["nodes_looked_at"] == []
        print("1,001 GPU nodes: %d list calls per report, %d in the run, playbook %.1f s, report module %.2f s"
              % (report["api"]["list_calls"], len(ours), wall_s, report["api"]["seconds"]))
    finally:
        stop_lab(lab)
