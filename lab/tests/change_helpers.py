"""Driving the change engine (`gpuops.nvidia.change`, issue 24) against a twin lab: `ChangeFleet(lab, tmp_path,
kind)` runs the real runbook with ansible-playbook for one change kind (`run(inputs, **overrides)`, upgrade_helpers.
Fleet's `run` with the kind's variables) and reads each node's record of the kind back (`change_record`); the rest
(nodes, lock, boots, the invariants from the twin's records) is upgrade_helpers.Fleet's.
"""
from __future__ import annotations

import json
import os

from upgrade_helpers import Fleet


def record_annotation(kind: str) -> str:
    return "gpuops.nvidia/change-" + kind.replace("_", "-")


class ChangeFleet(Fleet):
    RUNBOOK = "change"

    def __init__(self, lab, tmp_path, kind: str):
        super().__init__(lab, tmp_path)
        self.kind = kind

    def extra_vars(self, **overrides) -> dict:
        values = {"gpuops_change_kind": self.kind, "gpuops_soak_seconds": 0, "gpuops_change_batches": [1, 2],
                  "gpuops_run_record_dir": self.record_dir, "gpuops_ready_timeout": 120, "gpuops_drain_timeout": 60,
                  "gpuops_budget_wait_timeout": 0,
                  # run by hand, a kind that needs two people is refused (docs/operations.md): these tests are one
                  "gpuops_approval_policy": {self.kind: {"require_approval": False}}}
        values.update(overrides)
        return values

    def run(self, inputs=None, check=True, timeout=600, background=False, inventory=None, **overrides):
        if inputs is not None:
            overrides["gpuops_change_inputs"] = inputs
        return super().run(check, timeout, background, inventory, **overrides)

    def run_label(self) -> str:
        return "change %s" % self.kind

    def change_record(self, node: dict):
        raw = (node["metadata"].get("annotations") or {}).get(record_annotation(self.kind))
        return json.loads(raw) if raw else None

    def run_record(self, run_id: str) -> dict:
        with open(os.path.join(self.record_dir, "change-%s-%s.json" % (self.kind, run_id))) as stream:
            return json.load(stream)
