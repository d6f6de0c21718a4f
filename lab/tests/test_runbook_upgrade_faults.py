"""The driver upgrade runbook's fault matrix (issue 9, cases 2, 3, 4, 7 and 8) on the fleet twin: each case breaks
a node the way it breaks in real life, runs the real playbook over SSH and HTTPS and judges it from the twin's
records: node boots (event log), the API's change records (cordons, device-plugin pod restarts, the checker's PDB
and budget replay) and what the API and the nodes show afterwards. Cases 1, 5, 6, 9 and 10 are in
test_runbook_driver_upgrade.py.

One 2-node lab (boot delay 0.5 s, a real Prometheus scraping it) for all cases, in an order where each case gives
the nodes back as it found them (faults cleared, records removed, uncordoned; checked before the next case) and the
case that completes the roll-out comes last: 8 Secure Boot without a usable key, 2 PDB, 7 Xid during the soak with
rollback, 3 the reboot that never returns (the canary then boots into the new driver), 4 the stale device-plugin
ledger (the canary, already at the target, is skipped; the other node goes).
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

CANARY, OTHER = "gpu-node-01", "gpu-node-02"
MOK_DIR = "/var/lib/gpuops/mok"
XID_QUERY = {"name": "no Xid on any GPU", "query": "DCGM_FI_DEV_XID_ERRORS", "op": "==", "threshold": 0}
PROMETHEUS = shutil.which("prometheus")


def assert_untouched(fleet: Fleet, name: str, since: float, driver_label=OLD) -> None:
    """Nothing after a failed gate: the node has no record, was never cordoned and never rebooted."""
    node = fleet.nodes()[name]
    assert fleet.record(node) is None, (name, fleet.record(node))
    assert not node["spec"].get("unschedulable"), name
    assert node["metadata"]["labels"].get(DRIVER_LABEL) == driver_label, name
    cordons = [record for record in fleet.change_records(since) if record["resource"] == "nodes"
               and record["name"] == name and (record["object"].get("spec") or {}).get("unschedulable")]
    assert cordons == [], "%s was cordoned" % name
    assert name not in fleet.boots(since), "%s was rebooted" % name


def assert_failed_and_held(fleet: Fleet, name: str) -> dict:
    """The failed node stays cordoned, annotated failed with the reason; returns its record."""
    node = fleet.nodes()[name]
    assert node["spec"].get("unschedulable") is True, name
    record = fleet.record(node)
    assert record["state"] == "failed" and record["reason"], record
    return record


def steps_in_order(record: dict) -> list:
    """The states a node's record went through, by the time it entered each (RFC 3339 UTC sorts as text)."""
    return sorted(record["steps"], key=record["steps"].get)


def give_back(fleet: Fleet, name: str) -> None:
    """What the person at 2 AM does once the cause is fixed: uncordon and remove the failed record."""
    fleet.module("node_drain", {"name": name, "state": "uncordon"})
    fleet.module("node_upgrade_record", {"name": name, "state": "absent"})
    node = fleet.nodes()[name]
    assert fleet.record(node) is None and not node["spec"].get("unschedulable"), node["metadata"]


def wait_for(condition, what: str, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("not within %ss: %s" % (timeout_s, what))


def wait_ready(fleet: Fleet, name: str, driver: str) -> None:
    """The node back as a GPU node on `driver`: Ready, 8 GPUs allocatable, GFD's driver label."""
    def ready():
        node = fleet.nodes()[name]
        conditions = {condition["type"]: condition["status"] for condition in node["status"]["conditions"]}
        return (conditions.get("Ready") == "True" and node["status"]["allocatable"].get("nvidia.com/gpu") == "8"
                and node["metadata"]["labels"].get(DRIVER_LABEL) == driver)
    wait_for(ready, "%s Ready with 8 GPUs on %s" % (name, driver))


def assert_as_found(fleet: Fleet, drivers: dict) -> None:
    """The lab as the next case expects it: no record, not cordoned, no fault, the given drivers."""
    for name, driver in drivers.items():
        wait_ready(fleet, name, driver)
        node = fleet.nodes()[name]
        assert fleet.record(node) is None and not node["spec"].get("unschedulable"), (name, node["metadata"])
        status = fleet.lab.node_status(name)
        assert not status.get("faults") and not status.get("armed_faults"), status
    assert fleet.lock_holder() is None


def reboot_with_secure_boot_on(fleet: Fleet, name: str, enabled: bool) -> None:
    """A firmware reset turns Secure Boot on with an empty MOK list (`secure-boot-no-key`, at the next boot), or
    its fix turns it off again; one node at a time, so that never two GPU nodes are out at once."""
    if enabled:
        fleet.lab.gpulab("fault", name, "secure-boot-no-key")
    else:
        fleet.lab.gpulab("clear", name, "secure-boot-no-key")
    boot_id = fleet.lab.reboot_from_inside(name)

    def ready_after_the_reboot():
        status = fleet.nodes()[name]["status"]
        conditions = {condition["type"]: condition["status"] for condition in status["conditions"]}
        return status["nodeInfo"]["bootID"] == boot_id and conditions.get("Ready") == "True"
    wait_for(ready_after_the_reboot, "%s Ready after its reboot" % name)


# --------------------------------------------------------------------------- one lab, the cases in order

@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("upgrade-faults") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5",
                    "--mok-timeout", "1", *(["--prometheus"] if PROMETHEUS else []))
    yield Fleet(lab, tmp_path_factory.mktemp("upgrade-faults-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_8_secure_boot_without_a_usable_enrolled_key_is_refused_before_any_drain(fleet):
    # both nodes after a firmware reset (Secure Boot on, MOK list empty): the canary has no signing key, the other
    # one has a key on disk that is not enrolled; enrolling either needs someone at the console at the next boot
    assert_as_found(fleet, {CANARY: OLD, OTHER: OLD})
    try:
        for name in (CANARY, OTHER):
            reboot_with_secure_boot_on(fleet, name, True)
        fleet.lab.ssh(OTHER, "mkdir -p {0} && openssl req -new -x509 -newkey rsa:2048 -nodes -days 3650"
                             " -subj /CN=gpulab-test-mok -keyout {0}/MOK.priv -outform DER -out {0}/MOK.der"
                             " 2>/dev/null".format(MOK_DIR))
        since = time.time()
        rc, output = fleet.run(check=False, gpuops_confirm="gpulab")
        assert rc != 0
        assert "%s does not meet" % CANARY in output and "secure_boot_no_signing_key" in output
        assert "%s does not meet" % OTHER in output and "secure_boot_key_not_enrolled" in output
        for name in (CANARY, OTHER):
            assert_untouched(fleet, name, since, driver_label=None)   # the module refused at boot: no label
        assert fleet.lock_holder() is None
        assert "Take the cluster-wide roll-out lock" not in output
    finally:
        fleet.lab.ssh(OTHER, "rm -rf %s" % MOK_DIR, check=False)
        for name in (CANARY, OTHER):
            reboot_with_secure_boot_on(fleet, name, False)


def test_2_a_pdb_that_blocks_the_drain_fails_the_canary_before_its_install(fleet):
    assert_as_found(fleet, {CANARY: OLD, OTHER: OLD})
    fleet.lab.gpulab("fault", CANARY, "pdb-block")   # a Deployment on the canary, PDB minAvailable = replicas
    try:
        wait_for(lambda: [pod for pod in fleet.kubectl_json("get", "pods", "-n", "gpulab-faults")["items"]
                          if pod["status"].get("phase") == "Running"], "the PDB-guarded pod running")
        since = time.time()
        rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_drain_timeout=5)
        assert rc != 0
        record = assert_failed_and_held(fleet, CANARY)
        assert "pdb-block-%s" % CANARY in record["reason"], record
        assert steps_in_order(record) == ["draining", "failed"], record    # never installed, never rebooted
        assert fleet.boots(since) == {}
        assert_untouched(fleet, OTHER, since)
        assert fleet.lock_holder() is None
        assert "stopped after batch 1" in output
        fleet.check_invariants(max_unavailable=1)
    finally:
        fleet.lab.gpulab("clear", CANARY, "pdb-block")
    wait_for(lambda: not fleet.kubectl_json("get", "pods", "-n", "gpulab-faults")["items"],
             "the PDB-guarded pods gone")
    give_back(fleet, CANARY)


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)")
def test_7_an_xid_during_the_canary_soak_stops_the_roll_out_and_rolls_the_canary_back(fleet):
    assert_as_found(fleet, {CANARY: OLD, OTHER: OLD})

    def inject_xid_once_the_canary_soaks():
        wait_for(lambda: (fleet.record(fleet.nodes()[CANARY]) or {}).get("state") == "done",
                 "the canary done", timeout_s=600)
        fleet.lab.gpulab("fault", CANARY, "xid:48")    # a double-bit ECC error

    injector = threading.Thread(target=inject_xid_once_the_canary_soaks, daemon=True)
    since = time.time()
    injector.start()
    try:
        rc, output = fleet.run(
            check=False, gpuops_confirm="gpulab", gpuops_rollback_on_failure=True,
            gpuops_soak_seconds={"canary": 6, "batch": 0},
            gpuops_prometheus_url=fleet.lab.info["metrics"]["prometheus_url"],
            gpuops_prometheus_queries=[XID_QUERY])
        injector.join(timeout=5)
        assert rc != 0
        canary = fleet.nodes()[CANARY]
        record = fleet.record(canary)
        # caught by Prometheus during the soak, then back on the driver it had, verified and given back
        assert record["state"] == "rolled-back", record
        assert "soak after batch 1" in record["reason"] and XID_QUERY["name"] in record["reason"], record
        assert canary["metadata"]["labels"][DRIVER_LABEL] == OLD
        assert not canary["spec"].get("unschedulable")
        assert fleet.lab.ssh(CANARY, "cat /sys/module/nvidia/version").stdout.strip() == OLD
        assert fleet.boots(since) == {CANARY: 2}     # the upgrade's reboot and the rollback's
        assert_untouched(fleet, OTHER, since)
        assert fleet.lock_holder() is None
        assert "the soak after batch 1 failed" in output
        fleet.check_invariants(max_unavailable=1)
    finally:
        fleet.lab.gpulab("clear", CANARY)
    give_back(fleet, CANARY)


def test_3_a_canary_that_never_comes_back_from_its_reboot_stops_the_roll_out(fleet):
    assert_as_found(fleet, {CANARY: OLD, OTHER: OLD})
    fleet.lab.gpulab("fault", CANARY, "reboot-hang")
    since = time.time()
    try:
        rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_reboot_timeout=10)
        assert rc != 0
        record = assert_failed_and_held(fleet, CANARY)
        assert record["reason"].startswith("Reboot the node"), record
        assert steps_in_order(record) == ["draining", "installing", "rebooting", "failed"], record
        assert fleet.boots(since) == {}                # it went down and never came up
        assert fleet.lab.node_status(CANARY)["status"] == "hung"
        assert_untouched(fleet, OTHER, since)
        assert fleet.lock_holder() is None
        assert "stopped after batch 1" in output
        fleet.check_invariants(max_unavailable=1)
    finally:
        fleet.lab.gpulab("clear", CANARY, "reboot-hang")   # someone power-cycles it: it boots the new driver
    wait_ready(fleet, CANARY, NEW)
    give_back(fleet, CANARY)


def test_4_a_stale_device_plugin_after_the_reboot_is_restarted_once_and_the_roll_out_completes(fleet):
    assert_as_found(fleet, {CANARY: NEW, OTHER: OLD})
    fleet.lab.gpulab("fault", OTHER, "stale-device-plugin", "--at-next-boot")
    since = time.time()
    _rc, output = fleet.run(gpuops_confirm="gpulab")
    assert "Skipped: %s: already at %s" % (CANARY, NEW) in output
    node = fleet.nodes()[OTHER]
    assert fleet.record(node)["state"] == "done"
    assert node["metadata"]["labels"][DRIVER_LABEL] == NEW
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert not node["spec"].get("unschedulable")
    assert fleet.plugin_restarts(since) == {OTHER: 1}
    assert fleet.boots(since) == {OTHER: 1}
    fleet.check_invariants(max_unavailable=1)
