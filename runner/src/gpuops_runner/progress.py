"""The progress lines `gpuops` prints while a run goes (hidden with --quiet): one per play and one per task
result on a host that is not skipped, from ansible-runner's events."""

from __future__ import annotations

import datetime

RESULT_WORDS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable"}


def line_for(event):
    """The progress line for one ansible-runner event, or None."""
    data = event.get("event_data") or {}
    kind = event.get("event")
    clock = datetime.datetime.now().strftime("%H:%M:%S")
    if kind == "playbook_on_play_start":
        return "%s play: %s" % (clock, data.get("play") or data.get("name") or "")
    if kind not in RESULT_WORDS:
        return None
    result = data.get("res") if isinstance(data.get("res"), dict) else {}
    word = RESULT_WORDS[kind]
    if word == "ok" and result.get("changed"):
        word = "changed"
    if kind == "runner_on_failed" and data.get("ignore_errors"):
        word = "failed (ignored)"
    return "%s   %-24s %s: %s" % (clock, data.get("host", "?"), data.get("task", "?"), word)
