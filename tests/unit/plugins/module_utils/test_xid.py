# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the Xid kernel-log parser and catalog, on real kernel logs (tests/unit/fixtures/nvidia_smi)."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.xid import XID_CATALOG, parse_kernel_log, xid_severity

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")
LOG_FILES = (
    "gpud_dmesg-with-xid-119.log",
    "gpud_dmesg.decode.iso_xid13_xid43.log",
    "xid_kernel-log_lines_from_issues.txt",
)
EVENT_KEYS = {"code", "pci_address", "pid", "process", "message", "time"}


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def without_notes(text):
    """The kernel log lines of an annotated fixture: '#' lines are the collector's notes, not log."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#")) + "\n"


def issue_block(source):
    """Log lines of the block of xid_kernel-log_lines_from_issues.txt whose notes mention ``source``."""
    blocks = read_fixture("xid_kernel-log_lines_from_issues.txt").split("# ---")
    matching = [block for block in blocks if source in block]
    assert len(matching) == 1, source
    return without_notes(matching[0])


def summary(events):
    return [(event["code"], event["pci_address"], event["pid"], event["process"], event["time"]) for event in events]


# --------------------------------------------------------------------------- real logs, one per prefix style

def test_dmesg_ctime_log_with_gsp_timeouts_yields_the_five_xid_119_events():
    events = parse_kernel_log(read_fixture("gpud_dmesg-with-xid-119.log"))
    assert summary(events) == [
        (119, "0000:9b:00", 2024380, "nvidia-smi", "Sun Feb 23 16:24:18 2025"),
        (119, "0000:9b:00", 2024380, "nvidia-smi", "Sun Feb 23 16:24:24 2025"),
        (119, "0000:9b:00", 2024380, "nvidia-smi", "Sun Feb 23 16:24:30 2025"),
        (119, "0000:9b:00", 1263500, "cache_mgr_main", "Sun Feb 23 16:27:12 2025"),
        (119, "0000:9b:00", 1240590, "gpud", "Sun Feb 23 16:30:13 2025"),
    ]
    assert events[0]["message"] == ("Timeout after 6s of waiting for RPC response from GPU4 GSP! "
                                    "Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")
    assert all(set(event) == EVENT_KEYS for event in events)


def test_gsp_rpc_tables_and_call_trace_lines_are_not_folded_into_the_xid_message():
    first = parse_kernel_log(read_fixture("gpud_dmesg-with-xid-119.log"))[0]
    assert "GSP_RM_CONTROL" not in first["message"]
    assert "Call Trace" not in first["message"]


def test_dmesg_decode_iso_log_yields_the_xid_13_burst_then_xid_43_and_ignores_oom_lines():
    events = parse_kernel_log(read_fixture("gpud_dmesg.decode.iso_xid13_xid43.log"))
    assert [event["code"] for event in events] == [13] * 16 + [43]
    assert set(event["pci_address"] for event in events) == {"0000:38:00"}
    assert events[0]["time"] == "2025-01-21T04:41:44,283302+00:00"
    assert events[0]["message"] == "Graphics SM Global Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors"
    assert (events[0]["pid"], events[0]["process"]) == (None, None)  # pid='<unknown>', name=<unknown>
    assert summary(events[-1:]) == [(43, "0000:38:00", 2924364, "pt_main_thread", "2025-01-21T04:41:44,287197+00:00")]
    assert events[-1]["message"] == "Ch 00000008"


def test_syslog_lines_use_the_syslog_clock_and_find_dbe_and_retirement_failure():
    events = parse_kernel_log(issue_block("gpu-operator/issues/1146"))
    assert summary(events) == [
        (48, "0000:07:00", None, None, "Dec  2 11:38:47"),
        (64, "0000:07:00", None, None, "Dec  2 11:38:47"),
    ]
    assert events[0]["message"].startswith("An uncorrectable double bit error (DBE) has been detected on GPU")
    assert events[1]["message"].startswith("Dynamic Page Retirement: Blacklisting failed.")


def test_rm_init_adapter_failures_are_not_xid_events():
    text = issue_block("gpu-operator/issues/1146")
    assert "RmInitAdapter failed" in text
    assert all(event["code"] in (48, 64) for event in parse_kernel_log(text))


def test_dmesg_ctime_brackets_give_the_time_and_pid_name_fields_are_split():
    events = parse_kernel_log(issue_block("gpud/pull/46"))
    assert summary(events) == [
        (13, "0000:cb:00", None, None, "Fri Aug 30 11:43:09 2024"),
        (13, "0000:cb:00", None, None, "Fri Aug 30 11:43:09 2024"),
        (13, "0000:cb:00", None, None, "Fri Aug 30 11:43:09 2024"),
        (109, "0000:cb:00", 1797828, "pt_main_thread", "Fri Aug 30 11:43:14 2024"),
    ]
    assert events[3]["message"] == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"


def test_mmu_fault_continuation_lines_are_folded_into_the_xid_31_message():
    events = parse_kernel_log(issue_block("flashinfer/issues/3869"))
    assert summary(events) == [
        (13, "0000:1a:00", None, None, "19:14:43"),
        (31, "0000:9a:00", 477445, "python3", "19:15:34"),
    ]
    assert events[0]["message"].startswith("Graphics Exception: ESR 0x57e7b0=0x81e0017")
    assert events[1]["message"] == (
        "channel 0x00000002, intr 00000000. "
        "MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. "
        "Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE"
    )


def test_hand_abbreviated_xid_line_and_driver_load_line_are_not_events():
    text = issue_block("flashinfer/issues/3869")
    assert "Xid 31 PCI:0000:f0:00" in text
    assert "0000:f0:00" not in [event["pci_address"] for event in parse_kernel_log(text)]


def test_fallen_off_the_bus_without_xid_number_yields_a_code_79_event_for_that_gpu():
    events = parse_kernel_log(issue_block("NVSentinel/issues/155"))
    assert summary(events) == [
        (79, "0000:44:00", None, None, None),          # the real Xid 79 line, no prefix
        (79, "0000:b3:00.0", None, None, "1843.308145"),  # the 3-line driver message, no Xid number
    ]
    assert events[0]["message"] == "GPU has fallen off the bus"
    assert events[1]["message"] == ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
                                    "fallen off the bus and is not responding to commands.")


def test_probe_failure_and_driver_banner_after_the_fall_are_not_events():
    events = parse_kernel_log(issue_block("NVSentinel/issues/155"))
    assert not any("probe routine" in event["message"] or "loading NVIDIA" in event["message"] for event in events)


def test_plain_dmesg_seconds_since_boot_is_the_time_of_an_old_format_xid_32():
    events = parse_kernel_log(issue_block("Xid 32 on a desktop GPU"))
    assert summary(events) == [(32, "0000:01:00", None, None, "1399.140323")]
    assert events[0]["message"] == "Channel ID 00000009 intr 00800000"


def test_nvlink_xids_keep_pci_domains_other_than_0000():
    events = parse_kernel_log(issue_block("gpud/pull/1174"))
    assert summary(events) == [
        (149, "0019:01:00", None, None, None),
        (149, "0000:00:00", None, None, None),
        (145, "0018:01:00", None, None, None),
        (94, "0000:9b:00", 1234, "python3", None),
    ]
    assert events[0]["message"].startswith("NETIR Fatal XC0 i0 Link -1")
    assert events[3]["message"] == "Contained ECC error"


def test_nouveau_owning_the_device_produces_no_xid_event():
    assert parse_kernel_log(issue_block("mattshma/bigdata/issues/133")) == []


def test_whole_issue_collection_yields_every_real_xid_and_no_more():
    events = parse_kernel_log(without_notes(read_fixture("xid_kernel-log_lines_from_issues.txt")))
    assert [event["code"] for event in events] == [48, 64, 13, 13, 13, 109, 13, 31, 79, 79, 32, 149, 149, 145, 94]


# --------------------------------------------------------------------------- formats seen in the field

@pytest.mark.parametrize("line, expected_time", [
    # journalctl -k -o short-iso
    ("2024-05-01T12:00:03+0000 gpu-node-7 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=swapper/0, "
     "GPU has fallen off the bus.", "2024-05-01T12:00:03+0000"),
    # journalctl -k -o short-iso-precise
    ("2024-05-01T12:00:03.123456+00:00 gpu-node-7 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=swapper/0, "
     "GPU has fallen off the bus.", "2024-05-01T12:00:03.123456+00:00"),
    # dmesg --time-format=iso without --decode
    ("2024-05-01T12:00:03,123456+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=swapper/0, "
     "GPU has fallen off the bus.", "2024-05-01T12:00:03,123456+00:00"),
])
def test_iso_timestamps_of_journalctl_and_dmesg_are_kept_as_printed(line, expected_time):
    assert summary(parse_kernel_log(line)) == [(79, "0000:18:00", 0, "swapper/0", expected_time)]


def test_drivers_before_r470_print_the_address_without_the_pci_prefix():
    # Seen in a public paste of a 2015-era syslog: "NVRM: Xid (0000:01:00): 31, Ch 0000000b, ..."
    events = parse_kernel_log("Nov 22 18:29:55 hostname kernel: [  966.503025] NVRM: Xid (0000:01:00): 31, "
                              "Ch 0000000b, engmask 00000120, intr 10000000\n")
    assert summary(events) == [(31, "0000:01:00", None, None, "Nov 22 18:29:55")]


def test_syslog_splits_the_fallen_off_bus_message_but_the_address_is_kept():
    text = (
        "Jun  3 10:00:01 node kernel: [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "Jun  3 10:00:01 node kernel: [ 1843.308150] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "Jun  3 10:00:01 node kernel: [ 1843.308152] NVRM: fallen off the bus and is not responding to commands.\n"
    )
    events = parse_kernel_log(text)
    assert summary(events) == [(79, "0000:b3:00.0", None, None, "Jun  3 10:00:01")]
    assert events[0]["message"] == ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
                                    "fallen off the bus and is not responding to commands.")


def test_unindented_lines_of_the_fallen_off_bus_message_take_the_time_of_its_first_line():
    text = (
        "2026-12-02T14:46:39,005217+00:00 NVRM: The NVIDIA GPU 0000:ab:00.0\n"
        "NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "NVRM: fallen off the bus and is not responding to commands.\n"
    )
    assert summary(parse_kernel_log(text)) == [(79, "0000:ab:00.0", None, None, "2026-12-02T14:46:39,005217+00:00")]


def test_an_unrelated_gpu_line_long_before_the_fall_does_not_lend_its_address():
    text = (
        "[ 10.000000] NVRM: The NVIDIA GPU 0000:18:00.0\n"
        "[ 11.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n"
        "[ 12.000000] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver\n"
        "[ 13.000000] nvidia-uvm: Loaded the UVM driver, major device number 511.\n"
        "[ 99.000000] NVRM: fallen off the bus and is not responding to commands.\n"
    )
    assert summary(parse_kernel_log(text)) == [(79, None, None, None, "99.000000")]


def test_a_real_xid_79_for_the_same_gpu_replaces_the_driver_message():
    text = (
        "[ 512.100000] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n"
        "[ 512.100100] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
    )
    assert summary(parse_kernel_log(text)) == [(79, "0000:18:00", 1234, "python3", "512.100100")]


def test_single_line_fallen_off_bus_message_names_its_gpu():
    events = parse_kernel_log("[ 512.100000] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n")
    assert summary(events) == [(79, "0000:18:00.0", None, None, "512.100000")]


def test_fallen_off_bus_words_outside_driver_lines_are_not_events():
    assert parse_kernel_log("my-app[123]: retrying, the GPU has fallen off the bus again?\n") == []


def test_indented_xid_lines_are_events_of_their_own_not_continuations():
    text = ("    NVRM: Xid (PCI:0000:18:00): 48, pid=12, name=python3, An uncorrectable double bit error (DBE)\n"
            "    NVRM: Xid (PCI:0000:18:00): 63, pid=12, name=python3, Row Remapper: New row marked for remapping\n")
    assert [event["code"] for event in parse_kernel_log(text)] == [48, 63]


def test_xid_line_without_message_still_yields_its_code():
    assert summary(parse_kernel_log("NVRM: Xid (PCI:0000:18:00): 79\n")) == [(79, "0000:18:00", None, None, None)]


def test_empty_log_has_no_events():
    assert parse_kernel_log("") == []
    assert parse_kernel_log(None) == []


# --------------------------------------------------------------------------- robustness

_XID_LINE_RE = re.compile(r"NVRM: Xid \(")
_FALL_RE = re.compile(r"NVRM:.*fallen off the bus", re.S)


@pytest.mark.parametrize("name", LOG_FILES)
def test_truncated_logs_return_events_without_crashing_or_inventing_any(name):
    text = without_notes(read_fixture(name))
    step = max(1, len(text) // 150)
    for length in list(range(0, len(text), step)) + [len(text)]:
        partial = text[:length]
        events = parse_kernel_log(partial)
        possible = len(_XID_LINE_RE.findall(partial)) + len(_FALL_RE.findall(partial))
        assert len(events) <= possible
        for event in events:
            assert set(event) == EVENT_KEYS
            assert isinstance(event["code"], int)


@pytest.mark.parametrize("name", LOG_FILES)
def test_every_xid_code_in_the_real_logs_is_in_the_catalog(name):
    for event in parse_kernel_log(without_notes(read_fixture(name))):
        assert event["code"] in XID_CATALOG


# --------------------------------------------------------------------------- catalog

REQUIRED_CODES = (13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120,
                  140, 143, 144, 145, 146, 147, 148, 149, 150, 154)


def test_catalog_covers_the_xids_an_operator_meets():
    assert set(REQUIRED_CODES) <= set(XID_CATALOG)


@pytest.mark.parametrize("code", sorted(XID_CATALOG))
def test_every_catalog_entry_has_a_name_a_known_severity_and_an_actionable_remedy(code):
    entry = XID_CATALOG[code]
    assert set(entry) == {"name", "severity", "remedy"}
    assert entry["name"]
    assert entry["severity"] in ("critical", "error", "warning", "info")
    assert len(entry["remedy"]) > 20


@pytest.mark.parametrize("code, severity", [
    (79, "critical"), (48, "critical"), (95, "critical"), (140, "critical"),
    (63, "warning"), (64, "error"), (94, "error"), (119, "error"), (120, "error"),
    (74, "error"), (149, "error"),
    (13, "warning"), (31, "warning"), (43, "info"), (45, "info"),
])
def test_severity_follows_the_published_catalog(code, severity):
    assert xid_severity(code) == severity


def test_unknown_xid_codes_are_warnings():
    assert xid_severity(999) == "warning"
    assert xid_severity(1) == "warning"


def test_fallen_off_bus_remedy_says_to_drain_and_power_cycle():
    remedy = XID_CATALOG[79]["remedy"].lower()
    assert "drain" in remedy and "power-cycle" in remedy
