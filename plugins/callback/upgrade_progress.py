# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: upgrade_progress
type: aggregate
short_description: One progress line per node step of a driver roll-out, with batch i/n, elapsed time and an ETA
version_added: 0.1.0
description:
  - Prints, beside the normal output, one line each time a node of the C(gpuops.nvidia.driver_upgrade) runbook enters
    a step of its record (draining, installing, rebooting, verifying, done, failed, rolled-back), as the run goes;
    for example C([batch 2/5] gpu-node-07 - rebooting | nodes done 1/16 | elapsed 4m12s | ETA 9m30s).
  - It renders the lines from what the runbook's modules return already (the plan of
    M(gpuops.nvidia.driver_upgrade_plan), the record of M(gpuops.nvidia.node_upgrade_record) and of
    M(gpuops.nvidia.node_drain) with O(gpuops.nvidia.node_drain#module:upgrade_record)), so it adds no task to the
    runbook.
  - The ETA is the mean duration of the finished batches (non-canary ones once one finished) times the batches
    left, plus what the current batch is expected to need still; it is known once the first batch finished.
  - Enable it with C(callbacks_enabled = gpuops.nvidia.upgrade_progress) in C(ansible.cfg) or
    E(ANSIBLE_CALLBACKS_ENABLED=gpuops.nvidia.upgrade_progress).
"""

import time

from ansible.plugins.callback import CallbackBase

from ansible_collections.gpuops.nvidia.plugins.plugin_utils._upgrade_progress import Progress

PLAN_ACTIONS = ("gpuops.nvidia.driver_upgrade_plan", "driver_upgrade_plan")
RECORD_ACTIONS = ("gpuops.nvidia.node_upgrade_record", "node_upgrade_record", "gpuops.nvidia.node_drain",
                  "node_drain")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops.nvidia.upgrade_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self.progress = Progress(time.time())

    def v2_playbook_on_start(self, playbook):
        self.progress = Progress(time.time())

    def v2_runner_on_ok(self, result):
        self._record_step(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record_step(result)

    def _record_step(self, result):
        action = result._task.action
        answer = result._result
        if action in PLAN_ACTIONS:
            self.progress.set_plan(answer.get("plan"))
            return
        if action not in RECORD_ACTIONS:
            return
        if isinstance(answer.get("nodes"), dict):    # a batch step: each node's record moved in one task
            for node, outcome in answer["nodes"].items():
                if isinstance(outcome, dict):
                    self._show(node, outcome.get("record") or outcome.get("upgrade_record"))
            return
        node = answer.get("node") or ((answer.get("invocation") or {}).get("module_args") or {}).get("name")
        self._show(node, answer.get("record") or answer.get("upgrade_record"))

    def _show(self, node, record):
        if not isinstance(record, dict):
            return
        line = self.progress.step(node, record.get("state"), time.time())
        if line:
            self._display.display(line)
