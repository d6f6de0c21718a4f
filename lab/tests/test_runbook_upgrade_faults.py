"""The driver upgrade runbook's fault matrix (issue 9, cases 2, 3, 4, 7 and 8) on the fleet twin: each case breaks
the canary the way it breaks in real life, runs the real playbook over SSH and HTTPS and judges it from the twin's
records: node boots (event log), the API's change records (device-plugin pod restarts, the checker's PDB and
budget replay) and what the API and the nodes show afterwards. Cases 1, 5, 6, 9 and 10 are in
test_runbook_driver_upgrade.py.

Two 2-node labs (boot delay 0.5 s), each shared by the cases that can give their nodes back cleanly, in an order
where the case that leaves a node changed comes last: a plain lab (Secure Boot without a usable key, PDB, then the
reboot that never returns) and a lab with a real Prometheus (Xid during the soak with rollback, then the stale
device-plugin ledger).
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


def start_fleet(tmp_path_factory, name: str, *up_args) -> Fleet:
    state_dir = str(tmp_path_factory.mktemp(name) / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5",
                    "--mok-timeout", "1", *up_args)
    return Fleet(lab, tmp_path_factory.mktemp(name + "-runs"))


def stop_fleet(fleet: Fleet) -> None:
    stop_lab(fleet.lab)
    shutil.rmtree(os.path.dirname(fleet.lab.state_dir), ignore_errors=True)


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


def assert_no_double_reboot(fleet: Fleet, since: float) -> None:
    assert all(count <= 1 for count in fleet.boots(since).values()), fleet.boots(since)


def give_back(fleet: Fleet, name: str) -> None:
    """What the person at 2 AM does once the cause is fixed: uncordon and remove the failed record."""
    fleet.module("node_drain", {"name": name, "state": "uncordon"})
    fleet.module("node_upgrade_record", {"name": name, "state": "absent"})
    node = fleet.nodes()[name]
    assert fleet.record(node) is None and not node["spec"].get("unschedulable"), node["metadata"]


def wait_for(condition, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("not within %ss: %s" % (timeout_s, what))


# --------------------------------------------------------------------------- a plain lab: 8, 2, then 3

@pytest.fixture(scope="class")
def plain(needs_root, tmp_path_factory):
    fleet = start_fleet(tmp_path_factory, "upgrade-faults")
    yield fleet
    stop_fleet(fleet)


@pytest.mark.usefixtures("plain")
class TestCanaryFaults:
    def test_8_secure_boot_without_a_usable_enrolled_key_is_refused_before_any_drain(self, plain):
        # a firmware reset: Secure Boot on, the MOK list empty; the node's module is no longer loaded
        plain.lab.gpulab("fault", CANARY, "secure-boot-no-key")
        plain.lab.reboot_from_inside(CANARY)
        try:
            since = time.time()
            rc, output = plain.run(check=False, gpuops_confirm="gpulab")
            assert rc != 0
            assert "%s does not meet" % CANARY in output and "secure_boot_no_signing_key" in output

            # a signing key on the node that is not enrolled: staging it needs a person at the console at the
            # next boot, which an unattended roll-out does not have
            plain.lab.ssh(CANARY, "mkdir -p {0} && openssl req -new -x509 -newkey rsa:2048 -nodes -days 3650"
                                  " -subj /CN=gpulab-test-mok -keyout {0}/MOK.priv -outform DER -out {0}/MOK.der"
                                  " 2>/dev/null".format(MOK_DIR))
            rc, output = plain.run(check=False, gpuops_confirm="gpulab")
            assert rc != 0
            assert "%s does not meet" % CANARY in output and "secure_boot_key_not_enrolled" in output
            assert_untouched(plain, CANARY, since, driver_label=None)     # no module loaded: no driver label
            assert_untouched(plain, OTHER, since)
            assert plain.lock_holder() is None
        finally:
            plain.lab.ssh(CANARY, "rm -rf %s" % MOK_DIR, check=False)
            plain.lab.gpulab("clear", CANARY, "secure-boot-no-key")
            plain.lab.reboot_from_inside(CANARY)
        wait_for(lambda: plain.nodes()[CANARY]["status"]["allocatable"].get("nvidia.com/gpu") == "8",
                 "the canary's GPUs back after Secure Boot was turned off again")

    def test_2_a_pdb_that_blocks_the_drain_fails_the_canary_before_its_reboot(self, plain):
        plain.lab.gpulab("fault", CANARY, "pdb-block")   # a Deployment on the canary, PDB minAvailable = replicas
        try:
            wait_for(lambda: [pod for pod in plain.kubectl_json("get", "pods", "-n", "gpulab-faults")["items"]
                              if pod["status"].get("phase") == "Running"], "the PDB-guarded pod running")
            since = time.time()
            rc, output = plain.run(check=False, gpuops_confirm="gpulab", gpuops_drain_timeout=5)
            assert rc != 0
            record = assert_failed_and_held(plain, CANARY)
            assert "pdb-block-%s" % CANARY in record["reason"], record
            assert list(record["steps"]) == ["draining", "failed"], record    # never installed, never rebooted
            assert plain.boots(since) == {}
            assert_untouched(plain, OTHER, since)
            assert plain.lock_holder() is None
            assert "stopped after batch 1" in output
            plain.check_invariants(max_unavailable=1)
        finally:
            plain.lab.gpulab("clear", CANARY, "pdb-block")
        wait_for(lambda: not plain.kubectl_json("get", "pods", "-n", "gpulab-faults")["items"],
                 "the PDB-guarded pods gone")
        give_back(plain, CANARY)

    def test_3_a_canary_that_never_comes_back_from_its_reboot_stops_the_roll_out(self, plain):
        plain.lab.gpulab("fault", CANARY, "reboot-hang")
        since = time.time()
        rc, output = plain.run(check=False, gpuops_confirm="gpulab", gpuops_reboot_timeout=20)
        assert rc != 0
        record = assert_failed_and_held(plain, CANARY)
        assert record["reason"].startswith("Reboot the node"), record
        assert list(record["steps"]) == ["draining", "installing", "rebooting", "failed"], record
        assert plain.boots(since) == {}                # it went down and never came up
        assert plain.lab.node_status(CANARY)["status"] == "hung"
        assert_untouched(plain, OTHER, since)
        assert plain.lock_holder() is None
        assert "stopped after batch 1" in output
        plain.check_invariants(max_unavailable=1)


# --------------------------------------------------------------------------- a lab with Prometheus: 7, then 4

@pytest.fixture(scope="class")
def monitored(needs_root, tmp_path_factory):
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (Debian package prometheus)")
    fleet = start_fleet(tmp_path_factory, "upgrade-faults-prom", "--prometheus")
    yield fleet
    stop_fleet(fleet)


@pytest.mark.usefixtures("monitored")
class TestSoakAndVerifyFaults:
    def test_7_an_xid_during_the_canary_soak_stops_the_roll_out_and_rolls_the_canary_back(self, monitored):
        def inject_xid_once_the_canary_soaks():
            wait_for(lambda: (monitored.record(monitored.nodes()[CANARY]) or {}).get("state") == "done",
                     "the canary done", timeout_s=300)
            monitored.lab.gpulab("fault", CANARY, "xid:48")    # a double-bit ECC error

        injector = threading.Thread(target=inject_xid_once_the_canary_soaks, daemon=True)
        since = time.time()
        injector.start()
        try:
            rc, output = monitored.run(
                check=False, gpuops_confirm="gpulab", gpuops_rollback_on_failure=True,
                gpuops_soak_seconds={"canary": 10, "batch": 0},
                gpuops_prometheus_url=monitored.lab.info["metrics"]["prometheus_url"],
                gpuops_prometheus_queries=[XID_QUERY])
            injector.join(timeout=5)
            assert rc != 0
            canary = monitored.nodes()[CANARY]
            record = monitored.record(canary)
            # caught by Prometheus during the soak, then back on the driver it had, verified and given back
            assert record["state"] == "rolled-back", record
            assert "soak after batch 1" in record["reason"] and XID_QUERY["name"] in record["reason"], record
            assert canary["metadata"]["labels"][DRIVER_LABEL] == OLD
            assert not canary["spec"].get("unschedulable")
            module = monitored.lab.ssh(CANARY, "cat /sys/module/nvidia/version").stdout.strip()
            assert module == OLD
            assert monitored.boots(since) == {CANARY: 2}     # the upgrade's reboot and the rollback's
            assert_untouched(monitored, OTHER, since)
            assert monitored.lock_holder() is None
            assert "the soak after batch 1 failed" in output
            monitored.check_invariants(max_unavailable=1)
        finally:
            monitored.lab.gpulab("clear", CANARY)
        give_back(monitored, CANARY)

    def test_4_a_stale_device_plugin_after_the_reboot_is_restarted_once_and_the_roll_out_completes(self, monitored):
        monitored.lab.gpulab("fault", CANARY, "stale-device-plugin", "--at-next-boot")
        since = time.time()
        monitored.run(gpuops_confirm="gpulab")
        nodes = monitored.nodes()
        for name, node in nodes.items():
            assert monitored.record(node)["state"] == "done", name
            assert node["metadata"]["labels"][DRIVER_LABEL] == NEW, name
            assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8", name
            assert not node["spec"].get("unschedulable"), name
        assert monitored.plugin_restarts(since) == {CANARY: 1}
        assert monitored.boots(since) == {CANARY: 1, OTHER: 1}
        monitored.check_invariants(max_unavailable=1)
