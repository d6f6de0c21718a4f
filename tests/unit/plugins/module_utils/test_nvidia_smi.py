# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the nvidia-smi parsers, on real captures (tests/unit/fixtures/nvidia_smi, see PROVENANCE.md)."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.smi import (
    classify_error,
    merge_mig_listing,
    parse_list,
    parse_query_gpu_csv,
    parse_query_xml,
    sysfs_pci_address,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")

XML_FILES = (
    "netdata_a100-sxm4-mig.xml",
    "telegraf_a100-sxm4-v12.xml",
    "telegraf_a10g.xml",
    "telegraf_dual_a5000-v13.xml",
    "telegraf_gt-1030_470.74.xml",
    "telegraf_rtx-3080-v13.xml",
    "telegraf_tesla-t4.xml",
)
LIST_FILES = (
    "utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt",
    "utkuozdemir_h200-mig_590.48.01_nvidia-smi-L.txt",
    "h100-nvl_550.127.06_mig-lgip_and_L.txt",
)
CSV_FILES = (
    "netdata_tesla-p100.csv",
    "utkuozdemir_h100-80gb-mig_590.48.01_query-gpu-all-fields.csv",
    "utkuozdemir_l40s_595.80_query-gpu-all-fields.csv",
)

# The facts contract's keys of one `gpus` entry, plus minor_number (kept by parse_query_xml).
GPU_KEYS = {
    "index", "minor_number", "uuid", "name", "pci_bus_id", "memory_total_mib", "memory_used_mib",
    "persistence_mode", "compute_mode", "mig_mode_current", "mig_mode_pending", "mig_devices",
    "ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable", "retired_pages_pending",
    "remapped_rows_pending", "remapped_rows_failure", "temperature_c", "power_draw_w", "power_limit_w",
}
MIG_KEYS = {"index", "gpu_instance_id", "compute_instance_id", "memory_total_mib", "profile", "uuid"}


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def cut_points(text, count=60):
    """Lengths at which to truncate ``text``: evenly spread, plus the very start and end."""
    step = max(1, len(text) // count)
    return sorted(set(list(range(0, len(text), step)) + [1, len(text) - 1]))


# --------------------------------------------------------------------------- nvidia-smi -q -x

# file -> (driver_version, cuda_version, attached_gpus, [expected subset of each gpu dict])
XML_EXPECTED = {
    "netdata_a100-sxm4-mig.xml": ("510.47.03", "11.6", 1, [{
        "index": 0, "minor_number": 0, "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a", "pci_bus_id": "00000000:00:04.0",
        "memory_total_mib": 40960, "memory_used_mib": 38, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": True, "mig_mode_pending": True,
        "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": 0,
        "retired_pages_pending": None, "remapped_rows_pending": None, "remapped_rows_failure": None,
        "temperature_c": 36, "power_draw_w": 66.92, "power_limit_w": 400.0,
    }]),
    "telegraf_a100-sxm4-v12.xml": ("535.54.03", "12.2", 4, [{
        "index": 0, "minor_number": 1, "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "pci_bus_id": "00000000:01:00.0",
        "memory_total_mib": 81920, "memory_used_mib": 50, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": True, "mig_mode_pending": True,
        "ecc_volatile_uncorrectable": 0, "ecc_aggregate_uncorrectable": 0,
        "retired_pages_pending": None, "remapped_rows_pending": None, "remapped_rows_failure": None,
        "temperature_c": 27, "power_draw_w": 67.03, "power_limit_w": 500.0,
    }]),
    "telegraf_a10g.xml": ("515.105.01", "11.7", 1, [{
        "index": 0, "minor_number": 0, "name": "NVIDIA A10G",
        "uuid": "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "pci_bus_id": "00000000:00:1E.0",
        "memory_total_mib": 23028, "memory_used_mib": 22, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": 0, "ecc_aggregate_uncorrectable": 0,
        "retired_pages_pending": None, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "temperature_c": 17, "power_draw_w": 25.58, "power_limit_w": 300.0,
    }]),
    "telegraf_dual_a5000-v13.xml": ("590.44.01", "13.1", 2, [{
        "index": 0, "minor_number": 1, "name": "NVIDIA RTX A5000",
        "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "pci_bus_id": "00000000:81:00.0",
        "memory_total_mib": 24564, "memory_used_mib": 22437, "persistence_mode": True, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": None,
        "retired_pages_pending": None, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "temperature_c": 13, "power_draw_w": 6.41, "power_limit_w": 230.0,
    }, {
        "index": 1, "minor_number": 0, "name": "NVIDIA RTX A5000",
        "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789cd", "pci_bus_id": "00000000:C1:00.0",
        "memory_total_mib": 24564, "memory_used_mib": 17253, "persistence_mode": True, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": None,
        "retired_pages_pending": None, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "temperature_c": 15, "power_draw_w": 13.6, "power_limit_w": 230.0,
    }]),
    "telegraf_gt-1030_470.74.xml": ("470.74", "11.4", 1, [{
        "index": 0, "minor_number": 0, "name": "NVIDIA GeForce GT 1030",
        "uuid": "GPU-857c6374-f681-cf3a-f99f-9063a87b8ac0", "pci_bus_id": "00000000:2D:00.0",
        "memory_total_mib": 1998, "memory_used_mib": 875, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": None,
        "retired_pages_pending": None, "remapped_rows_pending": None, "remapped_rows_failure": None,
        "temperature_c": 36, "power_draw_w": None, "power_limit_w": 30.0,
    }]),
    "telegraf_rtx-3080-v13.xml": ("595.58.03", "13.2", 1, [{
        "index": 0, "minor_number": 0, "name": "NVIDIA GeForce RTX 3080",
        "uuid": "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4", "pci_bus_id": "00000000:0C:00.0",
        "memory_total_mib": 10240, "memory_used_mib": 9184, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": None, "ecc_aggregate_uncorrectable": None,
        "retired_pages_pending": None, "remapped_rows_pending": None, "remapped_rows_failure": None,
        "temperature_c": 27, "power_draw_w": 139.62, "power_limit_w": 320.0,
    }]),
    "telegraf_tesla-t4.xml": ("515.105.01", "11.7", 1, [{
        "index": 0, "minor_number": 0, "name": "Tesla T4",
        "uuid": "GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "pci_bus_id": "00000000:00:1E.0",
        "memory_total_mib": 15360, "memory_used_mib": 1032, "persistence_mode": False, "compute_mode": "Default",
        "mig_mode_current": None, "mig_mode_pending": None, "mig_devices": [],
        "ecc_volatile_uncorrectable": 0, "ecc_aggregate_uncorrectable": 0,
        "retired_pages_pending": False, "remapped_rows_pending": None, "remapped_rows_failure": None,
        "temperature_c": 40, "power_draw_w": 26.78, "power_limit_w": 70.0,
    }]),
}


@pytest.mark.parametrize("name", XML_FILES)
def test_query_xml_reports_versions_and_every_gpu_field_of_the_capture(name):
    driver_version, cuda_version, attached_gpus, expected_gpus = XML_EXPECTED[name]
    parsed = parse_query_xml(read_fixture(name))
    assert parsed["driver_version"] == driver_version
    assert parsed["cuda_version"] == cuda_version
    assert parsed["attached_gpus"] == attached_gpus
    assert len(parsed["gpus"]) == len(expected_gpus)
    for gpu, expected in zip(parsed["gpus"], expected_gpus):
        assert set(gpu) == GPU_KEYS
        assert dict((key, gpu[key]) for key in expected) == expected


@pytest.mark.parametrize("name", XML_FILES)
def test_query_xml_has_only_the_top_level_keys_of_the_contract(name):
    assert set(parse_query_xml(read_fixture(name))) == {"driver_version", "cuda_version", "attached_gpus", "gpus"}


def test_attached_gpus_claim_is_kept_but_only_gpus_present_in_the_document_are_reported():
    parsed = parse_query_xml(read_fixture("telegraf_a100-sxm4-v12.xml"))
    assert parsed["attached_gpus"] == 4
    assert [gpu["uuid"] for gpu in parsed["gpus"]] == ["GPU-513536b6-7d19-9063-b049-1e69664bb298"]


def test_mig_devices_of_a100_80gb_v12_carry_instance_ids_and_memory():
    gpu = parse_query_xml(read_fixture("telegraf_a100-sxm4-v12.xml"))["gpus"][0]
    assert gpu["mig_devices"] == [
        {"index": index, "gpu_instance_id": gi, "compute_instance_id": 0, "memory_total_mib": 19968,
         "profile": None, "uuid": None}
        for index, gi in ((0, 3), (1, 4), (2, 5), (3, 6))
    ]


def test_mig_devices_of_a100_40gb_v11_carry_instance_ids_and_memory():
    gpu = parse_query_xml(read_fixture("netdata_a100-sxm4-mig.xml"))["gpus"][0]
    assert [(mig["index"], mig["gpu_instance_id"], mig["compute_instance_id"], mig["memory_total_mib"])
            for mig in gpu["mig_devices"]] == [(0, 1, 0, 19968), (1, 2, 0, 19968)]
    assert all(set(mig) == MIG_KEYS for mig in gpu["mig_devices"])


def test_gpu_index_follows_document_order_while_minor_number_keeps_the_device_node():
    gpus = parse_query_xml(read_fixture("telegraf_dual_a5000-v13.xml"))["gpus"]
    assert [(gpu["index"], gpu["minor_number"], gpu["pci_bus_id"]) for gpu in gpus] == [
        (0, 1, "00000000:81:00.0"), (1, 0, "00000000:C1:00.0")]


def test_v13_power_draw_is_the_average_not_the_instant_reading():
    gpu = parse_query_xml(read_fixture("telegraf_rtx-3080-v13.xml"))["gpus"][0]
    assert gpu["power_draw_w"] == 139.62  # instant_power_draw is 142.33 W in the same capture


def _replace_once(text, old, new):
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def test_v12_uncorrectable_ecc_sums_sram_and_dram_counts():
    text = read_fixture("telegraf_a100-sxm4-v12.xml")
    volatile_block = text[text.index("<ecc_errors>"):text.index("<aggregate>")]
    changed_block = volatile_block.replace("<sram_uncorrectable>0<", "<sram_uncorrectable>1<").replace(
        "<dram_uncorrectable>0<", "<dram_uncorrectable>2<")
    gpu = parse_query_xml(text.replace(volatile_block, changed_block))["gpus"][0]
    assert gpu["ecc_volatile_uncorrectable"] == 3
    assert gpu["ecc_aggregate_uncorrectable"] == 0


def test_v13_uncorrectable_ecc_sums_parity_secded_and_dram_counts():
    text = read_fixture("telegraf_rtx-3080-v13.xml")
    aggregate_start = text.index("<aggregate>")
    aggregate = text[aggregate_start:text.index("</aggregate>")]
    changed = aggregate.replace("<sram_uncorrectable_parity>N/A<", "<sram_uncorrectable_parity>1<").replace(
        "<sram_uncorrectable_secded>N/A<", "<sram_uncorrectable_secded>2<").replace(
        "<dram_uncorrectable>N/A<", "<dram_uncorrectable>4<")
    gpu = parse_query_xml(text.replace(aggregate, changed))["gpus"][0]
    assert gpu["ecc_aggregate_uncorrectable"] == 7
    assert gpu["ecc_volatile_uncorrectable"] is None


def test_pre_ampere_uncorrectable_ecc_is_the_double_bit_total():
    text = read_fixture("telegraf_gt-1030_470.74.xml")
    double_bit = text.index("<double_bit>")
    total_at = text.index("<total>N/A</total>", double_bit)
    text = text[:total_at] + "<total>5</total>" + text[total_at + len("<total>N/A</total>"):]
    gpu = parse_query_xml(text)["gpus"][0]
    assert gpu["ecc_volatile_uncorrectable"] == 5


def test_row_remap_pending_and_failure_are_reported_from_the_remapper_block():
    text = read_fixture("telegraf_a10g.xml")
    text = _replace_once(text, "<remapped_row_pending>No<", "<remapped_row_pending>Yes<")
    text = _replace_once(text, "<remapped_row_failure>No<", "<remapped_row_failure>Yes<")
    gpu = parse_query_xml(text)["gpus"][0]
    assert gpu["remapped_rows_pending"] is True
    assert gpu["remapped_rows_failure"] is True


def test_pending_page_retirement_is_reported_from_either_field_name():
    text = read_fixture("telegraf_tesla-t4.xml")
    assert parse_query_xml(text)["gpus"][0]["retired_pages_pending"] is False
    retirement = _replace_once(text, "<pending_retirement>No<", "<pending_retirement>Yes<")
    assert parse_query_xml(retirement)["gpus"][0]["retired_pages_pending"] is True
    blacklist = _replace_once(text, "<pending_blacklist>No<", "<pending_blacklist>Yes<")
    assert parse_query_xml(blacklist)["gpus"][0]["retired_pages_pending"] is True


def test_warning_lines_printed_before_the_xml_document_are_skipped():
    text = "WARNING: infoROM is corrupted at gpu 0000:00:1E.0\n" + read_fixture("telegraf_tesla-t4.xml")
    assert parse_query_xml(text)["gpus"][0]["name"] == "Tesla T4"


def test_bytes_input_is_accepted():
    assert parse_query_xml(read_fixture("telegraf_tesla-t4.xml").encode("utf-8"))["driver_version"] == "515.105.01"


@pytest.mark.parametrize("text", [
    "",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "<nvidia_smi_log><gpu>",
])
def test_unparsable_output_raises_value_error_naming_the_xml_problem(text):
    with pytest.raises(ValueError, match=r"^nvidia-smi -q -x output is not valid XML: "):
        parse_query_xml(text)


def test_xml_with_another_root_element_is_rejected():
    with pytest.raises(ValueError, match="root element is <html>"):
        parse_query_xml("<html><body/></html>")


def test_xml_declaring_entities_is_rejected_before_expansion():
    text = ('<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa">]>'
            "<nvidia_smi_log><driver_version>&a;</driver_version></nvidia_smi_log>")
    with pytest.raises(ValueError, match="entity declarations are not accepted"):
        parse_query_xml(text)


@pytest.mark.parametrize("name", XML_FILES)
def test_truncated_xml_yields_a_result_or_value_error_never_a_crash(name):
    text = read_fixture(name)
    for length in cut_points(text):
        try:
            parsed = parse_query_xml(text[:length])
        except ValueError as exc:
            assert str(exc).startswith("nvidia-smi -q -x output is not valid XML: ")
        else:
            assert isinstance(parsed["gpus"], list)


def test_xml_cut_after_the_closing_root_tag_still_parses():
    text = read_fixture("telegraf_tesla-t4.xml").rstrip()
    assert parse_query_xml(text)["gpus"][0]["uuid"] == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"


@pytest.mark.parametrize("bus_id, sysfs_name", [
    ("00000000:00:1E.0", "0000:00:1e.0"),
    ("00000000:C1:00.0", "0000:c1:00.0"),
    ("0000:18:00.0", "0000:18:00.0"),
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00000019:01:00.0", "0019:01:00.0"),
    # Intel VMD domains start at 0x10000; the kernel names them with all their digits.
    ("00010000:01:00.0", "10000:01:00.0"),
    ("not-a-bus-id", None),
    ("zzzz0000:18:00.0", None),
    (None, None),
])
def test_nvml_bus_id_maps_to_the_sysfs_device_name(bus_id, sysfs_name):
    assert sysfs_pci_address(bus_id) == sysfs_name


# --------------------------------------------------------------------------- nvidia-smi -L

def _migs(listed_gpu):
    return [(mig["index"], mig["device_id"], mig["profile"], mig["uuid"]) for mig in listed_gpu["mig_devices"]]


def test_list_of_h100_mig_capture_has_the_gpu_and_its_four_mig_devices():
    listing = parse_list(read_fixture("utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt"))
    assert [(gpu["index"], gpu["name"], gpu["uuid"]) for gpu in listing] == [
        (0, "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-000000000000")]
    assert _migs(listing[0]) == [
        (0, 0, "3g.40gb", "MIG-00000000-0000-0000-0000-000000000000"),
        (1, 1, "2g.20gb", "MIG-00000001-0000-0000-0000-000000000001"),
        (2, 2, "1g.10gb", "MIG-00000002-0000-0000-0000-000000000002"),
        (3, 3, "1g.10gb", "MIG-00000003-0000-0000-0000-000000000003"),
    ]


def test_list_keeps_compute_instance_profiles_of_h200():
    listing = parse_list(read_fixture("utkuozdemir_h200-mig_590.48.01_nvidia-smi-L.txt"))
    assert listing[0]["name"] == "NVIDIA H200"
    assert [mig["profile"] for mig in listing[0]["mig_devices"]] == [
        "1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    assert [mig["device_id"] for mig in listing[0]["mig_devices"]] == [0, 1, 2, 3, 4]


def test_list_inside_a_shell_session_ignores_the_mig_tables_and_prompts_around_it():
    listing = parse_list(read_fixture("h100-nvl_550.127.06_mig-lgip_and_L.txt"))
    assert [(gpu["index"], gpu["name"], gpu["uuid"]) for gpu in listing] == [
        (0, "NVIDIA H100 NVL", "GPU-f4548330-27be-041a-ad8e-95b3005644b8")]
    migs = listing[0]["mig_devices"]
    assert len(migs) == 7
    assert set(mig["profile"] for mig in migs) == {"1g.12gb"}
    assert migs[0]["uuid"] == "MIG-1baf66e9-58ab-5d66-9f62-1adbdbe5c7c3"
    assert migs[6]["uuid"] == "MIG-7a52b067-66ca-54eb-b2da-4bf4d9673bb7"


def test_list_reads_several_gpus_without_mig_and_the_r450_mig_uuid_form():
    # R450/R460 printed MIG UUIDs as MIG-GPU-<gpu uuid>/<gi>/<ci>; plain GPUs have no MIG lines.
    text = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n"
        "\n"
        "GPU 1: Tesla T4 (UUID: GPU-d37e67a5-91dd-3774-a5cb-99096249601a)\n"
    )
    listing = parse_list(text)
    assert [(gpu["index"], gpu["name"]) for gpu in listing] == [(0, "A100-SXM4-40GB"), (1, "Tesla T4")]
    assert _migs(listing[0]) == [(0, 0, "1g.5gb", "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0")]
    assert listing[1]["mig_devices"] == []


def test_list_ignores_error_text_and_unknown_lines():
    assert parse_list("No devices were found\n") == []
    assert parse_list(read_fixture("nvidia-smi_error_texts.txt")) == []


@pytest.mark.parametrize("name", LIST_FILES)
def test_truncated_list_returns_what_it_got(name):
    text = read_fixture(name)
    full = parse_list(text)
    for length in cut_points(text):
        partial = parse_list(text[:length])
        assert len(partial) <= len(full)
        for partial_gpu, full_gpu in zip(partial, full):
            assert partial_gpu["index"] == full_gpu["index"]
            assert len(partial_gpu["mig_devices"]) <= len(full_gpu["mig_devices"])


# --------------------------------------------------------------------------- merge_mig_listing

# `nvidia-smi -L` as that A100-SXM4-80GB would print it: four 1g.20gb devices (14 SMs, 19968 MiB each).
A100_80GB_LISTING = (
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)\n"
    "  MIG 1g.20gb     Device  0: (UUID: MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c01)\n"
    "  MIG 1g.20gb     Device  1: (UUID: MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c02)\n"
    "  MIG 1g.20gb     Device  2: (UUID: MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c03)\n"
    "  MIG 1g.20gb     Device  3: (UUID: MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c04)\n"
)


def test_merge_fills_profile_and_uuid_of_each_mig_device():
    gpus = parse_query_xml(read_fixture("telegraf_a100-sxm4-v12.xml"))["gpus"]
    merged = merge_mig_listing(gpus, parse_list(A100_80GB_LISTING))
    assert [(mig["index"], mig["gpu_instance_id"], mig["profile"], mig["uuid"]) for mig in merged[0]["mig_devices"]] == [
        (0, 3, "1g.20gb", "MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c01"),
        (1, 4, "1g.20gb", "MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c02"),
        (2, 5, "1g.20gb", "MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c03"),
        (3, 6, "1g.20gb", "MIG-0b6ef4a6-0e1c-5bd4-a3e5-9f0b6a1d2c04"),
    ]


def test_merge_does_not_mutate_its_inputs():
    gpus = parse_query_xml(read_fixture("telegraf_a100-sxm4-v12.xml"))["gpus"]
    listing = parse_list(A100_80GB_LISTING)
    gpus_before, listing_before = copy.deepcopy(gpus), copy.deepcopy(listing)
    merged = merge_mig_listing(gpus, listing)
    assert gpus == gpus_before
    assert listing == listing_before
    assert merged is not gpus and merged[0]["mig_devices"] is not gpus[0]["mig_devices"]


def test_merge_matches_gpus_by_uuid_before_index():
    gpus = parse_query_xml(read_fixture("telegraf_dual_a5000-v13.xml"))["gpus"]
    gpus[0]["mig_devices"] = [{"index": 0, "gpu_instance_id": 1, "compute_instance_id": 0,
                               "memory_total_mib": 11968, "profile": None, "uuid": None}]
    listing = parse_list(
        "GPU 0: NVIDIA RTX A5000 (UUID: GPU-12345678-aaaa-bbbb-cccc-0123456789cd)\n"
        "  MIG 1g.12gb Device 0: (UUID: MIG-wrong-gpu)\n"
        "GPU 1: NVIDIA RTX A5000 (UUID: GPU-12345678-aaaa-bbbb-cccc-0123456789ab)\n"
        "  MIG 2g.24gb Device 0: (UUID: MIG-right-gpu)\n"
    )
    merged = merge_mig_listing(gpus, listing)
    assert (merged[0]["mig_devices"][0]["profile"], merged[0]["mig_devices"][0]["uuid"]) == ("2g.24gb", "MIG-right-gpu")


def test_merge_falls_back_to_index_when_the_listing_uuids_are_masked():
    gpus = parse_query_xml(read_fixture("telegraf_a100-sxm4-v12.xml"))["gpus"]
    masked = parse_list(read_fixture("utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt"))
    merged = merge_mig_listing(gpus, masked)
    assert merged[0]["mig_devices"][0]["profile"] == "3g.40gb"


def test_merge_leaves_devices_missing_from_the_listing_unnamed_and_invents_none():
    gpus = parse_query_xml(read_fixture("netdata_a100-sxm4-mig.xml"))["gpus"]
    listing = parse_list(
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-27b94a00-ed54-5c24-b1fd-1054085de32a)\n"
        "  MIG 3g.20gb     Device  1: (UUID: MIG-c6a9e5e2-2f62-5ab8-a10e-7d5a4c3e2b11)\n"
        "  MIG 1g.5gb      Device  5: (UUID: MIG-c6a9e5e2-2f62-5ab8-a10e-7d5a4c3e2b15)\n"
    )
    merged = merge_mig_listing(gpus, listing)
    assert [(mig["index"], mig["profile"], mig["uuid"]) for mig in merged[0]["mig_devices"]] == [
        (0, None, None), (1, "3g.20gb", "MIG-c6a9e5e2-2f62-5ab8-a10e-7d5a4c3e2b11")]


def test_merge_with_an_empty_listing_returns_an_equal_copy():
    gpus = parse_query_xml(read_fixture("netdata_a100-sxm4-mig.xml"))["gpus"]
    assert merge_mig_listing(gpus, []) == gpus


# --------------------------------------------------------------------------- --query-gpu CSV

def test_small_csv_of_tesla_p100_maps_fields_without_units():
    rows = parse_query_gpu_csv(read_fixture("netdata_tesla-p100.csv"))
    assert rows == [{
        "name": "Tesla P100-PCIE-16GB", "uuid": "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6", "fan.speed": None,
        "pstate": "P0", "memory.reserved": "103", "memory.used": "0", "memory.free": "16280",
        "utilization.gpu": "0", "utilization.memory": "0", "temperature.gpu": "37", "power.draw": "28.16",
        "clocks.current.graphics": "405", "clocks.current.sm": "405", "clocks.current.memory": "715",
        "clocks.current.video": "835",
    }]


def test_all_fields_csv_of_h100_mig_keeps_values_and_maps_placeholders_to_none():
    rows = parse_query_gpu_csv(read_fixture("utkuozdemir_h100-80gb-mig_590.48.01_query-gpu-all-fields.csv"))
    assert len(rows) == 1
    row = rows[0]
    assert len(row) == 212
    assert row["driver_version"] == "590.48.01"
    assert row["name"] == "NVIDIA H100 80GB HBM3"
    assert row["pci.bus_id"] == "00000000:00:09.0"
    assert row["memory.total"] == "81559 MiB"
    assert row["power.draw"] == "71.15 W"
    assert row["power.draw.instant"] == "70.72 W"
    assert row["mig.mode.current"] == "Enabled"
    assert row["ecc.errors.uncorrected.volatile.total"] == "0"
    assert row["temperature.gpu"] == "42"
    assert row["utilization.gpu"] is None                      # [N/A]
    assert row["display_mode"] is None                         # [Requested functionality has been deprecated]
    assert row["fabric.health.summary"] is None                # N/A without brackets
    assert row["retired_pages.pending"] is None
    assert row["platform.chassis_serial_number"] is None       # printed empty
    assert not any(" [" in key for key in row)


def test_all_fields_csv_of_l40s_has_the_595_kmd_version_column():
    row = parse_query_gpu_csv(read_fixture("utkuozdemir_l40s_595.80_query-gpu-all-fields.csv"))[0]
    assert len(row) == 202
    assert (row["driver_version"], row["kmd_version"]) == ("595.80", "595.80")
    assert row["name"] == "NVIDIA L40S"
    assert row["memory.total"] == "46068 MiB"
    assert row["remapped_rows.pending"] == "No"
    assert row["mig.mode.current"] is None
    assert row["temperature.memory"] is None
    assert row["utilization.gpu"] == "100 %"


def test_noheader_nounits_csv_uses_the_queried_field_names():
    text = "0, NVIDIA H100 80GB HBM3, 81559, [N/A]\n1, NVIDIA H100 80GB HBM3, 81559, [Not Supported]\n"
    rows = parse_query_gpu_csv(text, fields=["index", "name", "memory.total [MiB]", "fan.speed"])
    assert rows == [
        {"index": "0", "name": "NVIDIA H100 80GB HBM3", "memory.total": "81559", "fan.speed": None},
        {"index": "1", "name": "NVIDIA H100 80GB HBM3", "memory.total": "81559", "fan.speed": None},
    ]


def test_csv_with_only_a_header_or_nothing_has_no_rows():
    assert parse_query_gpu_csv("index, name\n") == []
    assert parse_query_gpu_csv("") == []


@pytest.mark.parametrize("name", CSV_FILES)
def test_truncated_csv_returns_what_it_got(name):
    text = read_fixture(name)
    header_names = len(parse_query_gpu_csv(text)[0])
    for length in cut_points(text):
        rows = parse_query_gpu_csv(text[:length])
        assert len(rows) <= 1
        for row in rows:
            assert len(row) <= header_names


# --------------------------------------------------------------------------- classify_error

def error_text_blocks():
    """The numbered blocks of nvidia-smi_error_texts.txt: {number: text without the '#' notes}."""
    blocks, current = {}, None
    for line in read_fixture("nvidia-smi_error_texts.txt").splitlines():
        if line.startswith("# ") and line[2:4].rstrip(")").isdigit() and ")" in line[2:5]:
            current = int(line[2:line.index(")")])
            blocks[current] = []
        elif current is not None and not line.startswith("#"):
            blocks[current].append(line)
    return dict((number, "\n".join(lines) + "\n") for number, lines in blocks.items())


def test_driver_not_communicating_is_classified_as_no_driver():
    result = classify_error(error_text_blocks()[1], 9)
    assert result == {
        "error_kind": "no_driver",
        "error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                 "Make sure that the latest NVIDIA driver is installed and running.",
        "nvml_library_version": None,
    }


def test_version_mismatch_on_580_reports_the_nvml_library_version():
    result = classify_error(error_text_blocks()[2], 18)
    assert result == {"error_kind": "version_mismatch",
                      "error": "Failed to initialize NVML: Driver/library version mismatch",
                      "nvml_library_version": "580.178"}


def test_version_mismatch_of_older_drivers_has_no_nvml_library_version():
    result = classify_error(error_text_blocks()[3], 18)
    assert (result["error_kind"], result["nvml_library_version"]) == ("version_mismatch", None)


@pytest.mark.parametrize("number", [4, 5, 6, 7])
def test_other_failures_are_classified_as_other_with_their_first_line(number):
    text = error_text_blocks()[number]
    result = classify_error(text, 6)
    assert result["error_kind"] == "other"
    assert result["error"] == text.strip().splitlines()[0]


def test_missing_nvidia_smi_binary_is_classified_as_not_found():
    assert classify_error("/bin/sh: 1: nvidia-smi: not found\n", 127)["error_kind"] == "not_found"
    # AnsibleModule.run_command reports a missing executable as rc 2 with the OSError text
    assert classify_error("[Errno 2] No such file or directory: b'nvidia-smi'", 2)["error_kind"] == "not_found"


def test_missing_nvml_library_is_classified_as_not_found():
    result = classify_error("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. "
                            "Please make sure that the NVIDIA Display Driver is properly installed and present in "
                            "your system.\nPlease also try adding directory that contains libnvidia-ml.so to your "
                            "system PATH.\n", 12)
    assert result["error_kind"] == "not_found"
    assert result["error"].startswith("NVIDIA-SMI couldn't find libnvidia-ml.so")


def test_return_code_decides_when_nothing_was_printed():
    assert classify_error("", 9) == {"error_kind": "no_driver",
                                     "error": "nvidia-smi exited with return code 9 and printed nothing",
                                     "nvml_library_version": None}
    assert classify_error("", 15)["error_kind"] == "other"


def test_no_devices_found_is_other_not_a_missing_driver():
    assert classify_error("No devices were found\n", 6) == {
        "error_kind": "other", "error": "No devices were found", "nvml_library_version": None}


@pytest.mark.parametrize("name", XML_FILES + LIST_FILES[:2])
def test_successful_output_is_not_an_error(name):
    assert classify_error(read_fixture(name), 0) == {"error_kind": None, "error": None, "nvml_library_version": None}


def test_known_failure_text_wins_over_a_zero_return_code():
    assert classify_error(error_text_blocks()[2], 0)["error_kind"] == "version_mismatch"
