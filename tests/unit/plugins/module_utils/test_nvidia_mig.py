# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's MIG layout across a driver upgrade (module_utils/nvidia/mig.py and the mig_layout filter), read from
real nvidia-smi captures (tests/unit/fixtures/nvidia_smi/PROVENANCE.md)."""

from __future__ import annotations

import os

from ansible_collections.gpuops.nvidia.plugins.filter.mig_layout import mig_layout as mig_layout_filter
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mig import (
    create_instances_argv,
    expected_resources,
    layout_to_recreate,
    major_change,
    mig_layout,
    missing_resources,
    recorded_layout,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.smi import merge_mig_listing, parse_list, parse_query_xml

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def h100_gpus():
    """The H100 capture's GPU in MIG mode with its four MIG devices (3g.40gb, 2g.20gb, 2 x 1g.10gb), as
    nvidia_driver_facts merges `-L` into the XML's devices."""
    listing = parse_list(read_fixture("utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt"))
    gpus = [dict(gpu, mig_mode_current=True,
                 mig_devices=[{"index": mig["device_id"]} for mig in gpu["mig_devices"]]) for gpu in listing]
    return merge_mig_listing(gpus, listing)


def test_layout_of_a_captured_h100_lists_its_profiles_in_nvml_order():
    assert mig_layout(h100_gpus()) == [{"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                                        "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]


def test_gpus_without_mig_mode_have_no_layout():
    gpus = parse_query_xml(read_fixture("telegraf_tesla-t4.xml"))["gpus"]
    assert mig_layout(gpus) == []
    assert mig_layout_filter(gpus, "mixed")["resources"] == {}


def test_mixed_strategy_expects_one_resource_per_profile_and_the_whole_gpus_left():
    layout = mig_layout(h100_gpus()) * 2
    assert expected_resources(layout, "mixed", 2) == {
        "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-1g.10gb": 4}
    assert expected_resources(layout[:1], "mixed", 8)["nvidia.com/gpu"] == 7


def test_single_strategy_counts_mig_devices_as_gpus():
    assert expected_resources(mig_layout(h100_gpus()), "single", 1) == {"nvidia.com/gpu": 4}


def test_an_unknown_strategy_or_an_empty_layout_expects_nothing():
    assert expected_resources(mig_layout(h100_gpus()), "none", 1) == {}
    assert expected_resources([{"index": 0, "uuid": "GPU-0", "profiles": []}], "mixed", 1) == {}


def test_a_branch_change_is_major_a_patch_is_not():
    assert major_change("550.127.08", "570.86.15")
    assert not major_change("570.86.10", "570.86.15")
    assert major_change(None, "570.86.15")


def test_instances_are_recreated_with_one_cgi_per_gpu_and_compute_instances():
    assert create_instances_argv(mig_layout(h100_gpus())[0]) == [
        "nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C"]
    assert create_instances_argv({"index": 1, "profiles": []}) is None


def test_missing_resources_name_what_the_node_lacks():
    expected = {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2}
    assert missing_resources(expected, {"nvidia.com/mig-1g.10gb": "2"}) == ["nvidia.com/mig-3g.40gb: 0 of 1"]
    assert missing_resources(expected, {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "2"}) == []


def test_filter_gives_layout_resources_commands_and_the_major_decision():
    result = mig_layout_filter(h100_gpus(), "mixed", "550.127.08", "570.86.15")
    assert result["instances"] == 4 and result["major_change"] is True
    assert result["create_argv"] == [["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C"]]
    assert mig_layout_filter(h100_gpus(), "mixed")["major_change"] is None


def rebooted(gpus):
    """The same GPUs after a reboot: MIG mode kept, the MIG devices gone (as a GPU does)."""
    return [dict(gpu, mig_devices=[]) for gpu in gpus]


def test_the_record_keeps_only_the_gpus_with_mig_devices():
    layout = mig_layout(h100_gpus()) + [{"index": 1, "uuid": "GPU-1", "profiles": []}]
    assert recorded_layout(layout) == [{"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                                        "profiles": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]
    assert recorded_layout([]) == []


def test_a_run_resumed_after_the_reboot_recreates_the_recorded_layout():
    recorded = recorded_layout(mig_layout(h100_gpus()))
    layout, from_record = layout_to_recreate(mig_layout(rebooted(h100_gpus())), recorded)
    assert from_record is True
    assert layout == recorded
    result = mig_layout_filter(rebooted(h100_gpus()), "mixed", "595.91.07", "615.71.09", recorded=recorded)
    assert result["from_record"] is True and result["instances"] == 4 and result["major_change"] is True
    assert result["create_argv"] == [["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C"]]
    assert result["resources"] == {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1,
                                   "nvidia.com/mig-1g.10gb": 2}


def test_the_layout_on_the_node_wins_over_the_record():
    # killed after the re-create: the node has its instances, nothing is created twice
    recorded = [{"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "profiles": ["7g.80gb"]}]
    layout, from_record = layout_to_recreate(mig_layout(h100_gpus()), recorded)
    assert from_record is False and layout[0]["profiles"] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def test_a_record_without_a_layout_behaves_as_before():
    now = mig_layout(rebooted(h100_gpus()))
    assert layout_to_recreate(now, None) == (now, False)
    assert layout_to_recreate(now, []) == (now, False)
    result = mig_layout_filter(rebooted(h100_gpus()), "mixed", "595.91.07", "615.71.09")
    assert result["from_record"] is False and result["instances"] == 0 and result["create_argv"] == []
    assert result["resources"] == {}


def test_the_record_applies_only_to_the_gpus_still_in_mig_mode_matched_by_uuid():
    gpus = rebooted(h100_gpus())
    # a GPU swapped since the record (another UUID) gets nothing from it
    swapped = [{"index": 0, "uuid": "GPU-ffffffff-0000-0000-0000-000000000000", "profiles": ["3g.40gb"]}]
    assert layout_to_recreate(mig_layout(gpus), swapped)[1] is False
    # MIG mode off now: nothing to re-create on that GPU
    off = [dict(gpu, mig_mode_current=False) for gpu in gpus]
    assert layout_to_recreate(mig_layout(off), recorded_layout(mig_layout(h100_gpus()))) == ([], False)
    # the GPU's index now is the one nvidia-smi -i gets; a record without UUIDs matches by index
    moved = [dict(gpu, index=3) for gpu in gpus]
    layout, from_record = layout_to_recreate(mig_layout(moved), recorded_layout(mig_layout(h100_gpus())))
    assert from_record and layout[0]["index"] == 3
    by_index = [{"index": 0, "profiles": ["1g.10gb"]}, "not a GPU", {"index": 5, "profiles": ["1g.10gb"]}]
    layout, from_record = layout_to_recreate(mig_layout(gpus), by_index)
    assert from_record and [gpu["profiles"] for gpu in layout] == [["1g.10gb"]]
