"""Case 4, Xid 79, repaired to the end by the diagnose runbook over the twin (real ansible-playbook, SSH to the node,
HTTPS to the API twin and to the node's Redfish BMC, a ticket webhook on loopback).

A GPU falls off the bus (`gpulab fault NODE xid:79:1`): diagnose names case 4 and changes nothing; the dry run
(`--check`) changes nothing either; the confirmed repair drains the node, tries `nvidia-smi --gpu-reset` (the lost
GPU cannot be reset), power cycles the node through its BMC, verifies with `dcgmi diag -r 3` and gives the node back.
A second Xid 79 within the window takes the node out of the pool and calls the ticket webhook once, also when the
runbook runs again.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab
from gpulab.testkit.modules import read_node

ansible_runner = pytest.importorskip("ansible_runner")

PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "diagnose.yml")
SHOW_TASK = "Show the node summary, the failing layer, the cases and their fix"
DCGM_TASK = "Long DCGM diagnostics must pass"
DRIVER = "550.54.15"
NODE = "gpu-node-01"


class Webhook(BaseHTTPRequestHandler):
    calls = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.calls.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def webhook():
    calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Webhook,), {"calls": calls}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"url": "http://127.0.0.1:%d/tickets" % server.server_address[1], "calls": calls}
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("repair-xid79") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--bmc", "--dcgm", "--boot-delay", "0.3")
    try:
        bmc = lab.info["bmc"]
        # the node's BMC is a host variable beside the lab's inventory, as a site would keep it
        os.makedirs(os.path.join(state_dir, "host_vars"), exist_ok=True)
        for node, url in bmc["nodes"].items():
            with open(os.path.join(state_dir, "host_vars", node + ".yml"), "w", encoding="utf-8") as handle:
                handle.write("gpuops_bmc_address: %s\ngpuops_bmc_ca_path: %s\n" % (url, bmc["ca_file"]))
        yield lab
    finally:
        stop_lab(lab)
        shutil.rmtree(state_dir, ignore_errors=True)


def run_diagnose(lab, tmp_path, check=False, **extravars):
    """(rc, shown message, ok task names with changed, ok task names, failed tasks) for NODE."""
    os.makedirs(str(tmp_path), exist_ok=True)
    with open(lab.info["bmc"]["credentials_file"], encoding="utf-8") as handle:
        credentials = json.load(handle)
    extravars.setdefault("gpuops_diagnose_hosts", NODE)
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=PLAYBOOK, inventory=os.path.join(lab.state_dir, "inventory.yml"),
        extravars=extravars, quiet=True, cmdline="--check" if check else None,
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path() or "",
                 "GPUOPS_BMC_USER": credentials["username"], "GPUOPS_BMC_PASSWORD": credentials["password"],
                 "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    shown, changed, ok, failed = None, [], [], []
    for event in result.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok":
            ok.append(data.get("task"))
            if data.get("task") == SHOW_TASK:
                shown = data["res"]["msg"]
            if data["res"].get("changed"):
                changed.append(data.get("task"))
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            failed.append((data.get("task"), data.get("res", {}).get("msg")))
    return result.rc, shown, changed, ok, failed


def node_state(lab):
    node = read_node(lab, NODE)
    status = lab.node_status(NODE)
    return {"unschedulable": bool(node["spec"].get("unschedulable")),
            "taints": {(taint["key"], taint.get("effect")) for taint in node["spec"].get("taints") or []},
            "labels": node["metadata"].get("labels") or {},
            "annotations": node["metadata"].get("annotations") or {},
            "boot_id": status["boot_id"], "faults": status["faults"]}


def test_xid79_is_repaired_then_a_recurrence_takes_the_node_out_of_the_pool(fleet, webhook, tmp_path):
    fleet.gpulab("fault", NODE, "xid:79:1")
    before = node_state(fleet)
    confirm = dict(gpuops_remediate=True, gpuops_xid79_repair=True, gpuops_ticket_webhook_url=webhook["url"])

    # diagnose names it and changes nothing
    rc, shown, changed, _ok, failed = run_diagnose(fleet, tmp_path / "read-only")
    assert rc == 0 and not failed, failed
    assert 4 in [case["case"] for case in shown["cases"]]
    assert "xid_79" in [entry["code"] for entry in shown["diagnosis"]]
    assert not changed

    # the dry run reports and changes nothing
    rc, _shown, _changed, _ok, failed = run_diagnose(fleet, tmp_path / "dry-run", check=True, **confirm)
    assert rc == 0 and not failed, failed
    after_dry = node_state(fleet)
    assert after_dry["boot_id"] == before["boot_id"] and "xid:79:1" in after_dry["faults"]
    assert not after_dry["unschedulable"] and not webhook["calls"]
    assert "gpuops.nvidia/xid79-repaired-at" not in after_dry["annotations"]

    # the confirmed repair: the reset cannot bring a lost GPU back, the BMC power cycle does; verified, given back
    rc, _shown, changed, ok, failed = run_diagnose(fleet, tmp_path / "repair", **confirm)
    assert rc == 0 and not failed, failed
    assert "Cold power cycle through the BMC" in changed and DCGM_TASK in ok
    repaired = node_state(fleet)
    assert repaired["boot_id"] != before["boot_id"] and not repaired["faults"]
    assert not repaired["unschedulable"]
    assert ("gpuops.nvidia/hardware", "NoSchedule") not in repaired["taints"]
    assert "gpuops.nvidia/xid79-repaired-at" in repaired["annotations"]
    assert fleet.ssh(NODE, "nvidia-smi -L").stdout.count("GPU-") == 8
    assert fleet.events(node=NODE, kind="bmc-reset")[-1]["reset_type"] == "PowerCycle"
    assert not webhook["calls"]

    # the GPU falls off again within the window: out of the pool, one ticket, also when diagnose runs again
    fleet.gpulab("fault", NODE, "xid:79:1")
    boot_id = node_state(fleet)["boot_id"]
    for attempt in ("recurrence", "again"):
        rc, _shown, _changed, _ok, failed = run_diagnose(fleet, tmp_path / attempt, **confirm)
        assert rc == 0 and not failed, failed
    out = node_state(fleet)
    assert out["labels"].get("gpuops.nvidia/out-of-pool") == "true"
    assert ("gpuops.nvidia/out-of-pool", "NoExecute") in out["taints"]
    assert "Xid 79" in out["annotations"]["gpuops.nvidia/out-of-pool"]
    assert out["unschedulable"] and out["boot_id"] == boot_id
    assert len(webhook["calls"]) == 1
    assert webhook["calls"][0]["node"] == NODE and webhook["calls"][0]["xid"] == 79
