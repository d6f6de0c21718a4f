# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.diagnosis import (
    ALL_SUBSETS,
    diagnose,
    resolve_gather_subset,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.xid import parse_kernel_log

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernel")
RELEASE = "5.15.0-76-generic"

ENROLLED_CANONICAL_CA = {
    "subject": "C=GB, ST=Isle of Man, L=Douglas, O=Canonical Ltd., CN=Canonical Ltd. Master Certificate Authority",
    "fingerprint": "76a092065800bf376901c372cd55a90e1fded2e0",
}
MODULE_SIGNING_KEY = {
    "subject": "O = localhost.localdomain, CN = localhost.localdomain Secure Boot Module Signature key",
    "fingerprint": "3f2c9a7104be5de811906ac3d72e48b50cf1a962",
}


def a100(index, bus_id, uuid):
    return {
        "index": index, "uuid": uuid, "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": bus_id,
        "memory_total_mib": 81920, "memory_used_mib": 0, "persistence_mode": True, "compute_mode": "Default",
        "mig_mode_current": False, "mig_mode_pending": False, "mig_devices": [],
        "ecc_volatile_uncorrectable": 0, "ecc_aggregate_uncorrectable": 0, "retired_pages_pending": False,
        "remapped_rows_pending": False, "remapped_rows_failure": False, "temperature_c": 31,
        "power_draw_w": 62.4, "power_limit_w": 400.0,
    }


def healthy_facts():
    """Two A100s on an Ubuntu DKMS node with Secure Boot on and a signed, loaded open module."""
    return {
        "pci_devices": [
            {"address": "0000:07:00.0", "vendor_id": "0x10de", "device_id": "0x20b2", "class_id": "0x030200", "driver": "nvidia"},
            {"address": "0000:0f:00.0", "vendor_id": "0x10de", "device_id": "0x20b2", "class_id": "0x030200", "driver": "nvidia"},
        ],
        "nouveau_loaded": False,
        "kernel_module": {
            "loaded": True, "version": "535.129.03", "flavor": "open", "companions": ["nvidia_uvm", "nvidia_modeset"],
            "signer": "localhost.localdomain Secure Boot Module Signature key", "sig_key": "5A:1E:0F:93",
            "license": "Dual MIT/GPL", "filename": "/lib/modules/%s/updates/dkms/nvidia.ko" % RELEASE,
            "vermagic": "%s SMP mod_unload modversions" % RELEASE,
        },
        "userspace": {"nvidia_smi_path": "/usr/bin/nvidia-smi", "driver_version": "535.129.03", "cuda_version": "12.2",
                      "nvml_ok": True, "error": None, "error_kind": None, "nvml_library_version": None},
        "version_mismatch": False,
        "device_nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0},
                         {"path": "/dev/nvidia1", "major": 195, "minor": 1},
                         {"path": "/dev/nvidiactl", "major": 195, "minor": 255}],
        "gpus": [a100(0, "00000000:07:00.0", "GPU-8b8b1d0f-4c6a-2f8d-a1b0-0d4b2e1c9a11"),
                 a100(1, "00000000:0F:00.0", "GPU-2c51ab7e-9e3b-77a2-04c1-5d0f9b2a6e33")],
        "gpu_count": 2,
        "secure_boot": {"enabled": True, "setup_mode": False, "source": "mokutil"},
        "mok": {"enrolled": [ENROLLED_CANONICAL_CA, MODULE_SIGNING_KEY], "pending": []},
        "dkms": [{"module": "nvidia", "version": "535.129.03", "kernel": RELEASE, "arch": "x86_64",
                  "state": "installed", "warning": None}],
        "kernel": {"release": RELEASE, "headers_present": True, "headers_path": "/lib/modules/%s/build" % RELEASE},
        "xid_events": [],
        "diagnosis": [],
    }


def module_not_loaded(facts):
    facts["kernel_module"].update(loaded=False, companions=[])
    facts["userspace"].update(nvml_ok=False, driver_version=None, cuda_version=None, error_kind="no_driver",
                              error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                    "Make sure that the latest NVIDIA driver is installed and running.")
    facts["gpus"], facts["gpu_count"], facts["device_nodes"] = [], 0, []
    return facts


def codes(entries):
    return [item["code"] for item in entries]


def only(entries, code):
    found = [item for item in entries if item["code"] == code]
    assert len(found) == 1, entries
    return found[0]


def test_healthy_node_has_no_diagnosis():
    assert diagnose(healthy_facts()) == []


# ---------------------------------------------------------------- layer 0


def test_node_without_nvidia_pci_function_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    facts["pci_devices"] = []
    result = diagnose(facts)
    finding = only(result, "no_nvidia_pci_device")
    assert (finding["layer"], finding["severity"]) == (0, "critical")
    assert "module_not_loaded" not in codes(result)  # no GPU is the cause, not the module


def test_driver_checks_stay_silent_when_pci_shows_no_gpu_but_speak_when_pci_was_not_read():
    facts = module_not_loaded(healthy_facts())
    facts["pci_devices"] = []
    facts["kernel"]["headers_present"] = False
    facts["kernel"]["headers_path"] = None
    assert not set(codes(diagnose(facts))) & {"module_not_loaded", "kernel_headers_missing"}
    without_pci = codes(diagnose(facts, gathered=ALL_SUBSETS - {"pci"}))
    assert "module_not_loaded" in without_pci
    assert "kernel_headers_missing" in without_pci


def test_nvswitch_alone_is_not_a_gpu():
    facts = module_not_loaded(healthy_facts())
    facts["pci_devices"] = [{"address": "0000:07:00.0", "vendor_id": "0x10de", "device_id": "0x22a3",
                             "class_id": "0x068000", "driver": "none"}]
    assert "no_nvidia_pci_device" in codes(diagnose(facts))


def test_gpu_bound_to_vfio_is_reported_as_info_and_not_counted_missing():
    facts = healthy_facts()
    facts["pci_devices"][1]["driver"] = "vfio-pci"
    facts["gpus"], facts["gpu_count"] = facts["gpus"][:1], 1
    result = diagnose(facts)
    assert codes(result) == ["gpu_bound_to_vfio"]
    assert result[0]["severity"] == "info"
    assert "0000:0f:00.0" in result[0]["message"]


# ---------------------------------------------------------------- layer 1


def test_gpu_taken_by_nouveau_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    facts["nouveau_loaded"] = True
    for device in facts["pci_devices"]:
        device["driver"] = "nouveau"
    finding = only(diagnose(facts), "nouveau_bound")
    assert finding["layer"] == 1
    assert "0000:07:00.0, 0000:0f:00.0" in finding["message"]
    assert "blacklist nouveau" in finding["remedy"]


def test_unloaded_module_is_diagnosed_with_the_module_on_disk():
    facts = module_not_loaded(healthy_facts())
    finding = only(diagnose(facts), "module_not_loaded")
    assert (finding["layer"], finding["severity"]) == (1, "critical")
    assert "535.129.03" in finding["message"] and "updates/dkms/nvidia.ko" in finding["message"]
    assert "modprobe nvidia" in finding["remedy"]


def test_unloaded_module_without_module_file_names_the_kernel():
    facts = module_not_loaded(healthy_facts())
    facts["kernel_module"].update(filename=None, version=None, signer=None, license=None, vermagic=None)
    assert RELEASE in only(diagnose(facts), "module_not_loaded")["message"]


def test_gpu_left_without_driver_by_a_loaded_module_is_diagnosed():
    facts = healthy_facts()
    facts["pci_devices"][1]["driver"] = "none"
    facts["gpus"], facts["gpu_count"] = facts["gpus"][:1], 1
    result = diagnose(facts)
    assert "0000:0f:00.0" in only(result, "gpu_not_bound_to_nvidia")["message"]
    assert "0000:0f:00.0" in only(result, "gpu_count_mismatch")["message"]


def test_loaded_module_without_control_device_is_diagnosed():
    facts = healthy_facts()
    facts["device_nodes"] = []
    finding = only(diagnose(facts), "device_nodes_missing")
    assert "nvidia-modprobe" in finding["remedy"]


def test_unsigned_module_refused_by_secure_boot_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    facts["kernel_module"].update(signer=None, sig_key=None)
    finding = only(diagnose(facts), "secure_boot_unsigned_module")
    assert (finding["layer"], finding["severity"]) == (1, "critical")
    assert "mokutil --import" in finding["remedy"]


def test_module_signed_by_unenrolled_key_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    facts["mok"]["enrolled"] = [ENROLLED_CANONICAL_CA]
    finding = only(diagnose(facts), "secure_boot_signer_not_enrolled")
    assert finding["severity"] == "critical"
    assert "localhost.localdomain Secure Boot Module Signature key" in finding["message"]


def test_module_signed_by_pending_key_says_reboot_and_confirm_in_mokmanager():
    facts = module_not_loaded(healthy_facts())
    facts["mok"] = {"enrolled": [ENROLLED_CANONICAL_CA], "pending": [MODULE_SIGNING_KEY]}
    finding = only(diagnose(facts), "secure_boot_signer_not_enrolled")
    assert finding["severity"] == "error"
    assert "pending" in finding["message"]
    assert "Reboot" in finding["remedy"] and "MokManager" in finding["remedy"]
    assert "mok_enrollment_pending" not in codes(diagnose(facts))


def test_signer_is_not_judged_when_mok_lists_are_unknown():
    facts = module_not_loaded(healthy_facts())
    facts["secure_boot"]["source"] = "efivars"  # mokutil missing: Secure Boot state known, MOK lists not
    facts["mok"] = {"enrolled": [], "pending": []}
    result = diagnose(facts, unavailable=[{"source": "mokutil", "layer": 1, "reason": "mokutil not found"}])
    assert "secure_boot_signer_not_enrolled" not in codes(result)
    assert "data_source_unavailable" in codes(result)


def test_signer_is_not_judged_when_mokutil_could_not_list_the_keys():
    facts = module_not_loaded(healthy_facts())
    facts["mok"] = {"enrolled": [], "pending": []}  # what a failed or timed-out --list-enrolled leaves
    failed = [{"source": "mokutil", "layer": 1, "reason": "mokutil --list-enrolled failed (rc 255): MOK keys unknown"}]
    assert "secure_boot_signer_not_enrolled" in codes(diagnose(facts))
    assert "secure_boot_signer_not_enrolled" not in codes(diagnose(facts, unavailable=failed))


def test_module_signed_by_enrolled_key_is_not_a_secure_boot_problem():
    facts = module_not_loaded(healthy_facts())
    result = codes(diagnose(facts))
    assert "secure_boot_signer_not_enrolled" not in result
    assert "secure_boot_unsigned_module" not in result


def test_signature_is_not_judged_when_secure_boot_is_off():
    facts = module_not_loaded(healthy_facts())
    facts["secure_boot"] = {"enabled": False, "setup_mode": False, "source": "mokutil"}
    facts["kernel_module"].update(signer=None)
    assert "secure_boot_unsigned_module" not in codes(diagnose(facts))


def test_pending_mok_on_running_node_warns_about_the_next_boot():
    facts = healthy_facts()
    facts["mok"]["pending"] = [MODULE_SIGNING_KEY]
    finding = only(diagnose(facts), "mok_enrollment_pending")
    assert finding["severity"] == "warning"
    assert "localhost.localdomain Secure Boot Module Signature key" in finding["message"]


def test_dkms_module_not_built_for_running_kernel_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    facts["dkms"] = [{"module": "nvidia", "version": "535.129.03", "kernel": "5.15.0-75-generic", "arch": "x86_64",
                      "state": "installed", "warning": None},
                     {"module": "nvidia", "version": "535.129.03", "kernel": RELEASE, "arch": "x86_64",
                      "state": "built", "warning": None}]
    finding = only(diagnose(facts), "dkms_not_built_for_running_kernel")
    assert finding["severity"] == "critical"
    assert RELEASE in finding["message"] and "built" in finding["message"]
    assert "dkms install nvidia/535.129.03 -k %s" % RELEASE in finding["remedy"]


def test_dkms_gap_is_a_warning_while_a_module_is_loaded():
    facts = healthy_facts()
    facts["dkms"] = [{"module": "nvidia", "version": "550.54.15", "kernel": None, "arch": None,
                      "state": "added", "warning": None}]
    assert only(diagnose(facts), "dkms_not_built_for_running_kernel")["severity"] == "warning"


def test_missing_headers_on_dkms_node_are_diagnosed():
    facts = healthy_facts()
    facts["kernel"].update(headers_present=False, headers_path=None)
    finding = only(diagnose(facts), "kernel_headers_missing")
    assert "linux-headers-%s" % RELEASE in finding["remedy"]


def test_missing_headers_do_not_matter_for_a_loaded_prebuilt_module():
    facts = healthy_facts()
    facts["dkms"] = []
    facts["kernel"].update(headers_present=False, headers_path=None)
    assert diagnose(facts) == []


# ---------------------------------------------------------------- layer 2


def test_mismatch_between_kernel_and_userspace_is_diagnosed():
    facts = healthy_facts()
    facts["kernel_module"]["version"] = "580.173.02"
    facts["userspace"].update(nvml_ok=False, driver_version=None, error_kind="version_mismatch",
                              error="Failed to initialize NVML: Driver/library version mismatch",
                              nvml_library_version="580.178")
    facts["gpus"], facts["gpu_count"], facts["version_mismatch"] = [], 0, True
    finding = only(diagnose(facts), "version_mismatch")
    assert (finding["layer"], finding["severity"]) == (2, "critical")
    assert "580.173.02" in finding["message"] and "580.178" in finding["message"]
    assert "Reboot" in finding["remedy"]


def test_nvml_that_cannot_reach_the_driver_is_diagnosed():
    facts = module_not_loaded(healthy_facts())
    finding = only(diagnose(facts), "nvml_cannot_talk_to_driver")
    assert "couldn't communicate" in finding["message"]


def test_other_nvml_failure_is_diagnosed():
    facts = healthy_facts()
    facts["userspace"].update(nvml_ok=False, error_kind="other", error="No devices were found")
    facts["gpus"], facts["gpu_count"] = [], 0
    assert "No devices were found" in only(diagnose(facts), "nvml_error")["message"]


def test_missing_nvidia_smi_is_diagnosed():
    facts = healthy_facts()
    facts["userspace"].update(nvidia_smi_path=None, nvml_ok=False, driver_version=None, error_kind="not_found",
                              error="nvidia-smi not found or not executable (PATH)")
    facts["gpus"], facts["gpu_count"] = [], 0
    result = diagnose(facts)
    assert codes(result) == ["nvidia_smi_not_found"]


def test_gpu_missing_from_nvml_is_diagnosed():
    facts = healthy_facts()
    facts["gpus"], facts["gpu_count"] = facts["gpus"][:1], 1
    finding = only(diagnose(facts), "gpu_count_mismatch")
    assert "PCI shows 2" in finding["message"] and "NVML reports 1" in finding["message"]
    assert "0000:0f:00.0" in finding["message"]


def test_mig_mode_waiting_for_reset_is_diagnosed():
    facts = healthy_facts()
    facts["gpus"][1]["mig_mode_pending"] = True
    finding = only(diagnose(facts), "mig_pending_reset")
    assert "GPU 1" in finding["message"] and "Disabled, Enabled is pending" in finding["message"]
    assert "nvidia-smi -i 1 -r" in finding["remedy"]


def test_uncorrectable_ecc_errors_are_diagnosed():
    facts = healthy_facts()
    facts["gpus"][0].update(ecc_volatile_uncorrectable=2, ecc_aggregate_uncorrectable=5)
    finding = only(diagnose(facts), "ecc_uncorrectable")
    assert finding["severity"] == "error"
    assert "2 uncorrectable" in finding["message"] and "5 over its lifetime" in finding["message"]


def test_lifetime_only_ecc_errors_are_a_warning():
    facts = healthy_facts()
    facts["gpus"][0].update(ecc_aggregate_uncorrectable=1)
    assert only(diagnose(facts), "ecc_uncorrectable")["severity"] == "warning"


def test_pending_page_retirement_is_diagnosed():
    facts = healthy_facts()
    facts["gpus"][0]["retired_pages_pending"] = True
    assert "GPU 0" in only(diagnose(facts), "retired_pages_pending")["message"]


def test_pending_row_remapping_is_diagnosed():
    facts = healthy_facts()
    facts["gpus"][1]["remapped_rows_pending"] = True
    assert "GPU 1" in only(diagnose(facts), "remapped_rows_pending")["message"]


def test_failed_row_remapping_asks_for_rma():
    facts = healthy_facts()
    facts["gpus"][0]["remapped_rows_failure"] = True
    finding = only(diagnose(facts), "remapped_rows_failure")
    assert finding["severity"] == "critical" and "RMA" in finding["remedy"]


def xid_events_from_fixture():
    with open(os.path.join(FIXTURES, "xid_kernel-log_lines_from_issues.txt")) as log_file:
        return parse_kernel_log(log_file.read())


def test_gpu_fallen_off_the_bus_is_a_critical_hardware_finding():
    facts = healthy_facts()
    facts["xid_events"] = [event for event in xid_events_from_fixture() if event["code"] == 79]
    result = diagnose(facts)
    findings = [item for item in result if item["code"] == "xid_79"]
    assert findings and all(item["severity"] == "critical" and item["layer"] == 0 for item in findings)
    assert any("0000:44:00" in item["message"] for item in findings)
    assert result[0]["code"] == "xid_79"  # layer 0 sorts first


def test_each_xid_code_and_gpu_gives_one_finding_with_a_count():
    facts = healthy_facts()
    facts["xid_events"] = [event for event in xid_events_from_fixture() if event["code"] == 13]
    findings = [item for item in diagnose(facts) if item["code"] == "xid_13"]
    by_address = dict((item["message"].split(" on ")[1].split(",")[0], item) for item in findings)
    assert "3 time(s)" in by_address["0000:cb:00"]["message"]
    assert "1 time(s)" in by_address["0000:1a:00"]["message"]


def test_every_xid_in_real_log_lines_gets_its_code():
    facts = healthy_facts()
    facts["xid_events"] = xid_events_from_fixture()
    found = set(item["code"] for item in diagnose(facts))
    assert set(["xid_13", "xid_31", "xid_32", "xid_48", "xid_64", "xid_79", "xid_94", "xid_109",
                "xid_145", "xid_149"]) <= found
    assert only(diagnose(facts), "xid_48")["severity"] == "critical"


def test_unknown_xid_still_gets_a_finding_with_a_lookup_remedy():
    facts = healthy_facts()
    facts["xid_events"] = [{"code": 999, "pci_address": "0000:07:00", "pid": None, "process": None,
                            "message": "future Xid", "time": None}]
    finding = only(diagnose(facts), "xid_999")
    assert "999" in finding["remedy"]


# ---------------------------------------------------------------- plumbing


def test_unavailable_sources_are_reported_as_info():
    unavailable = [{"source": "mokutil", "layer": 1, "reason": "mokutil not found: MOK keys unknown"}]
    result = diagnose(healthy_facts(), unavailable=unavailable)
    assert result == [{"layer": 1, "code": "data_source_unavailable", "severity": "info",
                       "message": "mokutil: mokutil not found: MOK keys unknown",
                       "remedy": "Install or permit 'mokutil' to get these facts; the facts it gives are null."}]


def test_findings_are_ordered_by_layer_then_severity():
    facts = module_not_loaded(healthy_facts())
    facts["kernel"].update(headers_present=False, headers_path=None)
    facts["pci_devices"].append({"address": "0000:3b:00.0", "vendor_id": "0x10de", "device_id": "0x20b2",
                                 "class_id": "0x030200", "driver": "vfio-pci"})
    result = diagnose(facts)
    assert [(item["layer"], item["code"]) for item in result] == [
        (0, "gpu_bound_to_vfio"),
        (1, "module_not_loaded"),
        (1, "kernel_headers_missing"),
        (2, "nvml_cannot_talk_to_driver"),
    ]


def test_subsets_not_gathered_are_not_diagnosed():
    facts = healthy_facts()
    facts["pci_devices"], facts["dkms"] = [], []
    facts["kernel_module"]["loaded"] = False
    assert diagnose(facts, gathered=["nvml", "xid"]) == []


def test_diagnose_does_not_change_the_facts():
    facts = module_not_loaded(healthy_facts())
    before = copy.deepcopy(facts)
    diagnose(facts)
    assert facts == before


@pytest.mark.parametrize("requested, expected", [
    (["all"], ALL_SUBSETS),
    (["!xid"], ALL_SUBSETS - set(["xid"])),
    (["all", "!dkms", "!xid"], ALL_SUBSETS - set(["dkms", "xid"])),
    (["pci", "kernel"], frozenset(["pci", "kernel"])),
    (["!all", "nvml"], frozenset(["nvml"])),
])
def test_gather_subset_works_like_setup(requested, expected):
    assert resolve_gather_subset(requested) == expected


def test_invalid_gather_subset_names_the_bad_entry():
    with pytest.raises(ValueError, match="gpu"):
        resolve_gather_subset(["all", "!gpu"])


def gsp_timeout_events():
    """The Xid 119 lines of a real dmesg -T (GPU at 9b:00, GSP RPC timeouts)."""
    with open(os.path.join(FIXTURES, "gpud_dmesg-with-xid-119.log")) as log_file:
        return [event for event in parse_kernel_log(log_file.read()) if event["code"] == 119]


def test_mig_gpu_without_instances_after_a_gsp_timeout_is_case_6_with_the_reset_named():
    facts = healthy_facts()
    facts["gpus"][1].update(pci_bus_id="00000000:9B:00.0", mig_mode_current=True, mig_mode_pending=True,
                            mig_devices=[])
    facts["xid_events"] = gsp_timeout_events()
    assert facts["xid_events"]
    finding = only(diagnose(facts), "mig_create_failed")
    assert finding["severity"] == "error" and "GPU 1" in finding["message"]
    assert "NVML_ERROR_UNKNOWN" in finding["message"] and "Xid 119" in finding["message"]
    assert "nvidia-smi -i 1 -r" in finding["remedy"] and "-cgi" in finding["remedy"]


def test_a_gsp_timeout_on_another_gpu_or_a_mig_gpu_with_its_instances_is_not_case_6():
    facts = healthy_facts()
    facts["gpus"][0].update(mig_mode_current=True, mig_mode_pending=True, mig_devices=[])
    facts["xid_events"] = gsp_timeout_events()
    assert not [item for item in diagnose(facts) if item["code"] == "mig_create_failed"]
    facts["gpus"][0].update(pci_bus_id="00000000:9B:00.0", mig_devices=[{"index": 0, "profile": "3g.40gb"}])
    assert not [item for item in diagnose(facts) if item["code"] == "mig_create_failed"]
