# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the roll-out's progress line: batch of a node, ETA arithmetic, one line per step."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.plugin_utils._upgrade_progress import (
    Progress, batch_index, eta_seconds, expected_batch_seconds, format_duration)

BATCHES = [{"index": 1, "kind": "canary", "nodes": ["n1"]},
           {"index": 2, "kind": "batch", "nodes": ["n2", "n3"]},
           {"index": 3, "kind": "batch", "nodes": ["n4", "n5"]},
           {"index": 4, "kind": "batch", "nodes": ["n6"]}]


@pytest.mark.parametrize("seconds,text", [(None, "?"), (0, "0s"), (7.4, "7s"), (59.6, "1m00s"), (245, "4m05s"),
                                          (3723, "1h02m03s"), (-3, "0s")])
def test_durations_read_as_hours_minutes_seconds(seconds, text):
    assert format_duration(seconds) == text


def test_a_node_is_found_in_its_batch():
    assert batch_index(BATCHES, "n1") == 1
    assert batch_index(BATCHES, "n5") == 3
    assert batch_index(BATCHES, "elsewhere") is None


def test_no_eta_until_a_batch_has_finished():
    assert expected_batch_seconds(BATCHES, {1: 100.0}) is None
    assert eta_seconds(BATCHES, {1: 100.0}, 1, 150.0) is None


def test_after_the_canary_its_duration_is_the_estimate_of_every_batch_left():
    starts = {1: 0.0, 2: 120.0}
    assert expected_batch_seconds(BATCHES, starts) == 120.0
    # batch 2 has run 20 s of its expected 120; batches 3 and 4 follow
    assert eta_seconds(BATCHES, starts, 2, 140.0) == 100.0 + 2 * 120.0


def test_once_a_regular_batch_finished_the_canary_no_longer_counts():
    starts = {1: 0.0, 2: 300.0, 3: 360.0}     # a long canary soak, then a 60 s batch
    assert expected_batch_seconds(BATCHES, starts) == 60.0
    assert eta_seconds(BATCHES, starts, 3, 370.0) == 50.0 + 60.0


def test_a_batch_running_longer_than_expected_counts_zero_for_itself():
    starts = {1: 0.0, 2: 100.0, 3: 150.0}
    assert eta_seconds(BATCHES, starts, 3, 400.0) == 50.0      # only batch 4 left


def test_one_line_per_new_step_with_batch_elapsed_and_eta():
    progress = Progress(started=1000.0)
    assert progress.step("n1", "draining", 1001.0) is None          # no plan yet
    progress.set_plan({"batches": BATCHES})
    progress.set_plan({"batches": []})                              # the read-back at the end does not replace it
    first = progress.step("n1", "draining", 1001.0)
    assert first == "[batch 1/4] n1 - draining | nodes done 0/6 | elapsed 1s | ETA known after batch 1"
    assert progress.step("n1", "draining", 1002.0) is None          # the same step again: no second line
    assert progress.step("n1", "done", 1080.0).endswith("nodes done 1/6 | elapsed 1m20s | ETA known after batch 1")
    line = progress.step("n2", "draining", 1121.0)
    # batch 1 took 120 s (1001 -> 1121): batch 2 has it all ahead, then batches 3 and 4
    assert line == "[batch 2/4] n2 - draining | nodes done 1/6 | elapsed 2m01s | ETA 6m00s"
    assert progress.step("unplanned", "draining", 1122.0) is None


def test_the_last_node_done_has_nothing_left():
    progress = Progress(started=0.0)
    progress.set_plan({"batches": [{"index": 1, "kind": "canary", "nodes": ["n1"]}]})
    progress.step("n1", "installing", 10.0)
    assert progress.step("n1", "done", 50.0).endswith("ETA 0s")
