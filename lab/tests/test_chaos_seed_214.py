"""Regression test of chaos seed 214 (benchmarks/results/chaos/214.json): an Xid during a soak, with
`gpuops_rollback_on_failure` off, failed the soak gate and recorded the batch's node `failed` - but the node had
been given back at `done` and stayed schedulable: "failed but not cordoned", against the runbook's promise that
every node it touched ends uncordoned and healthy or cordoned with why. Now the node is cordoned again, saying
why, the roll-out stops, later batches are untouched and the invariants hold."""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from test_runbook_upgrade_faults import PROMETHEUS, XID_QUERY, assert_failed_and_held, assert_untouched, wait_for
from upgrade_helpers import DRIVER_LABEL, NEW, OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None or not PROMETHEUS,
                                reason="needs the collection tree (make tree) and prometheus")
CANARY, OTHER = "gpu-node-01", "gpu-node-02"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("seed-214") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5",
                    "--prometheus")
    yield Fleet(lab, tmp_path_factory.mktemp("seed-214-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def test_seed_214_a_soak_failure_without_rollback_leaves_the_node_cordoned_with_why(fleet):
    def inject_xid_once_the_canary_soaks():
        wait_for(lambda: (fleet.record(fleet.nodes()[CANARY]) or {}).get("state") == "done",
                 "the canary done", timeout_s=600)
        fleet.lab.gpulab("fault", CANARY, "xid:48")

    injector = threading.Thread(target=inject_xid_once_the_canary_soaks, daemon=True)
    since = time.time()
    injector.start()
    rc, output = fleet.run(check=False, gpuops_confirm="gpulab", gpuops_run_id="seed-214",
                           gpuops_rollback_on_failure=False, gpuops_soak_seconds={"canary": 6, "batch": 0},
                           gpuops_prometheus_url=fleet.lab.info["metrics"]["prometheus_url"],
                           gpuops_prometheus_queries=[XID_QUERY])
    injector.join(timeout=5)
    assert rc != 0 and "the soak after batch 1 failed" in output, output[-3000:]
    record = assert_failed_and_held(fleet, CANARY)          # failed, cordoned, the reason in the record
    assert "soak after batch 1" in record["reason"] and XID_QUERY["name"] in record["reason"], record
    canary = fleet.nodes()[CANARY]
    assert "soak after batch 1" in canary["metadata"]["annotations"].get("gpuops.nvidia/cordon-reason", "")
    assert canary["metadata"]["labels"][DRIVER_LABEL] == NEW        # not rolled back: rollback is off
    assert fleet.boots(since) == {CANARY: 1}
    assert_untouched(fleet, OTHER, since)
    assert fleet.lock_holder() is None
    fleet.check_invariants(max_unavailable=1)
