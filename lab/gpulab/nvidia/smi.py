"""The fake `nvidia-smi`: renders a node's GPUs (`hw.json`) the way the real tool prints them.

Formats follow real captures in `tests/unit/fixtures/nvidia_smi/`: `-q -x` like `telegraf_rtx-3080-v13.xml`
(v13 DTD, tab indentation, element order; MIG blocks like `telegraf_a100-sxm4-v12.xml`), `-L` like the
utkuozdemir captures, `--query-gpu` like `*_query-gpu-all-fields.csv`, the default table like the thamada
capture (`lab/tests/nvidia_fixtures/`), and the error texts and exit codes of `nvidia-smi_error_texts.txt`.

Standard library only, no `gpulab` imports: the fake runfile embeds this file as `/usr/bin/nvidia-smi`.

Node state read at run time (paths relative to `GPULAB_NODE_ROOT`, default `/`):
- `/run/gpulab/hw.json`: the GPUs and their live state (written by the twin daemon, read-only in the node);
- `/run/gpulab-firmware/gpu-state.json`: what nvidia-smi itself changed (MIG mode, MIG devices, persistence,
  power limit), written here because a GPU keeps those across a process exit; MIG mode survives reboots,
  MIG devices do not (both keyed to the boot id they were made in);
- `/proc/driver/nvidia/version`: present only while the kernel module is loaded; its version is the kernel side;
- `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`: a symlink to `libnvidia-ml.so.<version>`, the userspace side.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
import re
import sys

HW_PATH = "/run/gpulab/hw.json"
GPU_STATE_PATH = "/run/gpulab-firmware/gpu-state.json"
PROC_VERSION_PATH = "/proc/driver/nvidia/version"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
NVML_LIBRARY_LINK = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
FAULTS_PATH = "/run/gpulab/faults.json"
# the node twin's fault under which creating a GPU instance fails with NVML_ERROR_UNKNOWN
MIG_CREATE_FAULT = "mig-create-fail"

RC_SUCCESS = 0
RC_INVALID_ARGUMENT = 2
RC_NOT_SUPPORTED = 3
RC_NOT_FOUND = 6
RC_DRIVER_NOT_LOADED = 9
RC_LIBRARY_NOT_FOUND = 12
RC_GPU_IS_LOST = 15
RC_LIBRARY_MISMATCH = 18
RC_OTHER_ERROR = 255

NO_DRIVER_TEXT = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")
MISMATCH_TEXT = "Failed to initialize NVML: Driver/library version mismatch"
LIBRARY_NOT_FOUND_TEXT = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
                          "the NVIDIA Display Driver is properly installed and present in your system.\n"
                          "Please also try adding directory that contains libnvidia-ml.so to your system PATH.")
NOT_AVAILABLE = "N/A"

# Driver branch -> CUDA version the driver reports (driver release notes)
CUDA_VERSION_BY_BRANCH = [
    (595, "13.2"), (590, "13.1"), (580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"),
    (555, "12.5"), (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"),
    (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (460, "11.2"), (450, "11.0"),
]


def mismatched_version(version: str) -> str:
    """The version of "the other side" under the twin's `driver-mismatch` fault: same branch, other build."""
    parts = version.split(".")
    last = int(parts[-1]) if parts[-1].isdigit() else 0
    parts[-1] = ("%02d" % (last - 1)) if last > 0 else "01"
    return ".".join(parts)


def driver_branch(version: str) -> int:
    return int(version.split(".")[0])


def cuda_version_for(driver_version: str) -> str:
    branch = driver_branch(driver_version)
    for min_branch, cuda_version in CUDA_VERSION_BY_BRANCH:
        if branch >= min_branch:
            return cuda_version
    return "10.2"


# ----------------------------------------------------------------------------------------------- node state

def _node_path(path: str, root: str | None) -> str:
    root = root if root is not None else os.environ.get("GPULAB_NODE_ROOT", "/")
    return os.path.join(root, path.lstrip("/"))


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _read_json(path: str, default):
    text = _read_text(path)
    return json.loads(text) if text else default


def kernel_driver_version(proc_version_text: str | None) -> str | None:
    """The version in `/proc/driver/nvidia/version` (open and proprietary formats), None when absent."""
    if not proc_version_text:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", proc_version_text)
    return match.group(1) if match else None


def userspace_driver_version(root: str | None = None) -> str | None:
    """The NVML library version, from the `libnvidia-ml.so.1` symlink target; None when NVML is missing."""
    link = _node_path(NVML_LIBRARY_LINK, root)
    if not os.path.exists(link):
        return None
    match = re.search(r"libnvidia-ml\.so\.(\d+(?:\.\d+)+)$", os.path.realpath(link))
    return match.group(1) if match else None


def effective_hw(hw: dict, gpu_state: dict, boot_id: str | None) -> dict:
    """`hw` with what nvidia-smi set applied: MIG mode (pending turns current after a reboot), MIG devices and
    other settings made during the current boot."""
    result = copy.deepcopy(hw)
    for gpu in result.get("gpus", []):
        state = gpu_state.get(gpu["uuid"])
        if not state:
            continue
        booted_since_change = state.get("boot_id") != boot_id
        if "mig_mode_pending" in state:
            gpu["mig_mode_pending"] = state["mig_mode_pending"]
            gpu["mig_mode_current"] = state["mig_mode_pending"] if booted_since_change \
                else state.get("mig_mode_current", gpu["mig_mode_current"])
        if "mig_devices" in state and not booted_since_change:
            gpu["mig_devices"] = state["mig_devices"]
        elif booted_since_change and "mig_devices" in state:
            gpu["mig_devices"] = []
        if not gpu["mig_mode_current"]:
            gpu["mig_devices"] = []
        for key in ("persistence_mode", "power_limit_w", "compute_mode"):
            if key in state and not booted_since_change:
                gpu[key] = state[key]
        _apply_reset_baseline(gpu, state.get("reset_baseline"))
    return result


RESET_FLAGS = ("retired_pages_pending", "remapped_rows_pending")


def _apply_reset_baseline(gpu: dict, baseline: dict | None) -> None:
    """After `nvidia-smi -r`: volatile ECC counts restart from zero and pending page retirements / row remaps
    that existed at the reset have been applied (new errors after the reset count again)."""
    if not baseline:
        return
    gpu["ecc_volatile_uncorrectable"] = max(0, gpu["ecc_volatile_uncorrectable"] -
                                            baseline.get("ecc_volatile_uncorrectable", 0))
    no_new_errors = gpu["ecc_aggregate_uncorrectable"] <= baseline.get("ecc_aggregate_uncorrectable", 0)
    for flag in RESET_FLAGS:
        if gpu.get(flag) and baseline.get(flag) and no_new_errors:
            gpu[flag] = False


def load_node_hw(root: str | None = None) -> dict:
    hw = _read_json(_node_path(HW_PATH, root), {"gpus": []})
    gpu_state = _read_json(_node_path(GPU_STATE_PATH, root), {})
    boot_id = (_read_text(_node_path(BOOT_ID_PATH, root)) or "").strip() or None
    return effective_hw(hw, gpu_state, boot_id)


def save_gpu_state_change(root: str | None, gpu_uuid: str, changes: dict) -> None:
    """Record settings nvidia-smi changed on one GPU, tagged with the boot they were made in."""
    path = _node_path(GPU_STATE_PATH, root)
    gpu_state = _read_json(path, {})
    boot_id = (_read_text(_node_path(BOOT_ID_PATH, root)) or "").strip() or None
    entry = gpu_state.get(gpu_uuid, {})
    if entry.get("boot_id") != boot_id:
        # a reboot happened since the last change: pending MIG mode took effect, MIG devices are gone
        kept = {key: entry[key] for key in ("reset_baseline",) if key in entry}
        if "mig_mode_pending" in entry:
            kept.update(mig_mode_pending=entry["mig_mode_pending"], mig_mode_current=entry["mig_mode_pending"])
        entry = kept
    entry.update(changes)
    entry["boot_id"] = boot_id
    gpu_state[gpu_uuid] = entry
    tmp_path = path + ".tmp"
    with open(tmp_path, "w", encoding="utf-8") as handle:
        json.dump(gpu_state, handle, indent=1, sort_keys=True)
    os.replace(tmp_path, path)


def visible_gpus(hw: dict) -> list:
    """GPUs NVML shows (on the bus), in the shape `NodeView.visible_gpus()` returns."""
    return [{"index": gpu["index"], "uuid": gpu["uuid"], "name": gpu["name"],
             "memory_mib": gpu["memory_total_mib"], "mig_enabled": bool(gpu["mig_mode_current"]),
             "mig_devices": [{"profile": dev["profile"], "uuid": dev["uuid"]} for dev in gpu["mig_devices"]]}
            for gpu in hw.get("gpus", []) if gpu.get("on_bus", True)]


# ------------------------------------------------------------------------------------------------ formatting

def nvml_bus_id(pci_address: str) -> str:
    """`0000:18:00.0` -> `00000000:18:00.0`, the 8-digit-domain upper-case form NVML prints."""
    domain, bus, devfn = pci_address.split(":")
    return ("%08x:%s:%s" % (int(domain, 16), bus, devfn)).upper()


def enabled_text(value) -> str:
    if value is None:
        return NOT_AVAILABLE
    return "Enabled" if value else "Disabled"


def yes_no(value) -> str:
    if value is None:
        return NOT_AVAILABLE
    return "Yes" if value else "No"


def pci_device_id_field(gpu: dict) -> str:
    """`0x2330` -> `233010DE` (device id then vendor id, as the XML `pci_device_id`)."""
    return "%04X10DE" % int(gpu["device_id"], 16)


def _mig_enabled_text(gpu: dict, key: str) -> str:
    return enabled_text(gpu[key]) if gpu.get("mig_capable") else NOT_AVAILABLE


def _memory_free_mib(gpu: dict) -> int:
    return gpu["memory_total_mib"] - gpu["memory_reserved_mib"] - gpu["memory_used_mib"]


def _xml_lines(element, depth: int) -> list:
    tag, content = element
    indent = "\t" * depth
    if isinstance(content, list):
        if not content:
            return ["%s<%s>" % (indent, tag), "%s</%s>" % (indent, tag)]
        lines = ["%s<%s>" % (indent, tag)]
        for child in content:
            lines.extend(_xml_lines(child, depth + 1))
        return lines + ["%s</%s>" % (indent, tag)]
    return ["%s<%s>%s</%s>" % (indent, tag, _xml_escape(str(content)), tag)]


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _na_children(*tags) -> list:
    return [(tag, NOT_AVAILABLE) for tag in tags]


def _xml_mig_device(gpu: dict, device: dict) -> tuple:
    slices = gpu["mig_profiles"].get(device["profile"], [0, 1, 0])[1]
    sm_per_slice = 16 if gpu["architecture"] == "Hopper" else 14
    return ("mig_device", [
        ("index", device["index"]),
        ("gpu_instance_id", device["gpu_instance_id"]),
        ("compute_instance_id", device["compute_instance_id"]),
        ("device_attributes", [("shared", [
            ("multiprocessor_count", sm_per_slice * slices), ("copy_engine_count", slices),
            ("encoder_count", 0), ("decoder_count", slices), ("ofa_count", 1 if slices == 7 else 0),
            ("jpg_count", 1 if slices == 7 else 0)])]),
        ("ecc_error_count", [("volatile_count", [("sram_uncorrectable", 0)])]),
        ("fb_memory_usage", [("total", "%d MiB" % device["memory_total_mib"]), ("reserved", "0 MiB"),
                             ("used", "12 MiB"), ("free", "%d MiB" % (device["memory_total_mib"] - 12))]),
        ("bar1_memory_usage", [("total", "32767 MiB"), ("used", "0 MiB"), ("free", "32767 MiB")]),
    ])


def _xml_mig_devices(gpu: dict):
    if not gpu["mig_devices"]:
        return "\n\t\t\tNone\n\t\t"
    return [_xml_mig_device(gpu, device) for device in gpu["mig_devices"]]


def _xml_ecc_block(gpu: dict, scope: str) -> list:
    uncorrectable = gpu["ecc_%s_uncorrectable" % scope]
    children = [("sram_correctable", 0), ("sram_uncorrectable_parity", 0), ("sram_uncorrectable_secded", 0),
                ("dram_correctable", 0), ("dram_uncorrectable", uncorrectable)]
    if scope == "aggregate":
        children.append(("sram_threshold_exceeded", "No"))
    return children


def _xml_retired_pages(gpu: dict) -> list:
    supported = gpu.get("retired_pages_pending") is not None
    count = 0 if supported else NOT_AVAILABLE
    return [
        ("multiple_single_bit_retirement", [("retired_count", count), ("retired_pagelist", NOT_AVAILABLE)]),
        ("double_bit_retirement", [("retired_count", count), ("retired_pagelist", NOT_AVAILABLE)]),
        ("pending_blacklist", yes_no(gpu.get("retired_pages_pending"))),
        ("pending_retirement", yes_no(gpu.get("retired_pages_pending"))),
    ]


def _xml_remapped_rows(gpu: dict):
    if gpu["remapped_rows_pending"] is None:
        return NOT_AVAILABLE
    return [
        ("remapped_row_corr", gpu["remapped_rows_correctable"]),
        ("remapped_row_unc", gpu["remapped_rows_uncorrectable"]),
        ("remapped_row_pending", yes_no(gpu["remapped_rows_pending"])),
        ("remapped_row_failure", yes_no(gpu["remapped_rows_failure"])),
        ("row_remapper_histogram", [
            ("row_remapper_histogram_max", "%d bank(s)" % (2560 if gpu["architecture"] == "Hopper" else 640)),
            ("row_remapper_histogram_high", "0 bank(s)"), ("row_remapper_histogram_partial", "0 bank(s)"),
            ("row_remapper_histogram_low", "0 bank(s)"), ("row_remapper_histogram_none", "0 bank(s)")]),
    ]


def _xml_processes(gpu: dict) -> list:
    return [("process_info", [
        ("gpu_instance_id", NOT_AVAILABLE), ("compute_instance_id", NOT_AVAILABLE), ("pid", proc["pid"]),
        ("type", "C"), ("process_name", proc["name"]), ("used_memory", "%d MiB" % proc["used_memory_mib"]),
    ]) for proc in gpu.get("processes", [])]


def _power_w(value) -> str:
    return NOT_AVAILABLE if value is None else "%.2f W" % value


def _xml_gpu(gpu: dict, driver_version: str) -> tuple:
    bus_id = nvml_bus_id(gpu["pci_address"])
    domain, bus, devfn = gpu["pci_address"].split(":")
    gen = gpu["pcie_gen"]
    used_mib = gpu["memory_used_mib"]
    mig_on = bool(gpu["mig_mode_current"])
    return ("gpu", [
        ("product_name", gpu["name"]),
        ("product_brand", gpu["brand"]),
        ("product_architecture", gpu["architecture"]),
        ("display_mode", "Requested functionality has been deprecated"),
        ("display_attached", "No"),
        ("display_active", "Disabled"),
        ("persistence_mode", enabled_text(gpu["persistence_mode"])),
        ("addressing_mode", "None"),
        ("mig_mode", [("current_mig", _mig_enabled_text(gpu, "mig_mode_current")),
                      ("pending_mig", _mig_enabled_text(gpu, "mig_mode_pending"))]),
        ("mig_devices", _xml_mig_devices(gpu)),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", 4000),
        ("driver_model", _na_children("current_dm", "pending_dm")),
        ("serial", gpu["serial"]),
        ("uuid", gpu["uuid"]),
        ("pdi", "0x%016x" % (int(gpu["serial"]) * 2654435761 % (1 << 64))),
        ("minor_number", gpu["index"]),
        ("vbios_version", gpu["vbios_version"]),
        ("multigpu_board", "No"),
        ("board_id", "0x%x" % (int(bus, 16) << 8)),
        ("board_part_number", "692-2G506-0210-002"),
        ("gpu_part_number", "%s-895-A1" % gpu["device_id"][2:].upper()),
        ("gpu_fru_part_number", NOT_AVAILABLE),
        ("platformInfo", _na_children("chassis_serial_number", "slot_number", "tray_index", "host_id",
                                      "peer_type") + [("module_id", gpu["index"] + 1),
                                                      ("gpu_fabric_guid", NOT_AVAILABLE)]),
        ("inforom_version", [("img_version", "G520.0200.00.05"), ("oem_object", "2.1"), ("ecc_object", "7.16"),
                             ("pwr_object", NOT_AVAILABLE)]),
        ("inforom_bbx_flush", _na_children("latest_timestamp", "latest_duration")),
        ("gpu_operation_mode", _na_children("current_gom", "pending_gom")),
        ("c2c_mode", "Disabled"),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"), ("host_vgpu_mode", NOT_AVAILABLE),
                                     ("vgpu_heterogeneous_mode", NOT_AVAILABLE)]),
        ("gpu_recovery_action", "None"),
        ("gsp_firmware_version", driver_version),
        ("ibmnpu", [("relaxed_ordering_mode", NOT_AVAILABLE)]),
        ("pci", [
            ("pci_bus", bus.upper()), ("pci_device", devfn.split(".")[0].upper()), ("pci_domain", domain.upper()),
            ("pci_base_class", 3), ("pci_sub_class", 2), ("pci_device_id", pci_device_id_field(gpu)),
            ("pci_bus_id", bus_id), ("pci_sub_system_id", gpu["subsystem_id"][2:].upper()),
            ("pci_gpu_link_info", [
                ("pcie_gen", [("max_link_gen", gen), ("current_link_gen", gen), ("device_current_link_gen", gen),
                              ("max_device_link_gen", gen), ("max_host_link_gen", gen)]),
                ("link_widths", [("max_link_width", "16x"), ("current_link_width", "16x")])]),
            ("pci_bridge_chip", _na_children("bridge_chip_type", "bridge_chip_fw")),
            ("replay_counter", 0), ("replay_rollover_counter", 0), ("tx_util", "0 KB/s"), ("rx_util", "0 KB/s"),
            ("atomic_caps_outbound", NOT_AVAILABLE), ("atomic_caps_inbound", NOT_AVAILABLE)]),
        ("fan_speed", NOT_AVAILABLE),
        ("performance_state", "P0"),
        ("clocks_event_reasons", [(name, "Active" if name.endswith("gpu_idle") else "Not Active") for name in (
            "clocks_event_reason_gpu_idle", "clocks_event_reason_applications_clocks_setting",
            "clocks_event_reason_sw_power_cap", "clocks_event_reason_hw_slowdown",
            "clocks_event_reason_hw_thermal_slowdown", "clocks_event_reason_hw_power_brake_slowdown",
            "clocks_event_reason_sync_boost", "clocks_event_reason_sw_thermal_slowdown",
            "clocks_event_reason_display_clocks_setting")]),
        ("clocks_event_reasons_counters", [(name, "0 us") for name in (
            "clocks_event_reasons_counters_sw_power_cap", "clocks_event_reasons_counters_sync_boost",
            "clocks_event_reasons_counters_sw_therm_slowdown", "clocks_event_reasons_counters_hw_therm_slowdown",
            "clocks_event_reasons_counters_hw_power_brake")]),
        ("sparse_operation_mode", NOT_AVAILABLE),
        ("fb_memory_usage", [("total", "%d MiB" % gpu["memory_total_mib"]),
                             ("reserved", "%d MiB" % gpu["memory_reserved_mib"]), ("used", "%d MiB" % used_mib),
                             ("free", "%d MiB" % _memory_free_mib(gpu))]),
        ("bar1_memory_usage", [("total", "%d MiB" % gpu["bar1_total_mib"]), ("used", "1 MiB"),
                               ("free", "%d MiB" % (gpu["bar1_total_mib"] - 1))]),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"), ("free", "0 MiB")]),
        ("compute_mode", gpu["compute_mode"]),
        ("utilization", [("gpu_util", NOT_AVAILABLE if mig_on else "0 %"),
                         ("memory_util", NOT_AVAILABLE if mig_on else "0 %"),
                         ("encoder_util", "0 %"), ("decoder_util", "0 %"), ("jpeg_util", "0 %"),
                         ("ofa_util", "0 %")]),
        ("encoder_stats", [("session_count", 0), ("average_fps", 0), ("average_latency", 0)]),
        ("fbc_stats", [("session_count", 0), ("average_fps", 0), ("average_latency", 0)]),
        ("dram_encryption_mode", _na_children("current_dram_encryption", "pending_dram_encryption")),
        ("ecc_mode", [("current_ecc", "Enabled"), ("pending_ecc", "Enabled")]),
        ("ecc_errors", [
            ("volatile", _xml_ecc_block(gpu, "volatile")),
            ("aggregate", _xml_ecc_block(gpu, "aggregate")),
            ("aggregate_uncorrectable_sram_sources", [(name, 0) for name in (
                "sram_l2", "sram_sm", "sram_microcontroller", "sram_pcie", "sram_other")]),
            ("channel_repair_pending", "No"), ("tpc_repair_pending", "No"), ("unrepairable_memory", "No")]),
        ("retired_pages", _xml_retired_pages(gpu)),
        ("remapped_rows", _xml_remapped_rows(gpu)),
        ("temperature", [
            ("gpu_temp", "%d C" % gpu["temperature_c"]), ("gpu_temp_tlimit", "%d C" % (87 - gpu["temperature_c"])),
            ("gpu_temp_max_threshold", "92 C"), ("gpu_temp_slow_threshold", "89 C"),
            ("gpu_temp_max_gpu_threshold", "87 C"), ("gpu_target_temperature", NOT_AVAILABLE),
            ("memory_temp", "%d C" % (gpu["temperature_c"] + 6)), ("gpu_temp_max_mem_threshold", "95 C")]),
        ("supported_gpu_target_temp", _na_children("gpu_target_temp_min", "gpu_target_temp_max")),
        ("gpu_power_readings", [
            ("power_state", "P0"), ("average_power_draw", _power_w(gpu["power_draw_w"])),
            ("instant_power_draw", _power_w(gpu["power_draw_w"])),
            ("current_power_limit", _power_w(gpu["power_limit_w"])),
            ("requested_power_limit", _power_w(gpu["power_limit_w"])),
            ("default_power_limit", _power_w(gpu["power_limit_w"])),
            ("min_power_limit", _power_w(round(gpu["power_limit_w"] * 2 / 7, 0))),
            ("max_power_limit", _power_w(gpu["power_limit_w"]))]),
        ("gpu_memory_power_readings", _na_children("average_power_draw", "instant_power_draw")),
        ("module_power_readings", [("power_state", "P0")] + _na_children(
            "average_power_draw", "instant_power_draw", "current_power_limit", "requested_power_limit",
            "default_power_limit", "min_power_limit", "max_power_limit")),
        ("power_smoothing", NOT_AVAILABLE),
        ("power_profiles", _na_children("power_profile_requested_profiles", "power_profile_enforced_profiles")),
        ("edpp_multiplier", NOT_AVAILABLE),
        ("clocks", [("graphics_clock", "345 MHz"), ("sm_clock", "345 MHz"), ("mem_clock", "2619 MHz"),
                    ("video_clock", "765 MHz")]),
        ("applications_clocks", [("graphics_clock", "Requested functionality has been deprecated"),
                                 ("mem_clock", "Requested functionality has been deprecated")]),
        ("default_applications_clocks", [("graphics_clock", "Requested functionality has been deprecated"),
                                         ("mem_clock", "Requested functionality has been deprecated")]),
        ("deferred_clocks", [("mem_clock", NOT_AVAILABLE)]),
        ("max_clocks", [("graphics_clock", "1980 MHz"), ("sm_clock", "1980 MHz"), ("mem_clock", "2619 MHz"),
                        ("video_clock", "1965 MHz")]),
        ("max_customer_boost_clocks", [("graphics_clock", "1980 MHz")]),
        ("clock_policy", _na_children("auto_boost", "auto_boost_default")),
        ("fabric", [("state", NOT_AVAILABLE), ("status", NOT_AVAILABLE), ("cliqueId", NOT_AVAILABLE),
                    ("clusterUuid", NOT_AVAILABLE),
                    ("health", _na_children("summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
                                            "access_timeout_recovery", "incorrect_configuration",
                                            "partition_assigned"))]),
        ("supported_clocks", [("supported_mem_clock", [("value", "2619 MHz")] + [
            ("supported_graphics_clock", "%d MHz" % mhz) for mhz in range(1980, 344, -15)])]),
        ("processes", _xml_processes(gpu)),
        ("accounted_processes", []),
        ("capabilities", [("egm", "disabled")]),
    ])


def render_query_xml(gpus: list, driver_version: str, timestamp: datetime.datetime) -> str:
    """`nvidia-smi -q -x` for the given GPUs."""
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>",
             "\t<timestamp>%s</timestamp>" % timestamp.strftime("%a %b %d %H:%M:%S %Y"),
             "\t<driver_version>%s</driver_version>" % driver_version,
             "\t<cuda_version>%s</cuda_version>" % cuda_version_for(driver_version),
             "\t<attached_gpus>%d</attached_gpus>" % len(gpus)]
    for gpu in gpus:
        gpu_lines = _xml_lines(_xml_gpu(gpu, driver_version), 1)
        gpu_lines[0] = '\t<gpu id="%s">' % nvml_bus_id(gpu["pci_address"])
        lines.extend(gpu_lines)
        lines.append("")
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


def render_list(gpus: list) -> str:
    """`nvidia-smi -L`: one line per GPU, MIG devices indented below their GPU."""
    lines = []
    for gpu in gpus:
        lines.append("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        for device in gpu["mig_devices"]:
            lines.append("  MIG %s Device %2d: (UUID: %s)" % (device["profile"].ljust(11), device["index"],
                                                               device["uuid"]))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- --query-gpu

def _csv_timestamp(context: dict) -> str:
    stamp = context["timestamp"]
    return stamp.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (stamp.microsecond // 1000)


def _remap_field(key: str):
    return lambda gpu, ctx: NOT_AVAILABLE if gpu["remapped_rows_pending"] is None else (
        yes_no(gpu[key]) if isinstance(gpu[key], bool) else str(gpu[key]))


# canonical field name -> (unit or None, value function(gpu, context)); NOT_AVAILABLE renders as [N/A]
QUERY_FIELDS = {
    "timestamp": (None, lambda gpu, ctx: _csv_timestamp(ctx)),
    "driver_version": (None, lambda gpu, ctx: ctx["driver_version"]),
    "count": (None, lambda gpu, ctx: str(ctx["count"])),
    "name": (None, lambda gpu, ctx: gpu["name"]),
    "serial": (None, lambda gpu, ctx: gpu["serial"]),
    "uuid": (None, lambda gpu, ctx: gpu["uuid"]),
    "pci.bus_id": (None, lambda gpu, ctx: nvml_bus_id(gpu["pci_address"])),
    "pci.domain": (None, lambda gpu, ctx: "0x" + gpu["pci_address"].split(":")[0].upper()),
    "pci.bus": (None, lambda gpu, ctx: "0x" + gpu["pci_address"].split(":")[1].upper()),
    "pci.device": (None, lambda gpu, ctx: "0x" + gpu["pci_address"].split(":")[2].split(".")[0].upper()),
    "pci.baseClass": (None, lambda gpu, ctx: "0x3"),
    "pci.subClass": (None, lambda gpu, ctx: "0x2"),
    "pci.device_id": (None, lambda gpu, ctx: "0x" + pci_device_id_field(gpu)),
    "pci.sub_device_id": (None, lambda gpu, ctx: "0x" + gpu["subsystem_id"][2:].upper()),
    "pcie.link.gen.current": (None, lambda gpu, ctx: str(gpu["pcie_gen"])),
    "pcie.link.gen.max": (None, lambda gpu, ctx: str(gpu["pcie_gen"])),
    "pcie.link.width.current": (None, lambda gpu, ctx: "16"),
    "pcie.link.width.max": (None, lambda gpu, ctx: "16"),
    "index": (None, lambda gpu, ctx: str(gpu["index"])),
    "display_mode": (None, lambda gpu, ctx: "[Requested functionality has been deprecated]"),
    "persistence_mode": (None, lambda gpu, ctx: enabled_text(gpu["persistence_mode"])),
    "vbios_version": (None, lambda gpu, ctx: gpu["vbios_version"]),
    "fan.speed": ("%", lambda gpu, ctx: NOT_AVAILABLE),
    "pstate": (None, lambda gpu, ctx: "P0"),
    "memory.total": ("MiB", lambda gpu, ctx: str(gpu["memory_total_mib"])),
    "memory.reserved": ("MiB", lambda gpu, ctx: str(gpu["memory_reserved_mib"])),
    "memory.used": ("MiB", lambda gpu, ctx: str(gpu["memory_used_mib"])),
    "memory.free": ("MiB", lambda gpu, ctx: str(_memory_free_mib(gpu))),
    "compute_mode": (None, lambda gpu, ctx: gpu["compute_mode"]),
    "compute_cap": (None, lambda gpu, ctx: gpu["compute_cap"]),
    "utilization.gpu": ("%", lambda gpu, ctx: NOT_AVAILABLE if gpu["mig_mode_current"] else "0"),
    "utilization.memory": ("%", lambda gpu, ctx: NOT_AVAILABLE if gpu["mig_mode_current"] else "0"),
    "ecc.mode.current": (None, lambda gpu, ctx: "Enabled"),
    "ecc.mode.pending": (None, lambda gpu, ctx: "Enabled"),
    "ecc.errors.corrected.volatile.total": (None, lambda gpu, ctx: "0"),
    "ecc.errors.corrected.aggregate.total": (None, lambda gpu, ctx: "0"),
    "ecc.errors.uncorrected.volatile.dram": (None, lambda gpu, ctx: str(gpu["ecc_volatile_uncorrectable"])),
    "ecc.errors.uncorrected.volatile.total": (None, lambda gpu, ctx: str(gpu["ecc_volatile_uncorrectable"])),
    "ecc.errors.uncorrected.aggregate.dram": (None, lambda gpu, ctx: str(gpu["ecc_aggregate_uncorrectable"])),
    "ecc.errors.uncorrected.aggregate.total": (None, lambda gpu, ctx: str(gpu["ecc_aggregate_uncorrectable"])),
    "retired_pages.single_bit_ecc.count": (None, lambda gpu, ctx: NOT_AVAILABLE),
    "retired_pages.double_bit.count": (None, lambda gpu, ctx: NOT_AVAILABLE),
    "retired_pages.pending": (None, lambda gpu, ctx: yes_no(gpu.get("retired_pages_pending"))),
    "remapped_rows.correctable": (None, _remap_field("remapped_rows_correctable")),
    "remapped_rows.uncorrectable": (None, _remap_field("remapped_rows_uncorrectable")),
    "remapped_rows.pending": (None, _remap_field("remapped_rows_pending")),
    "remapped_rows.failure": (None, _remap_field("remapped_rows_failure")),
    "temperature.gpu": (None, lambda gpu, ctx: str(gpu["temperature_c"])),
    "temperature.memory": (None, lambda gpu, ctx: str(gpu["temperature_c"] + 6)),
    "power.draw": ("W", lambda gpu, ctx: "%.2f" % gpu["power_draw_w"]),
    "power.draw.average": ("W", lambda gpu, ctx: "%.2f" % gpu["power_draw_w"]),
    "power.draw.instant": ("W", lambda gpu, ctx: "%.2f" % gpu["power_draw_w"]),
    "power.limit": ("W", lambda gpu, ctx: "%.2f" % gpu["power_limit_w"]),
    "enforced.power.limit": ("W", lambda gpu, ctx: "%.2f" % gpu["power_limit_w"]),
    "power.default_limit": ("W", lambda gpu, ctx: "%.2f" % gpu["power_limit_w"]),
    "power.min_limit": ("W", lambda gpu, ctx: "%.2f" % round(gpu["power_limit_w"] * 2 / 7, 0)),
    "power.max_limit": ("W", lambda gpu, ctx: "%.2f" % gpu["power_limit_w"]),
    "clocks.current.graphics": ("MHz", lambda gpu, ctx: "345"),
    "clocks.current.sm": ("MHz", lambda gpu, ctx: "345"),
    "clocks.current.memory": ("MHz", lambda gpu, ctx: "2619"),
    "clocks.max.graphics": ("MHz", lambda gpu, ctx: "1980"),
    "mig.mode.current": (None, lambda gpu, ctx: _mig_enabled_text(gpu, "mig_mode_current")),
    "mig.mode.pending": (None, lambda gpu, ctx: _mig_enabled_text(gpu, "mig_mode_pending")),
    "gsp.mode.current": (None, lambda gpu, ctx: "Enabled"),
}

# accepted alternative spellings (nvidia-smi --help-query-gpu) -> canonical name
QUERY_FIELD_ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "pstate": "pstate", "memory.total": "memory.total", "temperature.gpu": "temperature.gpu",
    "power.draw": "power.draw", "power_draw": "power.draw", "enforced.power.limit": "enforced.power.limit",
    "mig.mode.current": "mig.mode.current", "persistence_mode": "persistence_mode",
    "retired_pages.pending": "retired_pages.pending", "driver_version": "driver_version",
}

# 595 and later add the kernel-mode driver version column (utkuozdemir L40S 595.80 capture)
KMD_VERSION_MIN_BRANCH = 595


def query_field_spec(field: str, driver_version: str):
    """(canonical name, unit, value function) for a `--query-gpu` field; KeyError if nvidia-smi rejects it."""
    if field == "kmd_version" and driver_branch(driver_version) >= KMD_VERSION_MIN_BRANCH:
        return field, None, lambda gpu, ctx: ctx["kernel_driver_version"]
    canonical = QUERY_FIELD_ALIASES.get(field, field)
    unit, value_of = QUERY_FIELDS[canonical]
    return canonical, unit, value_of


def _csv_value(raw: str, unit: str | None, with_units: bool) -> str:
    if raw == NOT_AVAILABLE:
        return "[N/A]"
    if unit and with_units:
        return "%s %s" % (raw, unit)
    return raw


def render_query_gpu_csv(gpus: list, fields: list, context: dict, header: bool = True,
                         units: bool = True) -> str:
    """`nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]`."""
    specs = [query_field_spec(field, context["driver_version"]) for field in fields]
    lines = []
    if header:
        lines.append(", ".join("%s [%s]" % (name, unit) if unit else name for name, unit, _value in specs))
    for gpu in gpus:
        lines.append(", ".join(_csv_value(value_of(gpu, context), unit, units) for _name, unit, value_of in specs))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------- default table

def render_table(gpus: list, driver_version: str, timestamp: datetime.datetime) -> str:
    """Plain `nvidia-smi` summary table (layout of the 565/590 drivers)."""
    cuda_version = cuda_version_for(driver_version)
    lines = [timestamp.strftime("%a %b %e %H:%M:%S %Y"),
             "+-----------------------------------------------------------------------------------------+",
             "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (driver_version, driver_version,
                                                                               cuda_version),
             "|-----------------------------------------+------------------------+----------------------+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    for gpu in gpus:
        name = gpu["name"][:26]
        persistence = "On" if gpu["persistence_mode"] else "Off"
        mig = "Enabled" if gpu["mig_mode_current"] else ("Disabled" if gpu["mig_capable"] else "N/A")
        usage = "%dW / %4dW" % (round(gpu["power_draw_w"]), round(gpu["power_limit_w"]))
        memory = "%dMiB / %6dMiB" % (gpu["memory_used_mib"], gpu["memory_total_mib"])
        util = "N/A" if gpu["mig_mode_current"] else "0%"
        bus_id = nvml_bus_id(gpu["pci_address"])
        lines.append("|%4d  %s%s  |%s |%21d |" % (gpu["index"], name.ljust(33 - len(persistence)), persistence,
                                                 ("%s Off" % bus_id).rjust(23), gpu["ecc_volatile_uncorrectable"]))
        lines.append("| N/A   %2dC    P0%s |%s |%8s%13s |" % (gpu["temperature_c"], usage.rjust(24), memory.rjust(23),
                                                           util, gpu["compute_mode"]))
        lines.append("|                                         |                        |%21s |" % mig)
        lines.append("+-----------------------------------------+------------------------+----------------------+")
    lines += ["                                                                                         ",
              "+-----------------------------------------------------------------------------------------+",
              "| Processes:                                                                              |",
              "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|=========================================================================================|"]
    processes = [(gpu["index"], proc) for gpu in gpus for proc in gpu.get("processes", [])]
    if not processes:
        lines.append("|  No running processes found                                                             |")
    for index, proc in processes:
        lines.append("|  %3d   N/A  N/A %10d      C   %-40s %6dMiB |" % (index, proc["pid"], proc["name"][:40],
                                                                     proc["used_memory_mib"]))
    lines.append("+-----------------------------------------------------------------------------------------+")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ commands

class Result:
    """What one nvidia-smi invocation prints and returns."""

    def __init__(self, rc: int = 0, stdout: str = "", stderr: str = ""):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr

    def __iter__(self):
        return iter((self.rc, self.stdout, self.stderr))


def nvml_init_error(kernel_version: str | None, userspace_version: str | None) -> Result | None:
    """The failure NVML reports before any query, None when the driver answers."""
    if userspace_version is None:
        return Result(RC_LIBRARY_NOT_FOUND, LIBRARY_NOT_FOUND_TEXT + "\n")
    if kernel_version is None:
        return Result(RC_DRIVER_NOT_LOADED, NO_DRIVER_TEXT + "\n\n")
    if kernel_version != userspace_version:
        text = MISMATCH_TEXT + "\n"
        if driver_branch(userspace_version) >= 580:
            text += "NVML library version: %s\n" % ".".join(userspace_version.split(".")[:2])
        return Result(RC_LIBRARY_MISMATCH, text)
    return None


def _parse_args(argv: list) -> dict:
    """The subset of nvidia-smi's options the twin supports; ValueError for anything else."""
    opts = {"query": False, "xml": False, "list": False, "query_gpu": None, "format": "", "ids": None,
            "mig": None, "reset": False, "persistence": None, "power_limit": None, "version": False,
            "mig_subcommand": None}
    args = list(argv)
    if args and args[0] == "mig":
        opts["mig_subcommand"] = args[1:]
        return opts
    while args:
        arg = args.pop(0)
        name, _sep, inline_value = arg.partition("=")

        def value():
            if inline_value:
                return inline_value
            if not args:
                raise ValueError("Option %s requires an argument" % name)
            return args.pop(0)

        if name in ("-q", "--query"):
            opts["query"] = True
        elif name in ("-x", "--xml-format"):
            opts["xml"] = True
        elif name in ("-L", "--list-gpus"):
            opts["list"] = True
        elif name == "--query-gpu":
            opts["query_gpu"] = [field.strip() for field in value().split(",") if field.strip()]
        elif name == "--format":
            opts["format"] = value()
        elif name in ("-i", "--id"):
            opts["ids"] = [item.strip() for item in value().split(",")]
        elif name in ("-mig", "--multi-instance-gpu"):
            opts["mig"] = value()
        elif name in ("-r", "--gpu-reset"):
            opts["reset"] = True
        elif name in ("-pm", "--persistence-mode"):
            opts["persistence"] = value()
        elif name in ("-pl", "--power-limit"):
            opts["power_limit"] = value()
        elif name == "--version":
            opts["version"] = True
        else:
            raise ValueError(name)
    return opts


def select_gpus(gpus: list, ids: list | None) -> list:
    """GPUs named by `-i` (index, UUID or PCI bus id); all when `ids` is None; ValueError if one is unknown."""
    if ids is None:
        return gpus
    selected = []
    for ident in ids:
        matches = [gpu for gpu in gpus if ident in (str(gpu["index"]), gpu["uuid"])
                   or ident.upper() in (nvml_bus_id(gpu["pci_address"]), gpu["pci_address"].upper())]
        if not matches:
            raise ValueError(ident)
        selected.extend(matches)
    return selected


def _lost_gpu_lines(lost: list) -> str:
    return "".join("Unable to determine the device handle for GPU%s: GPU is lost.  Reboot the system to recover "
                   "this GPU\n" % nvml_bus_id(gpu["pci_address"]) for gpu in lost)


def _set_mig_mode(gpus: list, enable: bool, root: str | None) -> Result:
    out = []
    rc = RC_SUCCESS
    for gpu in gpus:
        bus_id = nvml_bus_id(gpu["pci_address"])
        if not gpu["mig_capable"]:
            out.append("Unable to enable MIG Mode for GPU %s: Not Supported" % bus_id)
            rc = RC_NOT_SUPPORTED
            continue
        save_gpu_state_change(root, gpu["uuid"], {"mig_mode_pending": enable,
                                                  "mig_mode_current": gpu["mig_mode_current"]})
        out.append("%s MIG Mode for GPU %s" % ("Enabled" if enable else "Disabled", bus_id))
        if gpu["mig_mode_current"] != enable:
            state = "enable" if enable else "disable"
            out.append("Warning: MIG mode is in pending %s state for GPU %s:In use by another client" % (state, bus_id))
            out.append("%s is currently being used by one or more other processes (e.g. CUDA application or a "
                       "monitoring application such as another instance of nvidia-smi). Please first kill all "
                       "processes using the device and retry the command or reboot the system to make MIG mode "
                       "effective." % bus_id)
    out.append("All done.")
    return Result(rc, "\n".join(out) + "\n")


def _reset_gpus(gpus: list, root: str | None) -> Result:
    out = []
    for gpu in gpus:
        if gpu.get("processes"):
            return Result(255, "The following GPUs could not be reset:\n  GPU %s: In use by another client\n\n"
                               "1 device is currently being used by one or more other processes (e.g., Fabric "
                               "Manager, CUDA application, graphics application such as an X server, or a "
                               "monitoring application such as another instance of nvidia-smi). Please first "
                               "kill all processes using this device and all compute applications running in "
                               "the system.\n" % nvml_bus_id(gpu["pci_address"]))
        raw = next((one for one in _read_json(_node_path(HW_PATH, root), {"gpus": []})["gpus"]
                    if one["uuid"] == gpu["uuid"]), gpu)
        baseline = {key: raw.get(key) for key in ("ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable")
                    + RESET_FLAGS}
        save_gpu_state_change(root, gpu["uuid"], {"mig_mode_pending": gpu["mig_mode_pending"],
                                                  "mig_mode_current": gpu["mig_mode_pending"], "mig_devices": [],
                                                  "reset_baseline": baseline})
        out.append("GPU %s was successfully reset." % nvml_bus_id(gpu["pci_address"]))
    out.append("All done.")
    return Result(RC_SUCCESS, "\n".join(out) + "\n")


def _set_persistence(gpus: list, value: str, root: str | None) -> Result:
    enable = value in ("1", "ENABLED", "Enabled", "enabled")
    out = []
    for gpu in gpus:
        save_gpu_state_change(root, gpu["uuid"], {"persistence_mode": enable})
        out.append("%s persistence mode for GPU %s." % ("Enabled" if enable else "Disabled",
                                                        nvml_bus_id(gpu["pci_address"])))
    out.append("All done.")
    return Result(RC_SUCCESS, "\n".join(out) + "\n")


def _mig_command(gpus: list, argv: list, root: str | None) -> Result:
    """`nvidia-smi mig -cgi <profiles> -C`, `-dci`, `-dgi`, `-lgi`, `-lgip` (enough for a MIG layout)."""
    ids = None
    if "-i" in argv:
        ids = [argv[argv.index("-i") + 1]]
    targets = select_gpus(gpus, ids)
    enabled = [gpu for gpu in targets if gpu["mig_mode_current"]]
    if not enabled:
        return Result(RC_NOT_FOUND, "No MIG-enabled devices found.\n")
    if "-cgi" in argv:
        return _create_mig_instances(enabled, argv[argv.index("-cgi") + 1].split(","), "-C" in argv, root)
    if "-dci" in argv or "-dgi" in argv:
        for gpu in enabled:
            save_gpu_state_change(root, gpu["uuid"], {"mig_mode_pending": gpu["mig_mode_pending"],
                                                      "mig_mode_current": True, "mig_devices": []})
        return Result(RC_SUCCESS, "".join("Successfully destroyed GPU instance ID %2d from GPU %2d\n" % (
            dev["gpu_instance_id"], gpu["index"]) for gpu in enabled for dev in gpu["mig_devices"]))
    if "-lgi" in argv:
        rows = ["|   %d  MIG %-13s %3d  %4d         %d:%d     |" % (gpu["index"], dev["profile"],
                                                                 gpu["mig_profiles"][dev["profile"]][0],
                                                                 dev["gpu_instance_id"], dev["index"],
                                                                 gpu["mig_profiles"][dev["profile"]][1])
                for gpu in enabled for dev in gpu["mig_devices"]]
        if not rows:
            return Result(RC_NOT_FOUND, "No GPU instances found: Not Found\n")
        return Result(RC_SUCCESS, "+---------------------------------------------------+\n"
                                  "| GPU instances:                                    |\n"
                                  "| GPU   Name               Profile  Instance   Placement  |\n"
                                  "|                            ID       ID       Start:Size |\n"
                                  "|===================================================|\n" + "\n".join(rows) + "\n")
    return Result(RC_INVALID_ARGUMENT, "Invalid combination of input arguments. Please run 'nvidia-smi mig -h' "
                                       "for help.\n")


def _create_mig_instances(gpus: list, requested: list, with_compute: bool, root: str | None) -> Result:
    if MIG_CREATE_FAULT in (_read_json(_node_path(FAULTS_PATH, root), []) or []):
        profile = requested[0] if requested else "?"
        return Result(RC_OTHER_ERROR, "", "Unable to create a GPU instance on GPU %2d using profile %s: Unknown Error\n"
                      "Failed to create GPU instances: Unknown Error\n" % (gpus[0]["index"], profile))
    out = []
    for gpu in gpus:
        by_id = {str(spec[0]): name for name, spec in gpu["mig_profiles"].items()}
        devices = list(gpu["mig_devices"])
        used_slices = sum(gpu["mig_profiles"][dev["profile"]][1] for dev in devices)
        for item in requested:
            name = by_id.get(item, item.replace("MIG ", ""))
            if name not in gpu["mig_profiles"]:
                return Result(RC_INVALID_ARGUMENT, "Unable to create a GPU instance on GPU %2d using profile %s: "
                                                   "Invalid Argument\n" % (gpu["index"], item))
            profile_id, slices, memory_total_mib = gpu["mig_profiles"][name]
            if used_slices + slices > 7:
                save_gpu_state_change(root, gpu["uuid"], {"mig_devices": devices})
                return Result(RC_INVALID_ARGUMENT, "\n".join(out) + "\nUnable to create a GPU instance on GPU %2d "
                              "using profile %d: Insufficient Resources\n" % (gpu["index"], profile_id))
            used_slices += slices
            gpu_instance_id = max([dev["gpu_instance_id"] for dev in devices] + [0]) + 1
            devices.append({"index": len(devices), "gpu_instance_id": gpu_instance_id, "compute_instance_id": 0,
                            "profile": name, "memory_total_mib": memory_total_mib,
                            "uuid": _mig_uuid(gpu["uuid"], gpu_instance_id, name)})
            out.append("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)" % (
                gpu_instance_id, gpu["index"], name, profile_id))
            if with_compute:
                out.append("Successfully created compute instance ID  0 on GPU %2d GPU instance ID %2d using "
                           "profile MIG %s (ID  %d)" % (gpu["index"], gpu_instance_id, name, slices - 1 if
                                                         slices < 7 else 4))
        save_gpu_state_change(root, gpu["uuid"], {"mig_mode_pending": gpu["mig_mode_pending"],
                                                  "mig_mode_current": True, "mig_devices": devices})
    return Result(RC_SUCCESS, "\n".join(out) + "\n")


def _mig_uuid(gpu_uuid: str, gpu_instance_id: int, profile: str) -> str:
    import hashlib
    import uuid as uuidlib
    digest = hashlib.sha256(("%s/%d/%s" % (gpu_uuid, gpu_instance_id, profile)).encode()).digest()
    return "MIG-%s" % uuidlib.UUID(bytes=digest[:16])


def run(argv: list, hw: dict, kernel_version: str | None, userspace_version: str | None,
        timestamp: datetime.datetime | None = None, root: str | None = None) -> Result:
    """One nvidia-smi invocation against a node state; pure except for the settings commands that write
    `gpu-state.json` under `root`."""
    timestamp = timestamp or datetime.datetime.now()
    try:
        opts = _parse_args(argv)
    except ValueError as exc:
        return Result(RC_INVALID_ARGUMENT, "Invalid combination of input arguments. Please run 'nvidia-smi -h' "
                                           "for help.\n" if str(exc).startswith("-") else str(exc) + "\n")
    if opts["version"] and userspace_version:
        return Result(RC_SUCCESS, "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
                                  "CUDA Version        : %s\n" % (userspace_version,
                                                                  ".".join(userspace_version.split(".")[:2]),
                                                                  kernel_version or "N/A",
                                                                  cuda_version_for(userspace_version)))
    failure = nvml_init_error(kernel_version, userspace_version)
    if failure:
        return failure
    all_gpus = hw.get("gpus", [])
    lost = [gpu for gpu in all_gpus if not gpu.get("on_bus", True)]
    present = [gpu for gpu in all_gpus if gpu.get("on_bus", True)]
    try:
        gpus = select_gpus(present, opts["ids"])
    except ValueError:
        return Result(RC_NOT_FOUND, "No devices were found\n")
    result = _dispatch(opts, gpus, len(present), kernel_version, userspace_version, timestamp, root)
    if lost and opts["ids"] is None:
        result = Result(RC_GPU_IS_LOST if result.rc == RC_SUCCESS else result.rc,
                        _lost_gpu_lines(lost) + result.stdout, result.stderr)
    return result


def _dispatch(opts: dict, gpus: list, present_count: int, kernel_version: str, userspace_version: str,
              timestamp: datetime.datetime, root: str | None) -> Result:
    if opts["mig_subcommand"] is not None:
        return _mig_command(gpus, opts["mig_subcommand"], root)
    if opts["mig"] is not None:
        return _set_mig_mode(gpus, opts["mig"] in ("1", "ENABLED", "Enabled"), root)
    if opts["reset"]:
        return _reset_gpus(gpus, root)
    if opts["persistence"] is not None:
        return _set_persistence(gpus, opts["persistence"], root)
    if opts["list"]:
        return Result(RC_SUCCESS, render_list(gpus)) if gpus else Result(RC_NOT_FOUND, "No devices found.\n")
    if opts["query_gpu"] is not None:
        return _query_gpu(opts, gpus, present_count, kernel_version, userspace_version, timestamp)
    if opts["query"] and opts["xml"]:
        return Result(RC_SUCCESS, render_query_xml(gpus, userspace_version, timestamp))
    if opts["query"]:
        return Result(RC_NOT_SUPPORTED, "", "gpulab: plain-text `nvidia-smi -q` is not simulated; use -q -x\n")
    if not gpus:
        return Result(RC_NOT_FOUND, "No devices were found\n")
    return Result(RC_SUCCESS, render_table(gpus, userspace_version, timestamp))


def _query_gpu(opts: dict, gpus: list, present_count: int, kernel_version: str, userspace_version: str,
               timestamp: datetime.datetime) -> Result:
    format_words = [word.strip() for word in opts["format"].split(",") if word.strip()]
    if "csv" not in format_words:
        return Result(RC_INVALID_ARGUMENT, '"--format" option is required and must be csv for --query-* switches.\n'
                      if not format_words else 'Invalid format "%s".\n' % opts["format"])
    for field in opts["query_gpu"]:
        try:
            query_field_spec(field, userspace_version)
        except KeyError:
            return Result(RC_INVALID_ARGUMENT, 'Field "%s" is not a valid field to query.\n\n' % field)
    context = {"timestamp": timestamp, "driver_version": userspace_version, "count": present_count,
               "kernel_driver_version": kernel_version}
    return Result(RC_SUCCESS, render_query_gpu_csv(gpus, opts["query_gpu"], context,
                                                   header="noheader" not in format_words,
                                                   units="nounits" not in format_words))


def _userspace_root(root: str) -> str:
    """Where this nvidia-smi's libraries are: the root it was installed in. `/usr/bin/nvidia-smi` is the node's
    own; `/run/nvidia/driver/usr/bin/nvidia-smi` is the GPU Operator driver container's root, whose NVML it uses
    as `chroot /run/nvidia/driver nvidia-smi` does on a real node."""
    program = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    suffix = "/usr/bin/nvidia-smi"
    if not program.endswith(suffix) or program == suffix:
        return root
    prefix = program[:-len(suffix)]
    node_root = os.path.realpath(root)
    if root != "/" and (prefix == node_root or prefix.startswith(node_root + "/")):
        return prefix          # a test's node root on the host: the path already lies in it
    return os.path.join(root, prefix.lstrip("/"))


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    hw = load_node_hw(root)
    # under the twin's driver-mismatch fault the node core rewrites /proc/driver/nvidia/version (the kernel side)
    kernel_version = kernel_driver_version(_read_text(_node_path(PROC_VERSION_PATH, root)))
    result = run(argv, hw, kernel_version, userspace_driver_version(_userspace_root(root)), root=root)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.rc


if __name__ == "__main__":
    sys.exit(main())
