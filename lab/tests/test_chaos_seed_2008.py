"""Chaos seed 2008 (`make chaos SEEDS=2008 CHAOS_KINDS=restarts`, benchmarks/results/chaos/2008.json): the device
plugin of gpu-node-02 crash-looped from its install on (rollback on). Its verify found no allocatable GPUs, the one
device-plugin restart failed, the rollback reinstalled the old driver and rebooted the node, and its verify failed
the same way. The record ended `failed` with nothing in it of the rollback, so the node's second reboot looked like
a double reboot of one upgrade. A controller killed mid-rollback would have left a record that did not say a
rollback was under way. The restart's error said only "not Running and Ready in time".

Fixed in the runbook (playbooks/tasks/upgrade_rollback.yml, node_upgrade_record `rollback_to`): the record says
"rolling back to <previous> after: <why>" before the rollback changes anything, and keeps `rollback_to` when the
rollback fails. device_plugin_restart now names the replacement pod's state (CrashLoopBackOff, restarts, last exit),
and waits no longer than `gpuops_ready_timeout`.
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from test_runbook_upgrade_faults import assert_failed_and_held, assert_untouched, wait_for
from upgrade_helpers import OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="needs the collection tree (make tree)")
CANARY, OTHER = "gpu-node-01", "gpu-node-02"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("seed-2008") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    yield Fleet(lab, tmp_path_factory.mktemp("seed-2008-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_seed_2008_a_rollback_that_fails_is_in_the_record_from_its_start(fleet):
    def crash_the_plugin_while_the_canary_installs():
        wait_for(lambda: (fleet.record(fleet.nodes()[CANARY]) or {}).get("state") == "installing",
                 "the canary installing", timeout_s=600)
        fleet.lab.gpulab("fault", CANARY, "device-plugin-crash")

    injector = threading.Thread(target=crash_the_plugin_while_the_canary_installs, daemon=True)
    since = time.time()
    injector.start()
    try:
        rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_run_id="seed-2008",
                               gpuops_rollback_on_failure=True, gpuops_ready_timeout=15)
    finally:
        injector.join(timeout=5)
        fleet.lab.gpulab("clear", CANARY, "device-plugin-crash", check=False)
    assert rc != 0, output[-3000:]
    record = assert_failed_and_held(fleet, CANARY)
    assert record["rollback_to"] == OLD, record
    assert "; rollback to %s failed: " % OLD in record["reason"], record
    assert "CrashLoopBackOff" in record["reason"], record       # what kept the replacement plugin pod from ready
    assert fleet.boots(since) == {CANARY: 2}                     # the upgrade's reboot and the rollback's
    assert_untouched(fleet, OTHER, since)
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=1)
