# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real module main() on a fake host: a tmp_path tree for /sys, /proc, /dev and /lib/modules (the path
constants of nvidia/node_facts.py, which gathers for the module, point there) and shell scripts on PATH that print
real fixture outputs in place of nvidia-smi, mokutil, modinfo, dkms, lsmod and dmesg. Gathering and parsing are
the real code.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import node_facts
from ansible_collections.gpuops.nvidia.plugins.modules import nvidia_driver_facts
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernel"))
RELEASE = os.uname()[2]
EFI_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
T4_LSMOD = "lsmod-grep-nvidia_tesla-t4_debian12-gce.txt"
A100_XML = "telegraf_a100-sxm4-v12.xml"
A100_MIG_LIST = "nvidia-smi-L_a100-sxm4-80gb_CONSTRUCTED.txt"
SIGNED_MODINFO = "modinfo-nvidia-uvm_open_535.129.03_signed-mok_TRUNCATED.txt"
OPEN_MODINFO = "modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt"
ENROLLED = "mokutil-list-enrolled_ubuntu-canonical-ca_CONSTRUCTED.txt"
PENDING = "mokutil-list-new_module-signing-key_CONSTRUCTED.txt"
NOT_LOADED_TEXT = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                   "Make sure that the latest NVIDIA driver is installed and running.\n")


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as fixture_file:
        return fixture_file.read()


def error_text_block(first_line):
    """The output in nvidia-smi_error_texts.txt that starts with first_line (its non-'#' lines up to a '#')."""
    lines = fixture_text("nvidia-smi_error_texts.txt").splitlines()
    start = lines.index(first_line)
    block = []
    for line in lines[start:]:
        if line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block) + "\n"


def kernel_log_without_nvidia():
    """The real dmesg --decode --time-format=iso capture minus its NVRM lines: an ordinary, Xid-free log."""
    text = fixture_text("gpud_dmesg.decode.iso_xid13_xid43.log")
    return "".join(line + "\n" for line in text.splitlines() if "NVRM" not in line)


class FakeHost:
    """A host tree under tmp_path plus fake tools; every tool call is appended to calls.log."""

    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path / "host"
        self.bin = tmp_path / "bin"
        self.outputs = tmp_path / "outputs"
        self.calls_log = tmp_path / "calls.log"
        for directory in (self.root, self.bin, self.outputs):
            directory.mkdir()
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("PATH", str(self.bin))
        for constant, relative in (("SYSFS_PCI", "sys/bus/pci/devices"), ("SYSFS_MODULE", "sys/module"),
                                   ("SYSFS_EFI", "sys/firmware/efi"), ("PROC_MODULES", "proc/modules"),
                                   ("PROC_DRIVER_VERSION", "proc/driver/nvidia/version"), ("DEV_DIR", "dev"),
                                   ("LIB_MODULES", "lib/modules")):
            monkeypatch.setattr(node_facts, constant, str(self.root / relative))
        monkeypatch.setattr(node_facts, "NVML_LIBRARY_DIRS", (str(self.root / "usr/lib/x86_64-linux-gnu"),))
        monkeypatch.setattr(node_facts, "C_LIBRARY_HEADER", str(self.root / "usr/include/stdio.h"))
        (self.root / "sys/bus/pci/devices").mkdir(parents=True)
        (self.root / "sys/module").mkdir(parents=True)
        (self.root / "dev").mkdir()

    # ---- files
    def write(self, relative, text):
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def pci_gpu(self, address, device_id, driver):
        device_dir = self.root / "sys/bus/pci/devices" / address
        device_dir.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", device_id), ("class", "0x030200")):
            (device_dir / name).write_text(value + "\n")
        if driver:
            driver_dir = self.root / "sys/bus/pci/drivers" / driver
            driver_dir.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(str(driver_dir), str(device_dir)), str(device_dir / "driver"))

    def char_devices(self, *names_and_minors):
        """NVIDIA character devices (195, minor); without CAP_MKNOD, links to /dev/null (also a char device)."""
        for name, minor in names_and_minors:
            path = str(self.root / "dev" / name)
            try:
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(195, minor))
            except (OSError, PermissionError):
                os.symlink("/dev/null", path)

    def device_node(self, name):
        """What the module must report for a node made by char_devices()."""
        path = str(self.root / "dev" / name)
        rdev = os.stat(path).st_rdev
        return {"path": path, "major": os.major(rdev), "minor": os.minor(rdev)}

    def loaded_open_driver(self, version):
        """The nvidia modules loaded, the real open-module /proc version line with version, /dev/nvidia0 and nvidiactl."""
        self.write("proc/modules", LOADED_MODULES)
        self.write("proc/driver/nvidia/version",
                   fixture_text("proc-driver-nvidia-version_open_x86_64_565.57.01_ubuntu2404.txt")
                   .replace("565.57.01", version))
        self.char_devices(("nvidia0", 0), ("nvidiactl", 255))

    def headers(self):
        (self.root / "lib/modules" / RELEASE / "build").mkdir(parents=True)

    def nvml_library(self, version):
        """libnvidia-ml.so.1 -> libnvidia-ml.so.<version>, as the driver's packages and the runfile install it."""
        library_dir = self.root / "usr/lib/x86_64-linux-gnu"
        library_dir.mkdir(parents=True, exist_ok=True)
        (library_dir / ("libnvidia-ml.so." + version)).write_text("")
        os.symlink("libnvidia-ml.so." + version, str(library_dir / "libnvidia-ml.so.1"))

    def efivars(self, secure_boot, setup_mode):
        efivars = self.root / "sys/firmware/efi/efivars"
        efivars.mkdir(parents=True)
        (efivars / ("SecureBoot-" + EFI_GUID)).write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if secure_boot else b"\x00"))
        (efivars / ("SetupMode-" + EFI_GUID)).write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if setup_mode else b"\x00"))

    # ---- tools
    def tool(self, name, responses, default_rc=0):
        """Fake tool printing a prepared output per argument string ('' = no arguments); rc per response."""
        cases = []
        for args, (text, rc) in responses.items():
            output_file = self.outputs / ("%s_%d.out" % (name, len(cases)))
            output_file.write_text(text)
            cases.append('  "%s") /bin/cat "%s"; exit %d ;;' % (args, output_file, rc))
        script = self.bin / name
        script.write_text("#!/bin/sh\necho \"%s $*\" >> \"%s\"\ncase \"$*\" in\n%s\n  *) exit %d ;;\nesac\n"
                          % (name, self.calls_log, "\n".join(cases), default_rc))
        script.chmod(0o755)

    def calls(self):
        return self.calls_log.read_text().splitlines() if self.calls_log.exists() else []

    def run(self, capsys, **args):
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                nvidia_driver_facts.main()
        return json.loads(capsys.readouterr().out)


@pytest.fixture
def host(tmp_path, monkeypatch):
    return FakeHost(tmp_path, monkeypatch)


def codes(facts):
    return [item["code"] for item in facts["diagnosis"]]


def finding(facts, code):
    return [item for item in facts["diagnosis"] if item["code"] == code][0]


def proc_modules(*lines):
    return "".join("%s Live 0x0000000000000000 (POE)\n" % line for line in lines)


LOADED_MODULES = proc_modules("nvidia_uvm 4661248 2 -", "nvidia_drm 16384 0 -", "nvidia_modeset 1347584 0 -",
                              "nvidia 54059008 13 nvidia_uvm,nvidia_modeset,")
UNRELATED_MODULES = proc_modules("drm_kms_helper 200704 1 -", "drm 638976 2 drm_kms_helper,")


def healthy_a100_mig_host(host):
    """The telegraf A100-SXM4-80GB (535.54.03, MIG enabled, 4 MIG devices) as a healthy DKMS node."""
    host.pci_gpu("0000:01:00.0", "0x20b2", "nvidia")
    host.loaded_open_driver("535.54.03")  # the version of the XML's driver
    host.headers()
    host.tool("nvidia-smi", {"-q -x": (fixture_text(A100_XML), 0), "-L": (fixture_text(A100_MIG_LIST), 0)})
    host.tool("modinfo", {"nvidia": (fixture_text(OPEN_MODINFO).replace("590.44.01", "535.54.03"), 0)})
    host.tool("mokutil", {"--sb-state": ("SecureBoot enabled\n", 0), "--list-enrolled": (fixture_text(ENROLLED), 0),
                          "--list-new": ("", 0)})
    host.tool("dkms", {"status": ("nvidia/535.54.03, %s, x86_64: installed\n" % RELEASE, 0)})
    host.tool("dmesg", {"--time-format=iso": (kernel_log_without_nvidia(), 0)})


def test_healthy_a100_mig_node_has_full_facts_and_no_diagnosis(host, capsys):
    healthy_a100_mig_host(host)
    result = host.run(capsys)
    facts = result["ansible_facts"]["nvidia_driver"]
    assert result["changed"] is False
    assert facts["diagnosis"] == []
    assert facts["pci_devices"] == [{"address": "0000:01:00.0", "vendor_id": "0x10de", "device_id": "0x20b2",
                                     "class_id": "0x030200", "driver": "nvidia"}]
    assert facts["kernel_module"]["loaded"] is True
    assert facts["kernel_module"]["version"] == "535.54.03"
    assert facts["kernel_module"]["flavor"] == "open"
    assert facts["kernel_module"]["companions"] == ["nvidia_uvm", "nvidia_drm", "nvidia_modeset"]
    assert facts["kernel_module"]["license"] == "Dual MIT/GPL"
    assert facts["userspace"] == {"nvidia_smi_path": str(host.bin / "nvidia-smi"), "driver_version": "535.54.03",
                                  "cuda_version": "12.2", "nvml_ok": True, "error": None, "error_kind": None,
                                  "nvml_library_version": None}
    assert facts["version_mismatch"] is False
    assert facts["gpu_count"] == 1
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["uuid"], gpu["pci_bus_id"]) == (
        "NVIDIA A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298", "00000000:01:00.0")
    assert gpu["mig_mode_current"] is True and gpu["mig_mode_pending"] is True
    assert [(mig["index"], mig["gpu_instance_id"], mig["profile"], mig["memory_total_mib"]) for mig in gpu["mig_devices"]] == [
        (0, 3, "2g.20gb", 19968), (1, 4, "2g.20gb", 19968), (2, 5, "2g.20gb", 19968), (3, 6, "2g.20gb", 19968)]
    assert gpu["mig_devices"][0]["uuid"] == "MIG-00000000-0000-0000-0000-000000000000"
    assert set(gpu) == set(node_facts.GPU_FACT_KEYS)
    assert facts["device_nodes"] == [host.device_node("nvidia0"), host.device_node("nvidiactl")]
    assert facts["secure_boot"] == {"enabled": True, "setup_mode": False, "source": "mokutil"}
    assert facts["mok"]["enrolled"][0]["fingerprint"] == "76a092065800bf376901c372cd55a90e1fded2e0"
    assert facts["mok"]["pending"] == []
    assert facts["dkms"] == [{"module": "nvidia", "version": "535.54.03", "kernel": RELEASE, "arch": "x86_64",
                              "state": "installed", "warning": None}]
    assert facts["kernel"]["headers_present"] is True
    assert "gcc" in facts["kernel"]["build_tools_missing"]   # no compiler on this host's PATH
    assert facts["xid_events"] == []
    smi_calls = [call for call in host.calls() if call.startswith("nvidia-smi")]
    assert smi_calls == ["nvidia-smi -q -x", "nvidia-smi -L"]  # -L only because MIG is enabled


def test_facts_have_exactly_the_contract_keys(host, capsys):
    healthy_a100_mig_host(host)
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert sorted(facts) == sorted([
        "pci_devices", "nouveau_loaded", "kernel_module", "userspace", "version_mismatch", "device_nodes", "gpus",
        "gpu_count", "secure_boot", "mok", "dkms", "kernel", "xid_events", "diagnosis"])
    assert sorted(facts["kernel_module"]) == sorted(["loaded", "version", "flavor", "companions", "signer",
                                                     "sig_key", "license", "filename", "vermagic"])
    assert sorted(facts["userspace"]) == sorted(["nvidia_smi_path", "driver_version", "cuda_version", "nvml_ok",
                                                 "error", "error_kind", "nvml_library_version"])
    assert sorted(facts["gpus"][0]["mig_devices"][0]) == sorted(
        ["index", "gpu_instance_id", "compute_instance_id", "memory_total_mib", "profile", "uuid"])


def test_device_nodes_are_character_devices_with_nvidia_major(host, capsys):
    host.char_devices(("nvidia0", 0), ("nvidiactl", 255))
    if os.path.islink(str(host.root / "dev/nvidia0")):
        pytest.skip("creating character devices needs CAP_MKNOD")
    (host.root / "dev/nvidia-fake-regular-file").write_text("")
    facts = host.run(capsys, gather_subset=["kernel"])["ansible_facts"]["nvidia_driver"]
    assert [(node["path"].rsplit("/", 1)[-1], node["major"], node["minor"]) for node in facts["device_nodes"]] == [
        ("nvidia0", 195, 0), ("nvidiactl", 195, 255)]


def test_check_mode_gathers_the_same_facts(host, capsys):
    healthy_a100_mig_host(host)
    facts = host.run(capsys, _ansible_check_mode=True)["ansible_facts"]["nvidia_driver"]
    assert facts["gpu_count"] == 1 and facts["diagnosis"] == []


def test_xid_in_kernel_log_is_reported_and_diagnosed(host, capsys):
    healthy_a100_mig_host(host)
    host.tool("dmesg", {"--time-format=iso": (fixture_text("gpud_dmesg.decode.iso_xid13_xid43.log"), 0)})
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert set(event["code"] for event in facts["xid_events"]) == set([13, 43])
    assert "16 time(s)" in finding(facts, "xid_13")["message"]
    assert "xid_43" in codes(facts)


def test_gpus_that_still_answer_are_reported_when_one_gpu_is_lost(host, capsys):
    """After an Xid 79 nvidia-smi exits 15, names the lost GPU before the XML and still reports the others."""
    healthy_a100_mig_host(host)
    lost = ("Unable to determine the device handle for GPU00000000:02:00.0: GPU is lost.  "
            "Reboot the system to recover this GPU\n")
    host.tool("nvidia-smi", {"-q -x": (lost + fixture_text(A100_XML), 15), "-L": (fixture_text(A100_MIG_LIST), 0)})
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert facts["userspace"]["nvml_ok"] is True and facts["userspace"]["driver_version"] == "535.54.03"
    assert "GPU is lost" in facts["userspace"]["error"]
    assert "GPU is lost" in finding(facts, "nvml_error")["message"]


def test_driver_not_loaded_is_diagnosed(host, capsys):
    host.pci_gpu("0000:18:00.0", "0x2330", None)
    host.write("proc/modules", UNRELATED_MODULES)
    host.headers()
    host.tool("nvidia-smi", {"-q -x": (NOT_LOADED_TEXT, 9)})
    host.tool("modinfo", {"nvidia": (fixture_text(OPEN_MODINFO), 0)})
    host.tool("mokutil", {"--sb-state": ("SecureBoot disabled\n", 1)})
    host.tool("dkms", {"status": ("nvidia/590.44.01, 6.8.0-88-generic, x86_64: installed\n", 0)})
    host.tool("dmesg", {"--time-format=iso": (kernel_log_without_nvidia(), 0)})
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["kernel_module"]["loaded"] is False
    assert facts["kernel_module"]["version"] == "590.44.01"  # the on-disk module's
    assert facts["kernel_module"]["flavor"] == "open"
    assert facts["pci_devices"][0]["driver"] == "none"
    assert facts["userspace"]["nvml_ok"] is False and facts["userspace"]["error_kind"] == "no_driver"
    assert facts["secure_boot"] == {"enabled": False, "setup_mode": False, "source": "mokutil"}
    assert facts["gpus"] == [] and facts["device_nodes"] == []
    assert codes(facts) == ["module_not_loaded", "dkms_not_built_for_running_kernel", "nvml_cannot_talk_to_driver"]
    assert "590.44.01" in finding(facts, "module_not_loaded")["message"]


def test_version_mismatch_from_real_580_texts_is_diagnosed(host, capsys):
    """TrueNAS issue: /proc says 580.173.02, NVML library is 580.178; no /proc/modules, so lsmod is used."""
    host.pci_gpu("0000:01:00.0", "0x2204", "nvidia")
    host.write("proc/driver/nvidia/version",
               fixture_text("proc-driver-nvidia-version_proprietary_x86_64_580.173.02_truenas.txt"))
    host.char_devices(("nvidia0", 0), ("nvidiactl", 255))
    mismatch = error_text_block("Failed to initialize NVML: Driver/library version mismatch")
    host.tool("nvidia-smi", {"-q -x": (mismatch, 18)})
    host.tool("lsmod", {"": (fixture_text(T4_LSMOD), 0)})
    host.tool("modinfo", {"nvidia": ("modinfo: ERROR: Module nvidia not found.\n", 1)})
    os.symlink("/usr/bin/timeout", str(host.bin / "timeout"))  # commands then run under timeout(1)
    facts = host.run(capsys, gather_subset=["!dkms", "!xid", "!secure_boot"])["ansible_facts"]["nvidia_driver"]
    assert facts["kernel_module"]["loaded"] is True
    assert facts["kernel_module"]["version"] == "580.173.02"
    assert facts["kernel_module"]["flavor"] == "proprietary"
    assert facts["kernel_module"]["companions"] == ["nvidia_uvm", "nvidia_drm", "nvidia_modeset"]
    assert facts["kernel_module"]["filename"] is None
    assert facts["userspace"]["error_kind"] == "version_mismatch"
    assert facts["userspace"]["nvml_library_version"] == "580.178"
    assert facts["version_mismatch"] is True
    assert codes(facts) == ["version_mismatch"]
    assert "580.173.02" in facts["diagnosis"][0]["message"] and "580.178" in facts["diagnosis"][0]["message"]
    assert "lsmod " in host.calls()


def test_mismatch_before_580_names_the_userspace_version_from_the_nvml_library_file(host, capsys):
    """Drivers before 580 print only 'Driver/library version mismatch': libnvidia-ml.so.1's target says the rest."""
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    host.loaded_open_driver("550.54.14")
    host.nvml_library("550.54.15")
    host.tool("nvidia-smi", {"-q -x": ("Failed to initialize NVML: Driver/library version mismatch\n", 18)})
    facts = host.run(capsys, gather_subset=["!dkms", "!xid", "!secure_boot"])["ansible_facts"]["nvidia_driver"]
    assert facts["userspace"]["nvml_library_version"] == "550.54.15"
    assert facts["version_mismatch"] is True
    message = finding(facts, "version_mismatch")["message"]
    assert "550.54.14" in message and "550.54.15" in message


def secure_boot_host(host, pending_text):
    host.pci_gpu("0000:18:00.0", "0x2330", None)
    host.write("proc/modules", UNRELATED_MODULES)
    host.headers()
    host.efivars(secure_boot=True, setup_mode=False)
    host.tool("nvidia-smi", {"-q -x": (NOT_LOADED_TEXT, 9)})
    host.tool("modinfo", {"nvidia": (fixture_text(SIGNED_MODINFO), 0)})
    host.tool("mokutil", {"--sb-state": ("SecureBoot enabled\n", 0), "--list-enrolled": (fixture_text(ENROLLED), 0),
                          "--list-new": (pending_text, 0)})
    host.tool("dkms", {"status": ("nvidia/535.129.03, %s, x86_64: installed\n" % RELEASE, 0)})
    host.tool("dmesg", {"--time-format=iso": (kernel_log_without_nvidia(), 0)})


def test_secure_boot_with_unenrolled_signer_is_diagnosed(host, capsys):
    secure_boot_host(host, pending_text="")
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["secure_boot"] == {"enabled": True, "setup_mode": False, "source": "mokutil"}
    assert facts["kernel_module"]["signer"] == "localhost.localdomain Secure Boot Module Signature key"
    assert [common["fingerprint"] for common in facts["mok"]["enrolled"]] == ["76a092065800bf376901c372cd55a90e1fded2e0"]
    assert codes(facts) == ["module_not_loaded", "secure_boot_signer_not_enrolled", "nvml_cannot_talk_to_driver"]
    signer = finding(facts, "secure_boot_signer_not_enrolled")
    assert signer["severity"] == "critical" and "mokutil --import" in signer["remedy"]


def test_secure_boot_signer_pending_enrollment_says_confirm_in_mokmanager(host, capsys):
    secure_boot_host(host, pending_text=fixture_text(PENDING))
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["mok"]["pending"][0]["fingerprint"] == "3f2c9a7104be5de811906ac3d72e48b50cf1a962"
    signer = finding(facts, "secure_boot_signer_not_enrolled")
    assert signer["severity"] == "error" and "MokManager" in signer["remedy"]


def test_failing_mok_list_leaves_the_signer_unjudged_instead_of_not_enrolled(host, capsys):
    """mokutil prints "<var> is empty" with rc 0; "Failed to read <var>" and rc 255 mean the list is unknown."""
    secure_boot_host(host, pending_text="")
    host.tool("mokutil", {"--sb-state": ("SecureBoot enabled\n", 0),
                          "--list-enrolled": ("Failed to read MokListRT\n", 255),
                          "--list-new": ("", 0)})
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["mok"]["enrolled"] == []
    assert "secure_boot_signer_not_enrolled" not in codes(facts)
    assert "module_not_loaded" in codes(facts)
    unavailable = finding(facts, "data_source_unavailable")
    assert unavailable["layer"] == 1
    assert unavailable["message"] == "mokutil: mokutil --list-enrolled failed (rc 255: Failed to read MokListRT): MOK keys unknown"


def test_missing_tools_give_null_facts_and_diagnosis_without_failing(host, capsys):
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    host.loaded_open_driver("565.57.01")
    host.headers()
    host.efivars(secure_boot=True, setup_mode=False)
    # modinfo and dkms live in /usr/sbin on most hosts, which get_bin_path always searches: fake them too.
    host.tool("modinfo", {"nvidia": ("modinfo: ERROR: Module nvidia not found.\n", 1)})
    host.tool("dkms", {"status": ("", 0)})
    result = host.run(capsys)
    facts = result["ansible_facts"]["nvidia_driver"]
    assert "failed" not in result
    assert facts["userspace"]["nvidia_smi_path"] is None
    assert facts["userspace"]["error_kind"] == "not_found"
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["secure_boot"] == {"enabled": True, "setup_mode": False, "source": "efivars"}
    assert facts["mok"] == {"enrolled": [], "pending": []}
    assert facts["xid_events"] == []
    assert facts["kernel_module"]["version"] == "565.57.01"
    assert codes(facts) == ["data_source_unavailable", "nvidia_smi_not_found", "data_source_unavailable"]
    messages = " ".join(item["message"] for item in facts["diagnosis"])
    assert "mokutil" in messages and "neither dmesg nor journalctl" in messages


def test_legacy_bios_host_without_mokutil_has_unknown_secure_boot(host, capsys):
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    result = host.run(capsys, gather_subset=["secure_boot"])
    assert result["ansible_facts"]["nvidia_driver"]["secure_boot"] == {"enabled": None, "setup_mode": None,
                                                                       "source": None}


def test_gather_subset_limits_what_is_read(host, capsys):
    healthy_a100_mig_host(host)
    facts = host.run(capsys, gather_subset=["!all", "pci"])["ansible_facts"]["nvidia_driver"]
    assert facts["pci_devices"][0]["address"] == "0000:01:00.0"
    assert facts["gpus"] == [] and facts["kernel_module"]["loaded"] is False
    assert facts["diagnosis"] == []
    assert host.calls() == []


def test_nvidia_smi_option_points_at_the_binary(host, capsys):
    healthy_a100_mig_host(host)
    os.rename(str(host.bin / "nvidia-smi"), str(host.outputs / "nvidia-smi"))
    facts = host.run(capsys, nvidia_smi=str(host.outputs / "nvidia-smi"),
                     gather_subset=["nvml"])["ansible_facts"]["nvidia_driver"]
    assert facts["userspace"]["nvidia_smi_path"] == str(host.outputs / "nvidia-smi")
    assert facts["gpu_count"] == 1


def test_journalctl_is_used_when_dmesg_is_not_permitted(host, capsys):
    healthy_a100_mig_host(host)
    host.tool("dmesg", {}, default_rc=1)  # "dmesg: read kernel buffer failed: Operation not permitted"
    host.tool("journalctl", {"-k --no-pager -o short-iso -b": (fixture_text("xid_kernel-log_lines_from_issues.txt"), 0)})
    facts = host.run(capsys, gather_subset=["xid"])["ansible_facts"]["nvidia_driver"]
    assert 79 in [event["code"] for event in facts["xid_events"]]
    assert "dmesg --time-format=iso" in host.calls() and "dmesg " in host.calls()


def test_invalid_gather_subset_fails_with_a_clear_message(host, capsys):
    result = host.run(capsys, gather_subset=["all", "gpu"])
    assert result["failed"] is True
    assert "gather_subset" in result["msg"] and "gpu" in result["msg"]


def test_timeout_below_one_second_fails(host, capsys):
    result = host.run(capsys, timeout=0)
    assert result["failed"] is True and "timeout" in result["msg"]


def test_module_known_only_from_sys_module_counts_as_loaded(host, capsys):
    """/sys/module/<name> exists exactly while a module is loaded, so it stands in for a missing module list."""
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    host.write("proc/modules", UNRELATED_MODULES)
    host.write("sys/module/nvidia/version", "550.54.15\n")
    host.write("sys/module/nvidia_uvm/initstate", "live\n")
    host.tool("modinfo", {"nvidia": ("modinfo: ERROR: Module nvidia not found.\n", 1)})
    facts = host.run(capsys, gather_subset=["kernel"])["ansible_facts"]["nvidia_driver"]
    assert facts["kernel_module"]["loaded"] is True
    assert facts["kernel_module"]["version"] == "550.54.15"
    assert facts["kernel_module"]["flavor"] is None  # only /proc/driver/nvidia/version tells it for a loaded module
    assert facts["kernel_module"]["companions"] == ["nvidia_uvm"]
    assert facts["nouveau_loaded"] is False


def test_hung_nvidia_smi_is_cut_off_by_the_timeout(host, capsys):
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    script = host.bin / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec /bin/sleep 10\n")
    script.chmod(0o755)
    os.symlink("/usr/bin/timeout", str(host.bin / "timeout"))
    facts = host.run(capsys, gather_subset=["nvml"], timeout=1)["ansible_facts"]["nvidia_driver"]
    assert facts["userspace"]["nvml_ok"] is False
    assert "within 1 seconds" in facts["userspace"]["error"]
    assert codes(facts) == ["nvml_error"]


def test_empty_dmesg_is_an_empty_kernel_log_not_a_reason_to_read_the_journal(host, capsys):
    host.tool("dmesg", {"--time-format=iso": ("", 0)})
    host.tool("journalctl", {"-k --no-pager -o short-iso -b": (fixture_text("xid_kernel-log_lines_from_issues.txt"), 0)})
    facts = host.run(capsys, gather_subset=["xid"])["ansible_facts"]["nvidia_driver"]
    assert facts["xid_events"] == [] and facts["diagnosis"] == []
    assert not [call for call in host.calls() if call.startswith("journalctl")]


def test_xid_of_all_boots_reads_the_journal_first(host, capsys):
    host.tool("dmesg", {"--time-format=iso": (kernel_log_without_nvidia(), 0)})
    host.tool("journalctl", {"-k --no-pager -o short-iso": (fixture_text("xid_kernel-log_lines_from_issues.txt"), 0)})
    facts = host.run(capsys, gather_subset=["xid"], xid_since_boot=False)["ansible_facts"]["nvidia_driver"]
    assert 48 in [event["code"] for event in facts["xid_events"]]
    assert host.calls() == ["journalctl -k --no-pager -o short-iso"]


def test_build_tools_missing_names_what_a_dkms_build_would_miss(host, capsys):
    host.pci_gpu("0000:18:00.0", "0x2330", "nvidia")
    host.loaded_open_driver("565.57.01")
    host.headers()
    # dkms lives in /usr/sbin, which get_bin_path always searches: fake it on PATH so the answer is this host's
    host.tool("dkms", {"status": ("", 0)})
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["kernel"]["build_tools_missing"] == ["make", "gcc", "C library headers"]
    host.tool("make", {})
    host.tool("cc", {})
    host.write("usr/include/stdio.h", "/* the C library's headers */\n")
    facts = host.run(capsys)["ansible_facts"]["nvidia_driver"]
    assert facts["kernel"]["build_tools_missing"] == []
