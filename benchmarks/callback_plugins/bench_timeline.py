# Benchmark-only callback (not part of the collection): one JSON line per task start and per host result, with
# wall-clock timestamps, to BENCH_TIMELINE. benchmarks/driver_upgrade.py reads it to split a run's wall time into
# tasks, batches and Ansible's own overhead.
from __future__ import annotations

DOCUMENTATION = r"""
name: bench_timeline
type: aggregate
short_description: task timeline for benchmarks/driver_upgrade.py
description: One JSON line per play, task start and host result, to the file named by E(BENCH_TIMELINE).
"""

import json
import os
import threading
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        path = os.environ.get("BENCH_TIMELINE")
        self._stream = open(path, "a", encoding="utf-8") if path else None
        self._lock = threading.Lock()

    def _write(self, **record):
        if self._stream is None:
            return
        record["ts"] = time.time()
        with self._lock:
            self._stream.write(json.dumps(record) + "\n")
            self._stream.flush()

    def v2_playbook_on_play_start(self, play):
        self._write(kind="play", name=play.get_name())

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._write(kind="task", name=task.get_name(), action=task.action, uuid=task._uuid)

    def v2_playbook_on_handler_task_start(self, task):
        self._write(kind="task", name=task.get_name(), action=task.action, uuid=task._uuid)

    def v2_runner_on_start(self, host, task):
        self._write(kind="start", host=host.get_name(), uuid=task._uuid)

    def _result(self, status, result):
        self._write(kind="result", status=status, host=result._host.get_name(), uuid=result._task._uuid,
                    name=result._task.get_name(), action=result._task.action)

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        self._write(kind="end")
