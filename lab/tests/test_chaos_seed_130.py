"""Chaos seed 130 (`make chaos SEEDS=130 CHAOS_NODES=4`, benchmarks/results/chaos/130.json): a resume split the
batch the killed run had in flight, and the stop that followed left one of its nodes cordoned mid-upgrade.

4 nodes, budget 50 % (2), batches [1, "50%"]: the canary gpu-node-01 done, then batch 2 = gpu-node-02 and
gpu-node-03, both recorded `draining` and cordoned by node_drain, when the controller was SIGKILLed (7th record
change). The resume (same run id) planned gpu-node-02 alone as its canary batch and gpu-node-03 with gpu-node-04
as the next one; an Xid 79 on gpu-node-01 failed the soak after the first batch (rollback on: gpu-node-02
rolled back) and the roll-out stopped, leaving gpu-node-03 cordoned with its record at `draining`, no reason:
an end state docs/driver_upgrade.md does not describe (a node the run cordoned ends done, rolled back, or
failed with the reason). Every later run is refused (gpu-node-02 blocks), so nothing ever finishes gpu-node-03.

Fixed in the plan (plugins/module_utils/rollout/plan.py, build_plan): nodes an interrupted run left mid-way
(resume continue/reboot/verify) are out already and go together in the resumed plan's first batch.
"""
from __future__ import annotations

import json

OLD, NEW = "595.91.07", "615.71.09"


def node(name, record=None, cordoned=False, driver=OLD):
    annotations = {"gpuops.nvidia/driver-upgrade": json.dumps(record)} if record else {}
    return {"metadata": {"name": name, "labels": {"nvidia.com/cuda.driver-version.full": driver,
                                                  "nvidia.com/gpu.present": "true"},
                         "annotations": annotations},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_seed_130_a_resume_puts_every_node_the_killed_run_had_in_flight_in_its_first_batch(collection_module_utils):
    plan = collection_module_utils("rollout.plan")
    draining = {"state": "draining", "from": OLD, "to": NEW, "run_id": "chaos-130",
                "steps": {"draining": "2026-12-03T23:51:53Z"}}
    done = {"state": "done", "from": OLD, "to": NEW, "run_id": "chaos-130", "steps": {"done": "2026-12-03T23:50:00Z"}}
    nodes = [node("gpu-node-01", done, driver=NEW), node("gpu-node-02", draining, cordoned=True), node("gpu-node-03", draining, cordoned=True),
             node("gpu-node-04")]
    built = plan.build_plan(["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"], nodes, NEW, [1, "50%"],
                            max_unavailable="50%")
    assert built["blockers"] == []
    assert [built["nodes"][name]["action"] for name in ("gpu-node-02", "gpu-node-03")] == ["continue", "continue"]
    assert set(built["batches"][0]["nodes"]) == {"gpu-node-02", "gpu-node-03"}, built["batches"]
