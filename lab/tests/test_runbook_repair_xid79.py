"""Case 4, Xid 79, repaired to the end by the diagnose runbook over the twin (real ansible-playbook, SSH to the node,
HTTPS to the API twin and to the node's Redfish BMC, a ticket webhook on loopback).

A GPU falls off the bus (`gpulab fault NODE xid:79:1`): diagnose names case 4 and changes nothing; the dry run
(`--check`) changes nothing either; the confirmed repair drains the node, tries `nvidia-smi --gpu-reset` (the lost
GPU cannot be reset), power cycles the node through its BMC, verifies with `dcgmi diag -r 3` and gives the node back.
A second Xid 79 within the window takes the node out of the pool and calls the ticket webhook once, also when the
runbook runs again.

Every run writes the collection's audit trail (gpuops.nvidia.audit): it verifies (`gpuops audit verify`) and names
each action of the repair (drain, reset try, BMC power cycle, DCGM gate, uncordon; on recurrence the out-of-pool
label, taint and ticket). The BMC password (from the environment) shows in no ansible output, trail or ticket body.
The twin's own records show the drain (its eviction of the node's workload pod) and the reset tried in the boot the
power cycle ended (nvidia-smi's reset record on the node, tagged with that boot's id).

A GPU reset that brings the node back without a power cycle is not tested here: on the twin, as on real hardware
for Xid 79, `nvidia-smi --gpu-reset` resets only the GPUs still on the bus and cannot bring a lost one back, so the
reset-only path would need a twin fault the twin does not have (a GPU whose Xid 79 a reset clears).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab
from gpuops_cli import gpuops
from gpulab.testkit.modules import read_node

ansible_runner = pytest.importorskip("ansible_runner")

PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "diagnose.yml")
SHOW_TASK = "Show the node summary, the failing layer, the cases and their fix"
DCGM_TASK = "Long DCGM diagnostics must pass"
DRIVER = "550.54.15"
NODE = "gpu-node-01"
WORKLOAD = "xid79-web"         # a Deployment pinned to NODE: what the drain has to evict
GPU_STATE = "/run/gpulab-firmware/gpu-state.json"   # the twin's nvidia-smi records its resets here, per boot


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


class Run:
    """One diagnose run: rc, the shown message, ok/changed/failed task names, its whole output and audit trail."""

    def __init__(self, rc, shown, changed, ok, failed, output, audit_log, trail):
        self.rc, self.shown, self.changed, self.ok, self.failed = rc, shown, changed, ok, failed
        self.output, self.audit_log, self.trail = output, audit_log, trail

    def actions(self):
        """(task, action, status) of each task and gate the trail recorded for NODE."""
        return {(line["task"], line["action"], line["status"]) for line in self.trail
                if line.get("event") in ("task", "gate") and line.get("host") == NODE}

    def line(self, task):
        return next(line for line in self.trail if line.get("task") == task and line.get("host") == NODE)


def bmc_credentials(lab):
    with open(lab.info["bmc"]["credentials_file"], encoding="utf-8") as handle:
        return json.load(handle)


def run_diagnose(lab, tmp_path, check=False, **extravars):
    """The diagnose runbook on NODE with the audit callback on, as a Run."""
    os.makedirs(str(tmp_path), exist_ok=True)
    credentials = bmc_credentials(lab)
    audit_log = os.path.join(str(tmp_path), "audit.jsonl")
    extravars.setdefault("gpuops_diagnose_hosts", NODE)
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=PLAYBOOK, inventory=os.path.join(lab.state_dir, "inventory.yml"),
        extravars=extravars, quiet=True, cmdline="--check" if check else None,
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path() or "",
                 "ANSIBLE_CALLBACKS_ENABLED": "gpuops.nvidia.audit", "GPUOPS_AUDIT_LOG": audit_log,
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
    output = result.stdout.read()
    # every event as ansible-runner keeps it (results included), beside what the display printed
    output += "".join(json.dumps(event) for event in result.events)
    trail = []
    if os.path.exists(audit_log):
        with open(audit_log, encoding="utf-8") as stream:
            trail = [json.loads(line) for line in stream if line.strip()]
    return Run(result.rc, shown, changed, ok, failed, output, audit_log, trail)


def assert_no_password(lab, run, webhook):
    password = bmc_credentials(lab)["password"]
    assert len(password) >= 16
    assert SHOW_TASK in run.output and run.trail      # the output and the trail were read, not empty
    assert password not in run.output
    with open(run.audit_log, encoding="utf-8") as stream:
        assert password not in stream.read()
    assert password not in json.dumps(webhook["calls"])


def assert_trail_verifies(run):
    verdict = gpuops("audit", "verify", run.audit_log, env={"GPUOPS_AUDIT_HMAC_KEY": ""})
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr


def kubectl(lab, *args, stdin=None):
    done = subprocess.run(["kubectl", "--kubeconfig", lab.info["kube"]["kubeconfig"]] + list(args), input=stdin,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def workload_pods(lab):
    """Names of the workload's pods that run on NODE and are not going away."""
    pods = json.loads(kubectl(lab, "get", "pods", "-n", "default", "-l", "app=" + WORKLOAD, "-o", "json"))["items"]
    return [pod["metadata"]["name"] for pod in pods if pod["status"].get("phase") == "Running"
            and pod["spec"].get("nodeName") == NODE and not pod["metadata"].get("deletionTimestamp")]


def start_workload(lab):
    labels = {"app": WORKLOAD}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": WORKLOAD, "namespace": "default"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels},
                                        "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                                                 "containers": [{"name": "web",
                                                                 "image": "registry.k8s.io/pause:3.10"}]}}}}
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(deployment))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        running = workload_pods(lab)
        if running:
            return running
        time.sleep(0.3)
    raise AssertionError("the workload did not start on %s" % NODE)


def admitted_evictions(lab, since):
    """(namespace, pod) of each eviction the API twin admitted (POST .../eviction answered 201) since ``since``."""
    found = []
    with open(os.path.join(lab.state_dir, "kube-records.jsonl"), encoding="utf-8") as stream:
        for line in stream:
            if '"record":"request"' not in line:
                continue
            record = json.loads(line)
            path = record.get("path") or ""
            if record["ts"] >= since and record.get("method") == "POST" and record.get("code") == 201 \
                    and path.endswith("/eviction"):
                parts = path.split("/")
                found.append((parts[parts.index("namespaces") + 1], parts[parts.index("pods") + 1]))
    return found


def node_state(lab):
    node = read_node(lab, NODE)
    status = lab.node_status(NODE)
    return {"unschedulable": bool(node["spec"].get("unschedulable")),
            "taints": {(taint["key"], taint.get("effect")) for taint in node["spec"].get("taints") or []},
            "labels": node["metadata"].get("labels") or {},
            "annotations": node["metadata"].get("annotations") or {},
            "boot_id": status["boot_id"], "faults": status["faults"]}


def reset_records(lab):
    """boot id of each GPU's last `nvidia-smi --gpu-reset` on NODE (the twin's nvidia-smi state, per GPU UUID)."""
    done = lab.ssh(NODE, "cat %s" % GPU_STATE, check=False)
    state = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}
    return {uuid: entry.get("boot_id") for uuid, entry in state.items() if "reset_baseline" in entry}


def test_xid79_is_repaired_then_a_recurrence_takes_the_node_out_of_the_pool(fleet, webhook, tmp_path):
    start_workload(fleet)
    fleet.gpulab("fault", NODE, "xid:79:1")
    before = node_state(fleet)
    assert not reset_records(fleet)
    confirm = dict(gpuops_remediate=True, gpuops_xid79_repair=True, gpuops_ticket_webhook_url=webhook["url"])

    # diagnose names it and changes nothing
    run = run_diagnose(fleet, tmp_path / "read-only")
    assert run.rc == 0 and not run.failed, run.failed
    assert 4 in [case["case"] for case in run.shown["cases"]]
    assert "xid_79" in [entry["code"] for entry in run.shown["diagnosis"]]
    assert not run.changed
    assert_trail_verifies(run)

    # the dry run reports and changes nothing
    run = run_diagnose(fleet, tmp_path / "dry-run", check=True, **confirm)
    assert run.rc == 0 and not run.failed, run.failed
    after_dry = node_state(fleet)
    assert after_dry["boot_id"] == before["boot_id"] and "xid:79:1" in after_dry["faults"]
    assert not after_dry["unschedulable"] and not webhook["calls"]
    assert "gpuops.nvidia/xid79-repaired-at" not in after_dry["annotations"]
    assert workload_pods(fleet) and not reset_records(fleet)
    assert_trail_verifies(run)
    assert_no_password(fleet, run, webhook)

    # the confirmed repair: the reset cannot bring a lost GPU back, the BMC power cycle does; verified, given back
    since = time.time()
    pods = workload_pods(fleet)
    run = run_diagnose(fleet, tmp_path / "repair", **confirm)
    assert run.rc == 0 and not run.failed, run.failed
    assert "Cold power cycle through the BMC" in run.changed and DCGM_TASK in run.ok
    repaired = node_state(fleet)
    assert repaired["boot_id"] != before["boot_id"] and not repaired["faults"]
    assert not repaired["unschedulable"]
    assert ("gpuops.nvidia/hardware", "NoSchedule") not in repaired["taints"]
    assert "gpuops.nvidia/xid79-repaired-at" in repaired["annotations"]
    assert fleet.ssh(NODE, "nvidia-smi -L").stdout.count("GPU-") == 8
    assert fleet.events(node=NODE, kind="bmc-reset")[-1]["reset_type"] == "PowerCycle"
    assert not webhook["calls"]
    # the drain evicted the node's workload (the API twin admitted the eviction of each of its pods)
    assert {("default", pod) for pod in pods} <= set(admitted_evictions(fleet, since))
    # the reset was tried on the GPUs still on the bus, in the boot that the power cycle ended
    resets = reset_records(fleet)
    assert len(resets) == 7 and set(resets.values()) == {before["boot_id"]}, resets
    # the trail verifies and names each action of the repair, in order
    assert_trail_verifies(run)
    assert_no_password(fleet, run, webhook)
    actions = run.actions()
    assert {("Drain the node", "gpuops.nvidia.node_drain", "changed"),
            ("Cold power cycle through the BMC", "gpuops.nvidia.bmc_power", "changed"),
            ("Uncordon the repaired node", "gpuops.nvidia.node_drain", "changed")} <= actions, actions
    reset = run.line("Reset the GPUs (nothing holds them)")
    assert reset["action"] == "ansible.builtin.command" and reset["status"] == "ok" and reset["rc"] != 0, reset
    gate = run.line(DCGM_TASK)
    assert gate["event"] == "gate" and gate["gate"] == "dcgm_diag" and gate["passed"] is True, gate
    order = [run.line(task)["seq"] for task in ("Drain the node", "Reset the GPUs (nothing holds them)",
                                                "Cold power cycle through the BMC", DCGM_TASK,
                                                "Uncordon the repaired node")]
    assert order == sorted(order), order

    # the GPU falls off again within the window: out of the pool, one ticket, also when diagnose runs again
    fleet.gpulab("fault", NODE, "xid:79:1")
    boot_id = node_state(fleet)["boot_id"]
    runs = {}
    for attempt in ("recurrence", "again"):
        runs[attempt] = run = run_diagnose(fleet, tmp_path / attempt, **confirm)
        assert run.rc == 0 and not run.failed, run.failed
        assert_trail_verifies(run)
        assert_no_password(fleet, run, webhook)
    out = node_state(fleet)
    assert out["labels"].get("gpuops.nvidia/out-of-pool") == "true"
    assert ("gpuops.nvidia/out-of-pool", "NoExecute") in out["taints"]
    assert "Xid 79" in out["annotations"]["gpuops.nvidia/out-of-pool"]
    assert out["unschedulable"] and out["boot_id"] == boot_id
    assert len(webhook["calls"]) == 1
    assert webhook["calls"][0]["node"] == NODE and webhook["calls"][0]["xid"] == 79
    actions = runs["recurrence"].actions()
    assert {("Label and annotate the node out of the pool", "kubernetes.core.k8s", "changed"),
            ("Taint the node out of the pool (running pods are evicted, nothing new lands)",
             "kubernetes.core.k8s_taint", "changed"),
            ("Open one hardware ticket for the node", "ansible.builtin.uri", "ok")} <= actions, actions
    assert not [action for action in actions if action[0] in ("Drain the node", "Cold power cycle through the BMC")
                and action[2] != "skipped"], actions
    # the second run leaves the ticket it finds open: the trail shows the call skipped
    assert run.line("Open one hardware ticket for the node")["status"] == "skipped"
