"""The twin's nvidia-smi prints what the real one prints, and the collection's parsers read it as the profile says.

No node is needed: the renderers run on `profiles.make_hw` data and are compared with real captures
(the collection's `tests/unit/fixtures/`, and `nvidia_fixtures/` for the one only these tests read; see
`fixture_path` in conftest.py); the parsers are the collection's own
(`plugins/module_utils/nvidia/smi.py`, `_driver_state.py`, `_xid.py`).
"""
from __future__ import annotations

import csv
import datetime
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from conftest import fixture_path  # noqa: E402
from gpulab.nvidia import boot, kmsg, profiles, smi  # noqa: E402

VERSION = "570.124.06"
WHEN = datetime.datetime(2026, 12, 2, 9, 46, 54, 792000)
CONTRACT_GPU_KEYS = ["uuid", "name", "memory_total_mib", "memory_used_mib", "persistence_mode", "compute_mode",
                     "mig_mode_current", "mig_mode_pending", "ecc_volatile_uncorrectable",
                     "ecc_aggregate_uncorrectable", "retired_pages_pending", "remapped_rows_pending",
                     "remapped_rows_failure", "temperature_c", "power_draw_w", "power_limit_w"]


def fixture_text(name: str) -> str:
    with open(fixture_path(name), encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def collection(collection_module_utils):
    """The collection's module_utils, imported as `ansible_collections.gpuops.nvidia.plugins.module_utils`."""
    return {name: collection_module_utils(name) for name in ("nvidia.smi", "nvidia.driver_state", "nvidia.xid")}


def h100_with_mig_and_ecc_fault() -> dict:
    hw = profiles.make_hw("gpu-node-01", "h100-sxm-80gb-x8")
    hw = profiles.with_mig_layout(hw, 0, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    hw, _lines = boot.apply_xid(hw, 48, 5)
    return hw


def run_smi(hw: dict, *argv) -> smi.Result:
    return smi.run(list(argv), hw, VERSION, VERSION, timestamp=WHEN)


def child_tags(element) -> list:
    return [child.tag for child in element]


# ------------------------------------------------------------------------------------------ -q -x structure

def test_xml_gpu_elements_follow_the_element_order_of_a_real_v13_capture():
    real_gpu = ET.fromstring(fixture_text("telegraf_rtx-3080-v13.xml")).find("gpu")
    twin_gpu = ET.fromstring(run_smi(profiles.make_hw("n", "l40s-x4"), "-q", "-x").stdout).find("gpu")
    assert child_tags(twin_gpu) == child_tags(real_gpu)
    for section in ("pci", "fb_memory_usage", "ecc_errors", "temperature", "gpu_power_readings", "mig_mode"):
        assert child_tags(twin_gpu.find(section)) == child_tags(real_gpu.find(section)), section


def test_xml_document_header_is_the_v13_one_with_tabs():
    real = fixture_text("telegraf_dual_a5000-v13.xml").splitlines()
    twin = run_smi(profiles.make_hw("n", "a100-sxm4-80gb-x8"), "-q", "-x").stdout.splitlines()
    assert twin[:3] == real[:3]
    assert [line.split(">")[0] + ">" for line in twin[3:7]] == [line.split(">")[0] + ">" for line in real[3:7]]
    assert twin[7] == '\t<gpu id="00000000:18:00.0">'


def test_xml_values_carry_the_units_nvidia_smi_prints():
    gpu = ET.fromstring(run_smi(profiles.make_hw("n", "h100-sxm-80gb-x8"), "-q", "-x", "-i", "2").stdout)\
        .find("gpu")
    assert gpu.find("fb_memory_usage/total").text == "81559 MiB"
    assert re.fullmatch(r"\d+\.\d\d W", gpu.find("gpu_power_readings/instant_power_draw").text)
    assert gpu.find("gpu_power_readings/current_power_limit").text == "700.00 W"
    assert re.fullmatch(r"\d+ C", gpu.find("temperature/gpu_temp").text)
    assert gpu.find("pci/pci_device_id").text == "233010DE"
    assert gpu.find("pci/pci_bus_id").text == "00000000:3A:00.0"


def test_mig_device_blocks_have_the_elements_of_a_real_mig_capture():
    real = ET.fromstring(fixture_text("telegraf_a100-sxm4-v12.xml")).find("gpu")
    twin = ET.fromstring(run_smi(h100_with_mig_and_ecc_fault(), "-q", "-x", "-i", "0").stdout).find("gpu")
    assert len(twin.findall("mig_devices/mig_device")) == 4
    assert child_tags(twin.find("mig_devices/mig_device")) == child_tags(real.find("mig_devices/mig_device"))
    assert twin.find("mig_mode/current_mig").text == "Enabled"


def test_gpus_without_mig_print_none_in_mig_devices_and_na_mig_mode_when_not_capable():
    twin = ET.fromstring(run_smi(profiles.make_hw("n", "l40s-x4"), "-q", "-x").stdout).find("gpu")
    assert twin.find("mig_devices").text.strip() == "None"
    assert twin.find("mig_mode/current_mig").text == "N/A"


# ------------------------------------------------------------------------------------------------------ -L

def test_list_prints_gpu_and_mig_lines_with_the_spacing_of_real_captures():
    real_lines = fixture_text("utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt").splitlines()
    twin_lines = run_smi(h100_with_mig_and_ecc_fault(), "-L").stdout.splitlines()[:5]
    uuid = re.compile(r"(GPU|MIG)-[0-9a-f-]{36}")
    assert [uuid.sub("UUID", line) for line in twin_lines] == [uuid.sub("UUID", line) for line in real_lines]


def test_list_pads_long_compute_instance_profiles_like_the_h200_capture():
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    hw["gpus"][0]["mig_devices"] = [dict(profiles.make_mig_device(hw["gpus"][0], "n", 0, "3g.40gb", 1),
                                         profile="1c.3g.71gb")]
    hw["gpus"][0]["mig_mode_current"] = True
    line = run_smi(hw, "-L", "-i", "0").stdout.splitlines()[1]
    real = fixture_text("utkuozdemir_h200-mig_590.48.01_nvidia-smi-L.txt").splitlines()[1]
    assert line.split("(UUID")[0] == real.split("(UUID")[0]


# --------------------------------------------------------------------------------------------- --query-gpu

def test_query_gpu_header_uses_the_real_field_names_and_units():
    real_header = next(csv.reader([fixture_text("utkuozdemir_h100-80gb-mig_590.48.01_query-gpu-all-fields.csv")
                                   .splitlines()[0]], skipinitialspace=True))
    real_by_name = {re.sub(r" \[.*\]$", "", cell): cell for cell in real_header}
    fields = [name for name in smi.QUERY_FIELDS if name in real_by_name]
    assert len(fields) >= 40
    twin_header = run_smi(profiles.make_hw("n", "h100-sxm-80gb-x8"), "--query-gpu=" + ",".join(fields),
                          "--format=csv").stdout.splitlines()[0].split(", ")
    assert twin_header == [real_by_name[name] for name in fields]


def test_query_gpu_values_match_the_real_formats_of_the_same_fields():
    real_rows = list(csv.reader(fixture_text("utkuozdemir_h100-80gb-mig_590.48.01_query-gpu-all-fields.csv")
                                .splitlines(), skipinitialspace=True))
    real = dict(zip([re.sub(r" \[.*\]$", "", cell) for cell in real_rows[0]], real_rows[1]))
    fields = ["pci.bus_id", "pci.domain", "pci.device_id", "memory.total", "power.limit", "mig.mode.current",
              "retired_pages.pending", "compute_cap", "persistence_mode", "pstate", "timestamp"]
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    hw["gpus"][0]["persistence_mode"] = True
    hw = profiles.with_mig_layout(hw, 0, ["7g.80gb"])
    twin = run_smi(hw, "--query-gpu=" + ",".join(fields), "--format=csv,noheader", "-i", "0").stdout.strip()
    values = dict(zip(fields, twin.split(", ")))
    for field in ("pci.domain", "pci.device_id", "memory.total", "power.limit", "mig.mode.current",
                  "retired_pages.pending", "compute_cap", "persistence_mode", "pstate"):
        assert values[field] == real[field], field
    assert values["pci.bus_id"] == "00000000:18:00.0"
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}", values["timestamp"]) and \
        re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}", real["timestamp"])


def test_query_gpu_nounits_drops_units_and_keeps_na_markers():
    done = run_smi(profiles.make_hw("n", "h100-sxm-80gb-x8"), "--query-gpu=memory.total,power.limit,fan.speed",
                   "--format=csv,noheader,nounits", "-i", "0")
    assert done.stdout == "81559, 700.00, [N/A]\n"


def test_kmd_version_column_exists_only_from_the_595_branch_like_the_l40s_capture():
    assert "kmd_version" in fixture_text("utkuozdemir_l40s_595.80_query-gpu-all-fields.csv").splitlines()[0]
    hw = profiles.make_hw("n", "l40s-x4")
    assert smi.run(["--query-gpu=kmd_version", "--format=csv,noheader"], hw, "595.80", "595.80").stdout == \
        "595.80\n" * 4
    refused = run_smi(hw, "--query-gpu=kmd_version", "--format=csv")
    assert refused.rc == smi.RC_INVALID_ARGUMENT and 'Field "kmd_version" is not a valid field' in refused.stdout


# ------------------------------------------------------------------------------------------- errors, table

def test_no_driver_prints_the_real_text_and_exits_9():
    real = [line for line in fixture_text("nvidia-smi_error_texts.txt").splitlines() if line.startswith("NVIDIA-SMI")]
    done = smi.run([], profiles.make_hw("n", "h100-sxm-80gb-x8"), None, VERSION)
    assert done.rc == 9 and done.stdout.splitlines()[0] == real[0]


def test_version_mismatch_prints_the_real_texts_with_the_nvml_line_from_580():
    lines = fixture_text("nvidia-smi_error_texts.txt").splitlines()
    mismatch_580 = lines[lines.index("Failed to initialize NVML: Driver/library version mismatch"):][:2]
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    new = smi.run(["-L"], hw, "580.173.02", "580.178.01")
    assert new.rc == 18 and new.stdout.splitlines() == [mismatch_580[0], "NVML library version: 580.178"]
    assert mismatch_580[1] == "NVML library version: 580.178"
    old = smi.run(["-L"], hw, "550.54.14", "550.54.15")
    assert old.rc == 18 and old.stdout.splitlines() == [mismatch_580[0]]


def test_default_table_has_the_layout_of_the_real_8_gpu_capture():
    real = fixture_text("thamada_h100-sxm-x8_565.57.01_nvidia-smi.txt").splitlines()
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    twin = smi.run([], hw, "565.57.01", "565.57.01", timestamp=WHEN).stdout.splitlines()[1:]
    assert twin[:7] == real[:7]
    assert [len(line) for line in twin] == [len(line) for line in real]
    assert twin[7].split("|")[2] == real[7].split("|")[2]     # bus id cell of GPU 0


# --------------------------------------------------------------------------------- settings nvidia-smi keeps

def make_node_root(tmp_path, hw: dict, boot_id: str = "boot-1") -> str:
    root = str(tmp_path)
    for directory in ("run/gpulab", "run/gpulab-firmware", "proc/sys/kernel/random"):
        os.makedirs(os.path.join(root, directory), exist_ok=True)
    with open(os.path.join(root, "run/gpulab/hw.json"), "w") as handle:
        import json
        json.dump(hw, handle)
    with open(os.path.join(root, "proc/sys/kernel/random/boot_id"), "w") as handle:
        handle.write(boot_id + "\n")
    return root


def test_mig_enable_stays_pending_until_a_reboot_then_becomes_current(tmp_path):
    root = make_node_root(tmp_path, profiles.make_hw("n", "a100-sxm4-80gb-x8"))
    done = smi.run(["-i", "3", "-mig", "1"], smi.load_node_hw(root), VERSION, VERSION, root=root)
    assert done.rc == 0
    assert done.stdout.startswith("Enabled MIG Mode for GPU 00000000:5D:00.0\nWarning: MIG mode is in pending "
                                  "enable state for GPU 00000000:5D:00.0")
    gpu = smi.load_node_hw(root)["gpus"][3]
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == (False, True)
    with open(os.path.join(root, "proc/sys/kernel/random/boot_id"), "w") as handle:
        handle.write("boot-2\n")
    gpu = smi.load_node_hw(root)["gpus"][3]
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == (True, True)


def test_gpu_reset_applies_pending_mig_mode_and_mig_instances_do_not_survive_a_reboot(tmp_path):
    root = make_node_root(tmp_path, profiles.make_hw("n", "h100-sxm-80gb-x8"))
    smi.run(["-i", "0", "-mig", "1"], smi.load_node_hw(root), VERSION, VERSION, root=root)
    assert smi.run(["-i", "0", "-r"], smi.load_node_hw(root), VERSION, VERSION, root=root).rc == 0
    created = smi.run(["mig", "-i", "0", "-cgi", "9,3g.40gb", "-C"], smi.load_node_hw(root), VERSION, VERSION,
                      root=root)
    assert created.rc == 0 and "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb" in \
        created.stdout
    listing = smi.run(["-L", "-i", "0"], smi.load_node_hw(root), VERSION, VERSION).stdout
    assert listing.count("MIG 3g.40gb     Device") == 2
    with open(os.path.join(root, "proc/sys/kernel/random/boot_id"), "w") as handle:
        handle.write("boot-2\n")
    gpu = smi.load_node_hw(root)["gpus"][0]
    assert gpu["mig_mode_current"] is True and gpu["mig_devices"] == []


def test_gpu_reset_clears_volatile_ecc_and_applies_pending_remaps_until_new_errors(tmp_path):
    hw, _lines = boot.apply_xid(profiles.make_hw("n", "h100-sxm-80gb-x8"), 48, 2)
    root = make_node_root(tmp_path, hw)
    before = smi.load_node_hw(root)["gpus"][2]
    assert (before["ecc_volatile_uncorrectable"], before["remapped_rows_pending"]) == (1, True)
    done = smi.run(["-i", "2", "-r"], smi.load_node_hw(root), VERSION, VERSION, root=root)
    assert done.stdout == "GPU 00000000:3A:00.0 was successfully reset.\nAll done.\n"
    after = smi.load_node_hw(root)["gpus"][2]
    assert (after["ecc_volatile_uncorrectable"], after["ecc_aggregate_uncorrectable"],
            after["remapped_rows_pending"]) == (0, 1, False)
    hw, _lines = boot.apply_xid(hw, 94, 2)
    with open(os.path.join(root, "run/gpulab/hw.json"), "w") as handle:
        import json
        json.dump(hw, handle)
    again = smi.load_node_hw(root)["gpus"][2]
    assert (again["ecc_volatile_uncorrectable"], again["remapped_rows_pending"]) == (1, True)


def test_mig_on_a_gpu_without_mig_is_not_supported(tmp_path):
    root = make_node_root(tmp_path, profiles.make_hw("n", "l40s-x4"))
    done = smi.run(["-i", "0", "-mig", "1"], smi.load_node_hw(root), VERSION, VERSION, root=root)
    assert done.rc == smi.RC_NOT_SUPPORTED and "Not Supported" in done.stdout


def test_gpu_off_the_bus_is_reported_lost_and_missing_from_listings():
    hw, _lines = boot.apply_xid(profiles.make_hw("n", "h100-sxm-80gb-x8"), 79, 4)
    done = run_smi(hw, "-L")
    assert done.rc == smi.RC_GPU_IS_LOST
    assert done.stdout.splitlines()[0] == "Unable to determine the device handle for GPU00000000:9A:00.0: GPU is " \
                                          "lost.  Reboot the system to recover this GPU"
    assert len([line for line in done.stdout.splitlines() if line.startswith("GPU ")]) == 7


# ------------------------------------------------------------------------- the collection's parsers read it

@pytest.mark.parametrize("profile", ["a100-sxm4-80gb-x8", "h100-sxm-80gb-x8", "l40s-x4"])
def test_collection_xml_parser_reads_the_twin_as_the_profile_says(collection, profile):
    hw = profiles.make_hw("gpu-node-07", profile)
    hw, _lines = boot.apply_xid(hw, 48, 1)
    parsed = collection["nvidia.smi"].parse_query_xml(run_smi(hw, "-q", "-x").stdout)
    assert parsed["driver_version"] == VERSION and parsed["cuda_version"] == "12.8"
    assert parsed["attached_gpus"] == len(hw["gpus"]) == len(parsed["gpus"])
    for gpu, facts in zip(hw["gpus"], parsed["gpus"]):
        assert {key: facts[key] for key in CONTRACT_GPU_KEYS} == {key: gpu[key] for key in CONTRACT_GPU_KEYS}
        assert facts["index"] == gpu["index"] and facts["pci_bus_id"] == smi.nvml_bus_id(gpu["pci_address"])
        assert collection["nvidia.smi"].sysfs_pci_address(facts["pci_bus_id"]) == gpu["pci_address"]
    assert parsed["gpus"][1]["ecc_volatile_uncorrectable"] == 1


def test_collection_parsers_read_mig_devices_from_xml_and_list_as_the_profile_says(collection):
    parsers = collection["nvidia.smi"]
    hw = h100_with_mig_and_ecc_fault()
    gpus = parsers.merge_mig_listing(parsers.parse_query_xml(run_smi(hw, "-q", "-x").stdout)["gpus"],
                                     parsers.parse_list(run_smi(hw, "-L").stdout))
    expected = [{key: device[key] for key in ("index", "gpu_instance_id", "compute_instance_id",
                                              "memory_total_mib", "profile", "uuid")}
                for device in hw["gpus"][0]["mig_devices"]]
    assert [{key: device[key] for key in expected[0]} for device in gpus[0]["mig_devices"]] == expected
    assert gpus[1]["mig_devices"] == []


def test_collection_csv_parser_reads_the_twin_with_and_without_header(collection):
    parsers = collection["nvidia.smi"]
    hw = profiles.make_hw("n", "l40s-x4")
    fields = ["index", "uuid", "name", "memory.total", "retired_pages.pending", "remapped_rows.pending"]
    with_header = parsers.parse_query_gpu_csv(run_smi(hw, "--query-gpu=" + ",".join(fields),
                                                      "--format=csv").stdout)
    bare = parsers.parse_query_gpu_csv(run_smi(hw, "--query-gpu=" + ",".join(fields),
                                               "--format=csv,noheader,nounits").stdout, fields)
    assert [row["uuid"] for row in with_header] == [gpu["uuid"] for gpu in hw["gpus"]]
    assert with_header[0]["memory.total"] == "46068 MiB" and bare[0]["memory.total"] == "46068"
    assert with_header[0]["retired_pages.pending"] is None and with_header[0]["remapped_rows.pending"] == "No"


def test_collection_classifies_the_twin_errors_like_the_real_ones(collection):
    parsers = collection["nvidia.smi"]
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    no_driver = smi.run(["-q", "-x"], hw, None, VERSION)
    mismatch = smi.run(["-q", "-x"], hw, "580.95.04", "580.95.05")
    missing_library = smi.run(["-q", "-x"], hw, VERSION, None)
    assert parsers.classify_error(no_driver.stdout, no_driver.rc)["error_kind"] == "no_driver"
    classified = parsers.classify_error(mismatch.stdout, mismatch.rc)
    assert classified["error_kind"] == "version_mismatch" and classified["nvml_library_version"] == "580.95"
    assert parsers.classify_error(missing_library.stdout, missing_library.rc)["error_kind"] == "not_found"


def test_collection_reads_proc_version_and_lsmod_of_the_twin(collection):
    state = collection["nvidia.driver_state"]
    assert state.parse_proc_version(boot.proc_version_text("570.124.06", "open")) == \
        {"version": "570.124.06", "flavor": "open", "arch": "x86_64"}
    assert state.parse_proc_version(boot.proc_version_text("550.54.15", "proprietary"))["flavor"] == "proprietary"
    modules = [{"name": "nvidia_uvm", "size": 4661248, "used_by": []},
               {"name": "nvidia", "size": 54059008, "used_by": ["nvidia_uvm", "nvidia_modeset"]}]
    parsed = state.parse_module_list(kmsg.render_lsmod(modules))
    assert [(m["name"], m["refcount"], m["used_by"]) for m in parsed] == \
        [("nvidia_uvm", 0, []), ("nvidia", 2, ["nvidia_uvm", "nvidia_modeset"])]


def test_proc_version_texts_have_the_exact_real_shapes():
    real_open = fixture_text("proc-driver-nvidia-version_open_x86_64_565.57.01_ubuntu2404.txt").splitlines()[0]
    real_proprietary = fixture_text("proc-driver-nvidia-version_proprietary_x86_64_580.173.02_truenas.txt")\
        .splitlines()[0]
    shape = re.compile(r"[0-9]")
    twin_open = boot.proc_version_text("565.57.01", "open").splitlines()[0]
    twin_proprietary = boot.proc_version_text("580.173.02", "proprietary").splitlines()[0]
    assert twin_open.split("  (")[0] == real_open.split("  (")[0]
    assert shape.sub("9", twin_proprietary.split("  ")[0] + twin_proprietary.split("  ")[1]) == \
        shape.sub("9", real_proprietary.split("  ")[0] + real_proprietary.split("  ")[1])
    assert len(twin_open.split("  ")) == len(real_open.split("  "))


def test_collection_xid_parser_reads_the_twin_kernel_log_through_dmesg(collection, tmp_path):
    hw = profiles.make_hw("n", "h100-sxm-80gb-x8")
    lines = kmsg.xid_lines(hw, 3, 79) + kmsg.xid_lines(hw, 6, 48) + kmsg.xid_lines(hw, 0, 13, 4242, "python3")
    log_path = str(tmp_path / "kmsg")
    with open(log_path, "w") as handle:
        handle.write(kmsg.new_log(1764668800.0, ["Linux version 6.1.0"]))
    kmsg.append(log_path, lines, now=1764668900.5)
    boot_epoch, entries = kmsg.read_log(log_path)
    for time_format in ("raw", "ctime", "iso"):
        events = collection["nvidia.xid"].parse_kernel_log(kmsg.render_dmesg(boot_epoch, entries, time_format))
        assert [(event["code"], event["pci_address"], event["pid"]) for event in events] == \
            [(79, "0000:5d:00", None), (48, "0000:ba:00", None), (13, "0000:18:00", 4242)], time_format
        assert events[2]["process"] == "python3"
    assert "[  100.500000] NVRM: Xid (PCI:0000:5d:00): 79, " in kmsg.render_dmesg(boot_epoch, entries)
