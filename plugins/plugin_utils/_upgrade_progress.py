# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The driver roll-out's progress line, one per node step: batch i/n, the run's elapsed time and an ETA.

Pure (no Ansible): the callback ``gpuops.nvidia.upgrade_progress`` feeds it the plan and each record step the
runbook's modules return. The ETA: a batch lasts from its first node step to the next batch's first step (its soak
included); the batches not finished are expected to take the mean of the finished ones (of the non-canary ones once
one has finished: the canary is one node and soaks longer), the current one less what it has run already.
"""

from __future__ import annotations


def format_duration(seconds) -> str:
    """``1h02m03s``, ``4m05s``, ``7s``; ``?`` for None."""
    if seconds is None:
        return "?"
    seconds = int(round(max(0.0, float(seconds))))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm%02ds" % (hours, minutes, secs)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def batch_index(batches, node):
    """1-based index of the plan batch holding ``node`` (None when it is in none)."""
    for position, batch in enumerate(batches):
        if node in (batch.get("nodes") or []):
            return position + 1
    return None


def expected_batch_seconds(batches, starts):
    """Mean duration of the finished batches (a batch is finished once the next one started); non-canary batches
    only, once one of them finished. None before any batch finished."""
    finished = [(index, starts[index + 1] - starts[index]) for index in sorted(starts) if index + 1 in starts]
    if not finished:
        return None
    later = [seconds for index, seconds in finished if batches[index - 1].get("kind") != "canary"]
    chosen = later or [seconds for _index, seconds in finished]
    return sum(chosen) / len(chosen)


def eta_seconds(batches, starts, current, now):
    """Seconds left: the batches after ``current`` at the expected batch duration, plus what the current batch is
    expected to need still (never below 0). None while no batch has finished."""
    expected = expected_batch_seconds(batches, starts)
    if expected is None or current not in starts:
        return None
    left_in_current = max(0.0, expected - (now - starts[current]))
    return left_in_current + expected * (len(batches) - current)


class Progress:
    """Tracks the batches' starts from the node steps seen and renders one line per step."""

    def __init__(self, started):
        self.started = started
        self.batches = None
        self.starts = {}        # batch index -> time of its first node step
        self.states = {}        # node -> last state shown

    def set_plan(self, plan):
        """The plan of the run (the first one seen: a roll-out's end reads the records back with a second one)."""
        if self.batches is None and isinstance(plan, dict) and plan.get("batches") is not None:
            self.batches = list(plan["batches"])

    def step(self, node, state, now):
        """The line for ``node`` entering ``state`` at ``now``, or None (no plan, not planned, state already shown)."""
        if not self.batches or not state or self.states.get(node) == state:
            return None
        index = batch_index(self.batches, node)
        if index is None:
            return None
        self.states[node] = state
        self.starts.setdefault(index, now)
        done = sum(1 for value in self.states.values() if value in ("done", "rolled-back"))
        planned = sum(len(batch.get("nodes") or []) for batch in self.batches)
        eta = eta_seconds(self.batches, self.starts, index, now)
        if done == planned:
            eta = 0.0
        return "[batch %d/%d] %s - %s | nodes done %d/%d | elapsed %s | ETA %s" % (
            index, len(self.batches), node, state, done, planned, format_duration(now - self.started),
            format_duration(eta) if eta is not None else "known after batch %d" % index)
