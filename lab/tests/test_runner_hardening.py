"""Issue 27 on the fleet twin, as the hostile reviewer reproduced it: the real `gpuops` command, the real audit
callback and the runbooks over SSH on two node twins and the Kubernetes API twin.

- the trail fails closed: an apply with an audit log that takes no lines changes nothing (no Lease, no cordon);
- the syslog copy anchors the trail: a cut tail, an appended forged line, a re-chained file and an edited last
  line are caught without the HMAC key, and an older genuine head still verifies;
- extra vars are data: a lookup of the HMAC key is refused and the key lands in no file and no output;
- one confirmation binds every host: the runner refuses an inventory with a host of another cluster, and so does
  the runbook's first task when ansible-playbook is run by hand with gpuops_confirm;
- reserved variables cannot be set with -e.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from conftest import start_lab, stop_lab
from gpulab.testkit.lab import VENV_BIN
from gpuops_cli import collection_path, gpuops, records

pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"
HMAC_KEY = "hardening-hmac-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("hardening") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        yield lab
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def kubectl(lab, *args) -> dict:
    done = subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig"), "-o", "json"]
                          + list(args), capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout)


def inventory(fleet) -> str:
    return os.path.join(fleet.state_dir, "inventory.yml")


def mixed_inventory(fleet, tmp_path) -> str:
    """The twin's inventory plus a host of another cluster, selectable through a runbook variable."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(inventory(fleet), str(folder / "hosts.yml"))
    (folder / "other.yml").write_text("other_cluster:\n  hosts:\n    prod-gpu-01:\n"
                                      "      ansible_host: 192.0.2.99\n      gpuops_cluster_name: gpu-prod-1\n")
    return str(folder)


def test_an_apply_whose_trail_takes_no_lines_changes_nothing(fleet, tmp_path):
    """Point 2: before, the Lease was taken and released with no audit line, then a traceback and no report."""
    leases_before = kubectl(fleet, "get", "leases", "-A")["items"]
    done = gpuops("upgrade", "-i", inventory(fleet), "--data-dir", str(tmp_path / "data"), "--audit-log",
                  "/proc/version", "-e", "gpuops_driver_version=580.95.05", "--apply", "--ticket", "CHG-27",
                  "--confirm", "gpulab")
    assert done.returncode == 8, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "--audit-log: /proc/version cannot be written" in done.stderr
    assert kubectl(fleet, "get", "leases", "-A")["items"] == leases_before
    assert all(not node["spec"].get("unschedulable") for node in kubectl(fleet, "get", "nodes")["items"])
    assert os.listdir(tmp_path / "data" / "runs") == []


@pytest.fixture(scope="module")
def anchored(fleet, tmp_path_factory):
    """An apply run whose lines all went to a syslog socket too: the trail and the syslog export."""
    work = tmp_path_factory.mktemp("anchored")
    path = str(work / "log.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(0.2)
    received, stop = [], threading.Event()

    def drain():
        while not stop.is_set():
            try:
                received.append(receiver.recv(65536).decode("utf-8", "replace"))
            except socket.timeout:
                continue

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    data_dir = str(work / "data")
    env = {"GPUOPS_AUDIT_SYSLOG": "true", "GPUOPS_AUDIT_SYSLOG_ADDRESS": path}
    first = gpuops("diagnose", "-i", inventory(fleet), "--data-dir", data_dir, env=env)
    done = gpuops("diagnose", "-i", inventory(fleet), "--data-dir", data_dir, "--apply", "--ticket", "CHG-28",
                  "--confirm", "gpulab", env=env)
    stop.set()
    reader.join(5)
    receiver.close()
    assert first.returncode == 0 and done.returncode == 0, done.stdout + done.stderr
    export = work / "syslog-export.txt"
    export.write_text("".join("Dec  3 01:00:00 bastion %s\n" % message.split(">", 1)[1] for message in received))
    with open(os.path.join(data_dir, "audit.jsonl")) as stream:
        lines = stream.read().splitlines()
    return {"work": work, "lines": lines, "export": str(export), "data_dir": data_dir,
            "first_head": open(os.path.join(data_dir, "runs", records(os.path.join(data_dir, "audit.jsonl"))[0][
                "run_id"], "audit-head")).read().strip()}


def verify(path, *args, key=""):
    return gpuops("audit", "verify", path, *args, env={"GPUOPS_AUDIT_HMAC_KEY": key})


def copy_with(anchored, name, lines) -> str:
    path = str(anchored["work"] / name)
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    return path


def rechain(lines, start):
    """What a forger without the key can do: re-seal every line from ``start`` on (chain code of the collection)."""
    sys.path.insert(0, collection_path())
    from ansible_collections.gpuops.nvidia.plugins.module_utils.audit import chain
    out = lines[:start]
    for line in lines[start:]:
        out.append(chain.seal(json.loads(line), out[-1] if out else None))
    return out


def test_the_syslog_copy_anchors_the_whole_trail_and_an_older_head_still_verifies(anchored):
    trail = copy_with(anchored, "genuine.jsonl", anchored["lines"])
    full = verify(trail, "--anchors-from", anchored["export"], "--require-anchored-head")
    assert full.returncode == 0, full.stdout + full.stderr
    assert "the newest at line %d" % len(anchored["lines"]) in full.stdout
    older = verify(trail, "--head", anchored["first_head"])
    assert older.returncode == 0 and "intact" in older.stdout, older.stdout


def edited_last(lines):
    record = json.loads(lines[-1])
    record["exit_code"] = 0
    record["outcome"] = "done (edited)"
    return lines[:-1] + [json.dumps(record, sort_keys=True, separators=(",", ":"))]


@pytest.mark.parametrize("name, change", [
    ("truncated tail", lambda lines: lines[:-3]),
    ("forged line appended", lambda lines: rechain(lines + [lines[-1]], len(lines))),
    ("fully re-chained after an edit", lambda lines: rechain(
        [lines[0].replace("diagnose", "upgrade")] + lines[1:], 0)),
    ("edited last line", edited_last),
])
def test_tampering_is_caught_without_the_key_by_the_syslog_anchors(anchored, name, change):
    tampered = copy_with(anchored, "tampered.jsonl", change(list(anchored["lines"])))
    plain = verify(tampered)
    verdict = verify(tampered, "--anchors-from", anchored["export"], "--require-anchored-head")
    assert verdict.returncode == 1 and "TAMPERED" in verdict.stdout, (name, plain.stdout, verdict.stdout)


def test_a_lookup_of_the_hmac_key_in_an_extra_var_is_refused_and_the_key_lands_nowhere(fleet, tmp_path):
    """Point 4: before, the key was written into the trail, the report and the runner's artifacts."""
    data_dir = tmp_path / "data"
    done = gpuops("diagnose", "-i", inventory(fleet), "--data-dir", str(data_dir),
                  "-e", 'x={{ lookup("env", "GPUOPS_AUDIT_HMAC_KEY") }}', env={"GPUOPS_AUDIT_HMAC_KEY": HMAC_KEY})
    assert done.returncode == 3 and "-e x holds a Jinja template" in done.stderr, done.stdout + done.stderr
    assert HMAC_KEY not in done.stdout + done.stderr
    for root, _, names in os.walk(data_dir):
        for name in names:
            with open(os.path.join(root, name), "rb") as stream:
                assert HMAC_KEY.encode() not in stream.read(), name
    assert [record["event"] for record in records(str(data_dir / "audit.jsonl"))] == ["refused"]


def test_the_runner_binds_the_confirmation_to_every_host_of_the_inventory(fleet, tmp_path):
    """Point 5: before, bootstrap --apply --confirm lab acted on a host of another cluster chosen with a runbook
    variable."""
    done = gpuops("bootstrap", "-i", mixed_inventory(fleet, tmp_path), "--data-dir", str(tmp_path / "data"),
                  "-e", "gpuops_bootstrap_hosts=other_cluster", "-e", "gpuops_driver_version=" + DRIVER,
                  "--apply", "--ticket", "CHG-29", "--confirm", "gpulab")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "several clusters" in done.stderr and "prod-gpu-01" in done.stderr


@pytest.mark.parametrize("playbook", ["node_bootstrap", "diagnose", "driver_upgrade"])
def test_each_runbook_refuses_a_host_of_another_cluster_before_its_first_change(fleet, tmp_path, playbook):
    """The same rule in the runbooks, for ansible-playbook run by hand with gpuops_confirm: their first task."""
    trail = str(tmp_path / "audit.jsonl")
    env = dict(fleet.env, ANSIBLE_COLLECTIONS_PATH=collection_path(), ANSIBLE_CALLBACKS_ENABLED="gpuops.nvidia.audit",
               GPUOPS_AUDIT_LOG=trail)
    done = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", mixed_inventory(fleet, tmp_path),
                           "gpuops.nvidia." + playbook, "-e", "gpuops_confirm=gpulab",
                           "-e", "gpuops_driver_version=" + DRIVER],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    assert "binds every inventory host, but these carry another gpuops_cluster_name or none: prod-gpu-01" in \
        done.stdout, done.stdout[-3000:]
    steps = [record for record in records(trail) if record["event"] in ("task", "gate")
             and record["action"] not in ("gather_facts", "ansible.builtin.gather_facts")]    # reads, no change
    gates = [step for step in steps if step["event"] == "gate"]
    assert [(gate["gate"], gate["status"]) for gate in gates] == [("cluster_confirmed", "failed")], steps
    # before it only the input checks ran (the spec, the settings: reads); after it nothing
    assert steps[-1] is gates[0], steps
    assert all(not step.get("changed") and step["status"] in ("ok", "skipped") for step in steps[:-1]), steps
    assert all(not node["spec"].get("unschedulable") for node in kubectl(fleet, "get", "nodes")["items"])


@pytest.mark.parametrize("argv, name", [
    (("upgrade", "--apply", "--ticket", "CHG-30", "--confirm", "gpulab", "-e", "gpuops_ticket=FORGED-1"),
     "gpuops_ticket"),
    (("plan", "-e", "gpuops_confirm=gpulab"), "gpuops_confirm"),
    (("diagnose", "-e", "gpuops_run_id=mine"), "gpuops_run_id"),
])
def test_reserved_variables_cannot_be_set_with_extra_vars(fleet, tmp_path, argv, name):
    done = gpuops(argv[0], "-i", inventory(fleet), "--data-dir", str(tmp_path / "data"), *argv[1:])
    assert done.returncode == 3 and "-e %s is reserved" % name in done.stderr, done.stdout + done.stderr
    assert [record["event"] for record in records(str(tmp_path / "data" / "audit.jsonl"))] == ["refused"]
    assert "FORGED-1" not in open(str(tmp_path / "data" / "audit.jsonl")).read()
