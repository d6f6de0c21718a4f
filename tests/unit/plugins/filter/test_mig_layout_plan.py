# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A MIG layout applied with nvidia-smi (module_utils/nvidia/mig_layout_change.py and the mig_layout_plan filter):
the commands, the resources the device plugin advertises then, the layout a rollback applies. The GPU in MIG mode is
a real H100's (tests/unit/fixtures/nvidia_smi/PROVENANCE.md), as nvidia_driver_facts merges `-L` into it."""

from __future__ import annotations

import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.filter.mig_layout_plan import mig_layout_plan
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mig_layout_change import (
    layout_resources,
    plan_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.smi import merge_mig_listing, parse_list

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")


def h100_in_mig_mode():
    with open(os.path.join(FIXTURES, "utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt"), encoding="utf-8") as f:
        listing = parse_list(f.read())
    gpus = [dict(gpu, mig_mode_current=True, mig_mode_pending=True,
                 mig_devices=[{"index": mig["device_id"]} for mig in gpu["mig_devices"]]) for gpu in listing]
    return merge_mig_listing(gpus, listing)


def node_gpus():
    """GPU 0 the real H100 in MIG mode (3g.40gb, 2g.20gb, 2 x 1g.10gb), GPU 1 a whole H100, GPU 2 an L40S (no MIG)."""
    (mig_gpu,) = h100_in_mig_mode()
    whole = {"index": 1, "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "mig_mode_current": False,
             "mig_mode_pending": False, "mig_devices": []}
    l40s = {"index": 2, "uuid": "GPU-2", "name": "NVIDIA L40S", "mig_mode_current": None, "mig_mode_pending": None,
            "mig_devices": []}
    return [dict(mig_gpu, index=0), whole, l40s]


def argvs(plan):
    return [" ".join(step["argv"]) for step in plan["steps"]]


def test_the_captured_layout_is_read_as_profiles_in_nvml_order():
    plan = plan_layout(node_gpus(), [], "mixed")
    assert plan["previous"] == [
        {"devices": [0], "mig_enabled": True, "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
        {"devices": [1], "mig_enabled": False, "profiles": []}]
    assert plan["steps"] == [] and plan["at_target"]


def test_a_gpu_out_of_mig_mode_is_switched_reset_and_partitioned_one_already_there_is_left_alone():
    layout = [{"devices": [0, 1], "profiles": ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]}]
    plan = plan_layout(node_gpus(), layout, "mixed")
    assert argvs(plan) == ["nvidia-smi -i 1 -mig 1", "nvidia-smi -i 1 -r",
                           "nvidia-smi mig -i 1 -cgi 1g.10gb,1g.10gb,2g.20gb,3g.40gb -C"]
    assert plan["mismatches"] == ["GPU 1: MIG off, wanted 1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb"]
    assert plan["resources"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2,
                                 "nvidia.com/mig-3g.40gb": 2}
    assert not plan["at_target"] and plan["errors"] == []


def test_a_new_layout_destroys_the_instances_first_and_mig_off_resets_the_gpu():
    layout = [{"devices": [0], "profiles": ["7g.80gb"]}, {"devices": [1], "mig_enabled": False}]
    assert argvs(plan_layout(node_gpus(), layout, "mixed")) == [
        "nvidia-smi mig -i 0 -dci", "nvidia-smi mig -i 0 -dgi", "nvidia-smi mig -i 0 -cgi 7g.80gb -C"]
    assert argvs(plan_layout(node_gpus(), [{"devices": [0], "mig_enabled": False}], "mixed")) == [
        "nvidia-smi -i 0 -mig 0", "nvidia-smi -i 0 -r"]


def test_a_later_entry_naming_a_gpu_wins_and_the_rollback_layout_restores_the_first():
    gpus = node_gpus()[:2]
    plan = plan_layout(gpus, [{"devices": "all", "profiles": ["3g.40gb"]}, {"devices": [0], "profiles": []}], "mixed")
    assert argvs(plan) == ["nvidia-smi mig -i 0 -dci", "nvidia-smi mig -i 0 -dgi", "nvidia-smi -i 1 -mig 1",
                           "nvidia-smi -i 1 -r", "nvidia-smi mig -i 1 -cgi 3g.40gb -C"]
    # every GPU in MIG mode: no whole GPU to expect (the plugin's nvidia.com/gpu of 0 is not waited for)
    assert plan["resources"] == {"nvidia.com/mig-3g.40gb": 1}
    rollback = plan_layout(gpus, plan_layout(gpus, [], "")["previous"], "mixed")
    assert rollback["steps"] == [] and rollback["at_target"]
    l40s = plan_layout(node_gpus(), [{"devices": "all", "profiles": ["3g.40gb"]}], "mixed")
    assert l40s["errors"] == ["GPU 2 (NVIDIA L40S): not MIG-capable"] and l40s["steps"] == []


def test_the_single_strategy_refuses_mixed_profiles_and_a_node_half_in_mig_mode():
    after = [{"index": 0, "mig_enabled": True, "profiles": ["1g.10gb", "3g.40gb"]},
             {"index": 1, "mig_enabled": True, "profiles": ["1g.10gb"]}]
    assert layout_resources(after, "single")[1] == "the single MIG strategy takes one profile on the node, the " \
                                                   "layout has 1g.10gb, 3g.40gb"
    half = [dict(after[0], profiles=["1g.10gb"]), {"index": 1, "mig_enabled": False, "profiles": []}]
    assert "1 of 2" in layout_resources(half, "single")[1]
    same = [dict(gpu, profiles=["1g.10gb"] * 7) for gpu in after]
    assert layout_resources(same, "single") == ({"nvidia.com/gpu": 14}, None)
    assert layout_resources([dict(gpu, mig_enabled=False, profiles=[]) for gpu in after], "single") == (
        {"nvidia.com/gpu": 2}, None)
    assert layout_resources(same, "") == ({}, None)


def test_malformed_entries_and_missing_gpus_are_errors_and_run_nothing():
    plan = plan_layout(node_gpus(), [{"devices": "two"}, {"devices": [5], "profiles": ["1g.10gb"]},
                                     {"mig_enabled": False, "profiles": ["1g.10gb"]}, "x"], "mixed")
    assert plan["errors"] == ["layout[0].devices is neither 'all' nor a list of GPU indexes",
                              "layout[2] has profiles but mig_enabled false", "layout[3] is not a mapping",
                              "GPU 5: not on the node (it has 3)"]
    assert plan["steps"] == []


def test_the_filter_takes_lists_only():
    assert mig_layout_plan(node_gpus(), [], "mixed")["at_target"]
    with pytest.raises(AnsibleFilterError):
        mig_layout_plan(node_gpus(), {"devices": "all"})
