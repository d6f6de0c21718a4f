# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import driver_state as ds

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernel")


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as fixture_file:
        return fixture_file.read()


def output_blocks(name):
    """Outputs in an annotated fixture: runs of non-'#' lines, in file order."""
    blocks, current = [], []
    for line in fixture_text(name).splitlines():
        if line.startswith("#") or not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


# ---------------------------------------------------------------- /proc/driver/nvidia/version


@pytest.mark.parametrize("name, version, flavor, arch", [
    ("proc-driver-nvidia-version_open_x86_64_565.57.01_ubuntu2404.txt", "565.57.01", "open", "x86_64"),
    ("proc-driver-nvidia-version_open_x86_64_525.60.11_arch-dkms.txt", "525.60.11", "open", "x86_64"),
    ("proc-driver-nvidia-version_open_aarch64_35.3.1_jetson-orin.txt", "35.3.1", "open", "aarch64"),
    ("proc-driver-nvidia-version_proprietary_x86_64_580.173.02_truenas.txt", "580.173.02", "proprietary", "x86_64"),
    ("proc-driver-nvidia-version_proprietary_x86_64_384.98_ubuntu.txt", "384.98", "proprietary", "x86_64"),
])
def test_proc_version_gives_version_and_flavor_of_real_builds(name, version, flavor, arch):
    assert ds.parse_proc_version(fixture_text(name)) == {"version": version, "flavor": flavor, "arch": arch}


def test_unrecognised_proc_version_gives_nulls():
    assert ds.parse_proc_version("GCC version:  gcc version 12.2.0 (GCC)\n") == {
        "version": None, "flavor": None, "arch": None}


# ---------------------------------------------------------------- modinfo


def test_truncated_open_modinfo_gives_version_license_and_file():
    info = ds.parse_modinfo(fixture_text("modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt"))
    assert info["version"] == "590.44.01"
    assert info["license"] == "Dual MIT/GPL"
    assert info["filename"] == "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko"
    assert info["vermagic"] == "6.8.0-90-generic SMP preempt mod_unload modversions"
    assert info["firmware"] == ["nvidia/590.44.01/gsp_tu10x.bin", "nvidia/590.44.01/gsp_ga10x.bin"]
    assert "signer" not in info
    assert ds.flavor_from_license(info["license"]) == "open"


def test_truncated_proprietary_modinfo_is_proprietary():
    info = ds.parse_modinfo(fixture_text("modinfo-nvidia_proprietary_430.40_manjaro_TRUNCATED.txt"))
    assert info["version"] == "430.40"
    assert info["filename"] == "/lib/modules/5.3.6-1-MANJARO/extramodules/nvidia.ko.gz"
    assert info["vermagic"] == "5.3.6-1-MANJARO SMP preempt mod_unload modversions"
    assert ds.flavor_from_license(info["license"]) == "proprietary"
    assert len(info["alias"]) == 4


def test_signed_modinfo_gives_signer():
    info = ds.parse_modinfo(fixture_text("modinfo-nvidia-uvm_open_535.129.03_signed-mok_TRUNCATED.txt"))
    assert info["signer"] == "localhost.localdomain Secure Boot Module Signature key"
    assert info["sig_id"] == "PKCS#7"
    assert info["sig_hashalgo"] == "sha512"
    assert info["version"] == "535.129.03"
    assert info["name"] == "nvidia_uvm"


def test_modinfo_signature_continuation_lines_join_the_key():
    # kmod prints the signature hex over several tab-indented lines.
    text = "sig_key:\t6E:9B:01\nsignature:\t30:65:02:\n\t\tAB:CD\nname:\tnvidia\n"
    info = ds.parse_modinfo(text)
    assert info["sig_key"] == "6E:9B:01"
    assert info["signature"] == "30:65:02:AB:CD"
    assert info["name"] == "nvidia"


def test_modinfo_error_text_gives_no_fields():
    assert ds.parse_modinfo("modinfo: ERROR: Module nvidia not found.\n") == {}


# ---------------------------------------------------------------- lsmod, /proc/modules


def test_lsmod_of_t4_host_lists_standard_companions():
    modules = ds.parse_module_list(fixture_text("lsmod-grep-nvidia_tesla-t4_debian12-gce.txt"))
    nvidia = [module for module in modules if module["name"] == "nvidia"][0]
    assert nvidia["size"] == 54059008
    assert nvidia["refcount"] == 13
    assert nvidia["used_by"] == ["nvidia_uvm", "nvidia_modeset"]
    assert ds.companion_modules(module["name"] for module in modules) == ["nvidia_uvm", "nvidia_drm", "nvidia_modeset"]


def test_lsmod_of_vgpu_host_lists_vgpu_vfio_only():
    modules = ds.parse_module_list(fixture_text("lsmod-grep-nvidia_vgpu-host.txt"))
    assert [module["name"] for module in modules] == ["nvidia_vgpu_vfio", "nvidia", "mdev", "drm", "vfio"]
    assert ds.companion_modules(module["name"] for module in modules) == ["nvidia_vgpu_vfio"]


def test_proc_modules_format_with_trailing_comma_and_dash():
    # /proc/modules layout (name size refcount used_by state address taint), as the kernel prints it.
    text = ("nvidia_uvm 4661248 2 - Live 0x0000000000000000 (POE)\n"
            "nvidia 54059008 13 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n")
    modules = ds.parse_module_list(text)
    assert modules[0]["used_by"] == []
    assert modules[1]["used_by"] == ["nvidia_uvm", "nvidia_modeset"]


def test_lsmod_header_is_skipped():
    text = "Module                  Size  Used by\nnvidia_drm             16384  0\n"
    assert [module["name"] for module in ds.parse_module_list(text)] == ["nvidia_drm"]


# ---------------------------------------------------------------- kernel_module assembly


def test_loaded_module_takes_version_and_flavor_from_proc():
    proc = ds.parse_proc_version(fixture_text("proc-driver-nvidia-version_open_x86_64_565.57.01_ubuntu2404.txt"))
    modinfo = ds.parse_modinfo(fixture_text("modinfo-nvidia_proprietary_430.40_manjaro_TRUNCATED.txt"))
    module = ds.build_kernel_module(True, proc, modinfo, ["nvidia_uvm"])
    assert module["version"] == "565.57.01"
    assert module["flavor"] == "open"
    assert module["companions"] == ["nvidia_uvm"]
    assert module["license"] == "NVIDIA"


def test_unloaded_module_takes_version_and_flavor_from_modinfo():
    modinfo = ds.parse_modinfo(fixture_text("modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt"))
    module = ds.build_kernel_module(False, None, modinfo, ["nvidia_uvm"])
    assert module == {
        "loaded": False, "version": "590.44.01", "flavor": "open", "companions": [], "signer": None,
        "sig_key": None, "license": "Dual MIT/GPL", "filename": "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko",
        "vermagic": "6.8.0-90-generic SMP preempt mod_unload modversions",
    }


def test_kernel_and_userspace_versions_that_differ_are_a_mismatch():
    loaded = {"loaded": True, "version": "580.173.02"}
    assert ds.kernel_userspace_mismatch(loaded, {"driver_version": "580.178", "error_kind": None})
    assert not ds.kernel_userspace_mismatch(loaded, {"driver_version": "580.173.02", "error_kind": None})
    assert ds.kernel_userspace_mismatch(loaded, {"driver_version": None, "error_kind": "version_mismatch"})
    assert not ds.kernel_userspace_mismatch({"loaded": False, "version": "580.178"},
                                            {"driver_version": "570.1", "error_kind": "no_driver"})


# ---------------------------------------------------------------- mokutil


def test_every_real_sb_state_output_is_understood():
    parsed = [ds.parse_sb_state(block) for block in output_blocks("mokutil_outputs.txt")]
    assert parsed == [
        {"enabled": True, "setup_mode": False},       # SecureBoot enabled
        {"enabled": False, "setup_mode": False},      # enabled, but shim validation disabled
        {"enabled": False, "setup_mode": False},      # SecureBoot disabled
        {"enabled": False, "setup_mode": True},       # disabled, Platform is in Setup Mode
        None,                                         # Cannot determine secure boot state.
        {"enabled": None, "setup_mode": None},        # EFI variables are not supported (legacy BIOS)
        {"enabled": False, "setup_mode": None},       # UEFI without Secure Boot
        None,                                         # "MokNew is empty" is no sb-state answer
        {"enabled": True, "setup_mode": False},       # issue sample, Fedora 44
        {"enabled": None, "setup_mode": None},        # issue sample, Ubuntu VM
        {"enabled": False, "setup_mode": False},      # issue sample, Ubuntu 23.04
    ]


def test_enrolled_key_list_gives_subject_and_colon_free_fingerprint():
    keys = ds.parse_mok_list(fixture_text("mokutil-list-enrolled_ubuntu-canonical-ca_CONSTRUCTED.txt"))
    assert keys == [{
        "subject": "C=GB, ST=Isle of Man, L=Douglas, O=Canonical Ltd., CN=Canonical Ltd. Master Certificate Authority",
        "fingerprint": "76a092065800bf376901c372cd55a90e1fded2e0",
    }]
    assert ds.common_name(keys[0]["subject"]) == "Canonical Ltd. Master Certificate Authority"


def test_pending_key_with_spaced_subject_gives_its_common_name():
    keys = ds.parse_mok_list(fixture_text("mokutil-list-new_module-signing-key_CONSTRUCTED.txt"))
    assert keys[0]["fingerprint"] == "3f2c9a7104be5de811906ac3d72e48b50cf1a962"
    assert ds.common_name(keys[0]["subject"]) == "localhost.localdomain Secure Boot Module Signature key"


@pytest.mark.parametrize("text", ["MokNew is empty\n", "", "MokListRT is empty\n"])
def test_empty_mok_lists_give_no_keys(text):
    assert ds.parse_mok_list(text) == []


def test_short_mok_list_form_is_understood():
    text = "76a092065800bf376901c372cd55a90e1fded2e0 Canonical Ltd. Master Certificate Authority\n"
    assert ds.parse_mok_list(text) == [{"subject": "Canonical Ltd. Master Certificate Authority",
                                        "fingerprint": "76a092065800bf376901c372cd55a90e1fded2e0"}]


# ---------------------------------------------------------------- dkms status


def test_every_dkms_status_sample_parses_in_both_formats():
    entries = ds.parse_dkms_status(fixture_text("dkms-status_nvidia_samples.txt"))
    assert entries == [
        {"module": "nvidia", "version": "535.86.05", "kernel": "6.5.0-060500rc5-generic", "arch": "x86_64",
         "state": "installed", "warning": None},
        {"module": "rtl8852bu", "version": "1.19.3", "kernel": "6.5.0-060500rc5-generic", "arch": "x86_64",
         "state": "installed", "warning": None},
        {"module": "nvidia", "version": "390.157", "kernel": None, "arch": None, "state": "added", "warning": None},
        {"module": "vboxhost", "version": "7.0.8_OSE", "kernel": "6.4.1-zen2-1-zen", "arch": "x86_64",
         "state": "installed", "warning": None},
        {"module": "vhba-module", "version": "20211218", "kernel": "6.4.1-zen2-1-zen", "arch": "x86_64",
         "state": "built", "warning": None},
        {"module": "nvidia", "version": "460.91.03", "kernel": "5.11.0-36-generic", "arch": "x86_64",
         "state": "installed", "warning": None},
        {"module": "i915-sriov-dkms", "version": "2025.03.26", "kernel": "6.11.11-2-pve", "arch": "x86_64",
         "state": "installed", "warning": "WARNING! Diff between built and installed module!"},
    ]
    assert [entry["version"] for entry in ds.nvidia_dkms_entries(entries)] == ["535.86.05", "390.157", "460.91.03"]


def test_dkms_formats_from_source_notes_parse():
    # Format strings documented in the fixture's notes (dkms v2.8.4 "$m, $v: $status", weak installs, 3.2 suffix).
    text = ("nvidia, 470.223.02: added\n"
            "nvidia-current/525.147.05, 6.1.0-18-amd64, x86_64: installed-weak from 6.1.0-17-amd64\n"
            "nvidia/550.54.15, 6.8.0-31-generic, x86_64: installed (Original modules exist)\n")
    assert ds.parse_dkms_status(text) == [
        {"module": "nvidia", "version": "470.223.02", "kernel": None, "arch": None, "state": "added", "warning": None},
        {"module": "nvidia-current", "version": "525.147.05", "kernel": "6.1.0-18-amd64", "arch": "x86_64",
         "state": "installed-weak", "warning": None},
        {"module": "nvidia", "version": "550.54.15", "kernel": "6.8.0-31-generic", "arch": "x86_64",
         "state": "installed", "warning": "Original modules exist"},
    ]


# ---------------------------------------------------------------- sysfs PCI, efivars


def make_pci_function(root, address, vendor, device, class_id, driver=None):
    device_dir = root / "devices" / address
    device_dir.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", class_id)):
        (device_dir / name).write_text(value + "\n")
    if driver:
        driver_dir = root / "drivers" / driver
        driver_dir.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(driver_dir), str(device_dir)), str(device_dir / "driver"))


def test_sysfs_pci_tree_gives_nvidia_gpus_and_switches_with_their_drivers(tmp_path):
    make_pci_function(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200", "nvidia")
    make_pci_function(tmp_path, "0000:3b:00.0", "0x10de", "0x20b5", "0x030200", "vfio-pci")
    make_pci_function(tmp_path, "0000:65:00.0", "0x10de", "0x1e07", "0x030000", "nouveau")
    make_pci_function(tmp_path, "0000:65:00.1", "0x10de", "0x10f7", "0x040300", "snd_hda_intel")  # HDMI audio
    make_pci_function(tmp_path, "0000:07:00.0", "0x10de", "0x22a3", "0x068000")  # NVSwitch, no driver
    make_pci_function(tmp_path, "0000:00:1f.0", "0x8086", "0xa1c1", "0x060100", "lpc_ich")
    devices = ds.read_pci_devices(str(tmp_path / "devices"))
    assert devices == [
        {"address": "0000:07:00.0", "vendor_id": "0x10de", "device_id": "0x22a3", "class_id": "0x068000", "driver": "none"},
        {"address": "0000:18:00.0", "vendor_id": "0x10de", "device_id": "0x2330", "class_id": "0x030200", "driver": "nvidia"},
        {"address": "0000:3b:00.0", "vendor_id": "0x10de", "device_id": "0x20b5", "class_id": "0x030200", "driver": "vfio-pci"},
        {"address": "0000:65:00.0", "vendor_id": "0x10de", "device_id": "0x1e07", "class_id": "0x030000", "driver": "nouveau"},
    ]


def test_missing_sysfs_pci_dir_gives_no_devices(tmp_path):
    assert ds.read_pci_devices(str(tmp_path / "absent")) == []


def test_efivar_value_byte_follows_four_attribute_bytes(tmp_path):
    secure_boot = tmp_path / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
    secure_boot.write_bytes(b"\x06\x00\x00\x00\x01")
    setup_mode = tmp_path / "SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c"
    setup_mode.write_bytes(b"\x06\x00\x00\x00\x00")
    assert ds.parse_efivar_bool(secure_boot.read_bytes()) is True
    assert ds.parse_efivar_bool(setup_mode.read_bytes()) is False
    assert ds.parse_efivar_bool(b"\x06\x00\x00") is None
    assert ds.parse_efivar_bool(None) is None


# ---------------------------------------------------------------- small helpers


def test_device_nodes_sort_gpu_nodes_first_in_numeric_order():
    paths = ["/dev/nvidia10", "/dev/nvidiactl", "/dev/nvidia2", "/dev/nvidia-uvm"]
    assert sorted(paths, key=ds.device_node_sort_key) == [
        "/dev/nvidia2", "/dev/nvidia10", "/dev/nvidia-uvm", "/dev/nvidiactl"]


def test_nvml_library_version_comes_from_the_versioned_file_name():
    assert ds.nvml_library_version_from_filename("libnvidia-ml.so.550.54.15") == "550.54.15"
    assert ds.nvml_library_version_from_filename("libnvidia-ml.so.580.82") == "580.82"
    assert ds.nvml_library_version_from_filename("libnvidia-ml.so.1") is None
    assert ds.nvml_library_version_from_filename("libcuda.so.550.54.15") is None
