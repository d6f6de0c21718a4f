# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import driver_install as driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import parse_modinfo

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))
SIGNER = "gpuops.nvidia module signing key"


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as stream:
        return stream.read()


def test_the_runbook_command_line():
    argv = driver.installer_argv("/var/lib/gpuops/runfiles/r.run", "580.95.05", "open",
                                 signing_key="/k/MOK.priv", signing_certificate="/k/MOK.der")
    assert argv == ["sh", "/var/lib/gpuops/runfiles/r.run", "--silent", "--dkms", "--no-drm",
                    "--kernel-module-type=open", "--module-signing-secret-key=/k/MOK.priv",
                    "--module-signing-public-key=/k/MOK.der"]


def test_older_runfiles_get_the_options_they_know():
    assert "--kernel-module-build-directory=kernel-open" in driver.installer_argv("r.run", "550.54.15", "open")
    assert not [arg for arg in driver.installer_argv("r.run", "550.54.15", "proprietary") if "kernel-module" in arg]
    argv = driver.installer_argv("r.run", "580.95.05", "open", dkms=False, no_drm=False,
                                 kernel_release="6.8.0-49-generic", running_release="6.8.0-45-generic",
                                 extra_args=["--skip-module-load"])
    assert argv == ["sh", "r.run", "--silent", "--kernel-module-type=open", "--kernel-name=6.8.0-49-generic",
                    "--skip-module-load"]


@pytest.mark.parametrize("version, sha256, errors", [
    ("580.95.05", "a" * 64, 0), ("580.95", None, 0), ("latest", None, 1), ("580.95.05", "xyz", 1), ("r580", "0" * 63, 2),
])
def test_request_validation(version, sha256, errors):
    assert len(driver.validate_request(version, sha256)) == errors


def test_a_malformed_version_is_named_by_the_module_option():
    assert driver.validate_request("latest") == [
        "version 'latest' is not a full NVIDIA driver version (branch.minor[.patch], e.g. 580.95.05)"]


def test_signing_with_dkms_before_520_is_refused():
    assert driver.request_problems("515.105.01", True, True)
    assert not driver.request_problems("515.105.01", False, True)
    assert not driver.request_problems("580.95.05", True, True)


def on_disk(modinfo_text, userspace, loaded=None):
    info = parse_modinfo(modinfo_text)
    return driver.installed_state(userspace, info.get("version"), info.get("license"), info.get("signer"), loaded)


def test_a_node_at_the_request_has_no_differences():
    state = on_disk(fixture("kernel", "modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt"), "590.44.01")
    assert state["module_flavor"] == "open"
    assert driver.differences(state, "590.44.01", "open", None) == []


def test_differences_name_what_is_off():
    state = on_disk(fixture("kernel", "modinfo-nvidia_proprietary_430.40_manjaro_TRUNCATED.txt"), "430.40")
    assert driver.differences(state, "430.40", "open", None) == ["kernel module is the proprietary flavour"]
    assert driver.differences(state, "580.95.05", "open", None) == [
        "userspace driver is 430.40", "kernel module for the target kernel is 430.40"]
    bare = driver.installed_state(None, None, None, None, None)
    assert driver.differences(bare, "580.95.05", "open", SIGNER) == [
        "userspace driver is not installed", "kernel module for the target kernel is not built"]


def test_a_module_signed_by_another_key_is_a_difference():
    state = on_disk(fixture("kernel", "modinfo-nvidia-uvm_open_535.129.03_signed-mok_TRUNCATED.txt"), "535.129.03")
    assert driver.differences(state, "535.129.03", "open", SIGNER) == [
        "kernel module is signed by localhost.localdomain Secure Boot Module Signature key, not %s" % SIGNER]
    assert driver.differences(state, "535.129.03", "open",
                              "localhost.localdomain Secure Boot Module Signature key") == []


def test_next_boot_expectation():
    assert driver.next_boot("580.95.05", "open", SIGNER, None) == (
        True, {"driver_version": "580.95.05", "kernel_module_type": "open", "signer": SIGNER})
    assert driver.next_boot("580.95.05", "open", None, "580.95.05")[0] is False


def test_the_record_keeps_the_previous_install_for_a_rollback():
    state = driver.installed_state("570.172.08", "570.172.08", "Dual MIT/GPL", None, "570.172.08")
    first = driver.new_record(None, state, "580.95.05", "runfile", "open", SIGNER, "ab" * 32, "2026-12-03T03:00:00Z")
    assert first["previous"] == {"version": "570.172.08", "method": "unknown", "kernel_module_type": "open"}
    second = driver.new_record(first, state, "590.44.01", "runfile", "open", SIGNER, "cd" * 32, "2026-12-04T03:00:00Z")
    assert second["previous"] == {"version": "580.95.05", "method": "runfile", "kernel_module_type": "open"}
    assert driver.new_record(None, driver.installed_state(None, None, None, None, None), "580.95.05", "runfile",
                             "open", None, None, "now")["previous"] is None


def test_gpu_processes_from_real_captures():
    processes = driver.parse_gpu_processes(fixture("nvidia_smi", "telegraf_dual_a5000-v13.xml"))
    assert [process["gpu_bus_id"] for process in processes] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert processes[0] == {"gpu_bus_id": "00000000:81:00.0", "pid": 100477, "type": "C",
                            "name": "/root/src/llama.cpp/build/bin/llama-server", "used_memory_mib": 22430}
    assert driver.parse_gpu_processes(fixture("nvidia_smi", "telegraf_a100-sxm4-v12.xml")) == []
    assert driver.parse_gpu_processes("not xml") == []
