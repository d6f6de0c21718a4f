"""Audited bastion execution, end to end: `gpuops upgrade --apply --ticket` rolls the driver over two GPU nodes
that answer SSH only through the twin's bastion (`gpulab up --bastion`: a direct ssh to a node is refused), then
the audit trail is verified and read for the ticket and every node's steps and gates. How tampering is detected
is test_audit_runner.py's part.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import start_lab, stop_lab
from gpuops_cli import gpuops, records

pytest.importorskip("ansible_runner")

OLD, NEW = "595.91.07", "615.71.09"
TICKET = "CHG-1234"


def upgrade_vars(lab, record_dir: str) -> dict:
    """What the driver upgrade's twin tests pass: the lab's runfiles, short timeouts, no soak, batches of one."""
    return {
        "gpuops_soak_seconds": 0,
        "gpuops_upgrade_batches": [1, 1],
        "gpuops_run_record_dir": record_dir,
        "gpuops_reboot_timeout": 120,
        "gpuops_ready_timeout": 120,
        "gpuops_drain_timeout": 60,
        "gpuops_budget_wait_timeout": 0,
        "precheck_require_kubelet": False,
        # data, not a template: gpuops refuses extra vars that hold Jinja
        "nvidia_driver_runfile_src": os.path.join(lab.state_dir, "runfiles", "NVIDIA-Linux-x86_64-%s.run" % NEW),
    }


def ssh(lab, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", os.path.join(lab.state_dir, "ssh_config"), "-o", "ControlMaster=no"]
                          + list(args), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("bastion-upgrade") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--bastion", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    data_dir = str(tmp_path_factory.mktemp("gpuops-data"))
    try:
        since = time.time()
        started = time.monotonic()
        done = gpuops("upgrade", "-i", os.path.join(lab.state_dir, "inventory.yml"),
                      "-e", "gpuops_driver_version=" + NEW, "-e", json.dumps(upgrade_vars(lab, data_dir + "/records")),
                      "--apply", "--ticket", TICKET, "--confirm", "gpulab", "--data-dir", data_dir, timeout=1800)
        print("gpuops upgrade of 2 nodes through the bastion: %.1f s" % (time.monotonic() - started))
        yield {"lab": lab, "done": done, "since": since, "audit_log": os.path.join(data_dir, "audit.jsonl"),
               "data_dir": data_dir}
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_the_upgrade_through_the_bastion_leaves_both_nodes_on_the_target(upgrade):
    lab, done = upgrade["lab"], upgrade["done"]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "exit 0 (done)" in done.stdout
    for name in lab.node_names:
        assert "Connection refused" in ssh(lab, "-o", "ProxyJump=none", name, "true").stderr
        smi = ssh(lab, name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u")
        assert smi.stdout.split() == [NEW], smi.stderr
    boots = [event["node"] for event in lab.events(kind="up", since=upgrade["since"])]
    assert sorted(boots) == lab.node_names           # one reboot each, none twice


def test_the_audit_trail_verifies_and_names_the_ticket_and_every_node_step_and_gate(upgrade):
    verified = gpuops("audit", "verify", upgrade["audit_log"])
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stdout + verified.stderr
    trail = records(upgrade["audit_log"])
    start, end = next(record for record in trail if record["event"] == "run_start"), trail[-1]
    assert trail[0]["event"] == "runner_start" and trail[0]["ticket"] == TICKET
    # the controller settings the run got, printed before it started and recorded (2 nodes: the floor of 5 forks)
    assert trail[0]["controller"]["forks"] == "5" and trail[0]["controller"]["pipelining"] == "on"
    assert "gpuops: controller: forks 5 (" in upgrade["done"].stderr
    assert start["ticket"] == TICKET and start["mode"] == "apply"
    assert "gpuops_confirm" in start["extra_vars"]["names"]
    assert end["event"] == "runner_end" and end["exit_code"] == 0 and end["cluster"] == "gpulab"
    for node in upgrade["lab"].node_names:
        steps = {record["task"]: record for record in trail if record.get("host") == node}
        for task in ("Drain the node", "Reboot the node", "Uncordon the node (only if this collection cordoned it)"):
            assert steps[task]["status"] == "changed", (node, task, steps.get(task))
        gates = {record["gate"]: record["passed"] for record in trail
                 if record["event"] == "gate" and record["host"] == node}
        assert {"precheck", "driver_loaded", "allocatable"} <= set(gates) and all(gates.values()), (node, gates)
        lanes = {record.get("step") for record in trail if record.get("host") == node}
        assert {"drain", "install", "reboot", "verify"} <= lanes, (node, lanes)


def test_the_run_leaves_a_timeline_with_each_node_s_steps_in_their_lanes(upgrade):
    run_id = records(upgrade["audit_log"])[0]["run_id"]
    with open(os.path.join(upgrade["data_dir"], "runs", run_id, "timeline.svg")) as stream:
        svg = stream.read()
    assert all(name in svg for name in upgrade["lab"].node_names)
    assert all('class="step %s' % lane in svg for lane in ("drain", "install", "reboot", "verify", "soak"))
