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
    major_change,
    mig_layout,
    missing_resources,
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
