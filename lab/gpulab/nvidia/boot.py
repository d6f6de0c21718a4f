"""What the NVIDIA side of a node looks like after a boot, and live GPU faults.

`compute_boot_state(root, hw, efi, faults)` (called by `node.py` inside the node's mount namespace) applies
staged MOK keys, inspects the installed kernel module with real `modinfo`, decides whether the kernel accepts it
(Secure Boot off, or its signer enrolled; nouveau not holding the GPUs) and returns the views the node core
applies (contract in `lab/ARCHITECTURE.md`). `apply_xid(hw, code, gpu_index)` and friends return the new `hw`
and the kernel-log lines of a fault injected while the node runs.
"""
from __future__ import annotations

import copy
import glob
import hashlib
import os
import re
import subprocess

from gpulab.nvidia import installer, kmsg, mok
from gpulab.nvidia.smi import mismatched_version

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 510
SB_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SETUP_MODE_EFIVAR = "/sys/firmware/efi/efivars/SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFIVAR_ATTRIBUTES = "\x06\x00\x00\x00"    # BOOTSERVICE_ACCESS | RUNTIME_ACCESS, little-endian u32
MODULE_SEARCH_DIRS = ["updates/dkms", "kernel/drivers/video", "updates", "extra"]
COMPANION_MODULES = ["nvidia-uvm", "nvidia-modeset", "nvidia-drm"]
MODULE_SIZES = {"nvidia": 54059008, "nvidia_uvm": 4661248, "nvidia_modeset": 1347584, "nvidia_drm": 16384}
NOUVEAU_MODULES = [{"name": "nouveau", "size": 2871296, "used_by": []},
                   {"name": "drm_display_helper", "size": 184320, "used_by": ["nouveau"]},
                   {"name": "ttm", "size": 94208, "used_by": ["nouveau"]}]
GCC_VERSION_LINE = "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "


# ------------------------------------------------------------------------------------- installed module

def kernel_release(hw: dict) -> str:
    return hw.get("kernel_release") or os.uname().release


def find_installed_module(root: str, release: str, stem: str = "nvidia") -> str | None:
    """Path of the `.ko` modprobe would pick (dkms `updates/` before the runfile's `kernel/`), None if none."""
    for subdir in MODULE_SEARCH_DIRS:
        for suffix in (".ko", ".ko.xz", ".ko.zst"):
            path = os.path.join(root, "lib/modules", release, subdir, stem + suffix)
            if os.path.exists(path):
                return path
    return None


def read_modinfo(ko_path: str) -> dict:
    """Real `modinfo` of a module file as {field: value} (multi-valued fields joined by newlines)."""
    proc = subprocess.run(["modinfo", ko_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("modinfo %s failed: %s" % (ko_path, proc.stderr.strip()))
    fields = {}
    last_key = None
    for line in proc.stdout.splitlines():
        match = re.match(r"^([a-z_]+):\s*(.*)$", line)
        if match:
            last_key = match.group(1)
            fields[last_key] = (fields[last_key] + "\n" if last_key in fields else "") + match.group(2).strip()
        elif last_key:
            fields[last_key] += line.strip()
    return fields


def flavor_of(modinfo: dict) -> str:
    return "open" if modinfo.get("license") == "Dual MIT/GPL" else "proprietary"


def signer_is_enrolled(modinfo: dict, enrolled: list) -> bool:
    """Kernel check: the module's signing key (issuer CN + serial, as modinfo prints them) is a MOK."""
    if not modinfo.get("signer") or not modinfo.get("sig_key"):
        return False
    for entry in enrolled:
        der = mok.key_der(entry)
        if mok.certificate_serial_hex(der) == modinfo["sig_key"].upper() and \
                mok.certificate_subject_cn(der) == modinfo["signer"]:
            return True
    return False


def nouveau_blacklisted(root: str) -> bool:
    for path in glob.glob(os.path.join(root, "etc/modprobe.d/*.conf")) + \
            glob.glob(os.path.join(root, "lib/modprobe.d/*.conf")):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if re.search(r"^\s*blacklist\s+nouveau\b", handle.read(), re.MULTILINE):
                    return True
        except OSError:
            continue
    return False


def nvidia_blacklisted(root: str) -> bool:
    """``blacklist nvidia`` in modprobe.d: udev does not load it at boot (an explicit ``modprobe nvidia`` does)."""
    for path in glob.glob(os.path.join(root, "etc/modprobe.d/*.conf")) + \
            glob.glob(os.path.join(root, "lib/modprobe.d/*.conf")):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if re.search(r"^\s*blacklist\s+nvidia\s*$", handle.read(), re.MULTILINE):
                    return True
        except OSError:
            continue
    return False


# ------------------------------------------------------------------------------------------ text formats

def build_date(version: str) -> str:
    """A stable build date per driver version (real modules carry the date NVIDIA built them)."""
    day = int(hashlib.sha256(version.encode()).hexdigest()[:4], 16) % 19 + 10   # two digits: no padding space
    return "Thu Feb %d 01:44:30 UTC 2024" % day


def proc_version_text(version: str, flavor: str) -> str:
    """`/proc/driver/nvidia/version` in NVIDIA's exact formats
    (`tests/unit/fixtures/kernel/proc-driver-nvidia-version_*`)."""
    if flavor == "open":
        first = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  " \
                "(dvs-builder@U16-I3-B03-4-3)  %s" % (version, build_date(version))
    else:
        first = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  %s" % (version, build_date(version))
    return first + "\n" + GCC_VERSION_LINE + "\n"


def nvrm_loading_line(version: str, flavor: str) -> str:
    return "NVRM: loading " + proc_version_text(version, flavor).splitlines()[0][len("NVRM version: "):]


def gpu_information_text(gpu: dict, minor: int) -> str:
    return ("Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t %s\nBus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\n"
            "GPU Excluded:\t No\n" % (gpu["name"], 120 + minor, gpu["uuid"], gpu["vbios_version"].lower(),
                                      gpu["pci_address"], minor))


# -------------------------------------------------------------------------------------------- the decision

def _efivar_files(efi: dict) -> dict:
    if not efi.get("efi"):
        return {}
    return {SB_EFIVAR: EFIVAR_ATTRIBUTES + ("\x01" if efi.get("secure_boot") else "\x00"),
            SETUP_MODE_EFIVAR: EFIVAR_ATTRIBUTES + ("\x01" if efi.get("setup_mode") else "\x00")}


def _fault_kinds(faults) -> set:
    kinds = set()
    for fault in faults or []:
        kinds.add(fault if isinstance(fault, str) else fault.get("kind"))
    return kinds


def _mok_kmsg(efi: dict) -> list:
    if not efi.get("efi") or not efi.get("secure_boot"):
        return []
    # "secureboot: Secure boot enabled" is logged by the node core with its generic boot lines
    lines = ["integrity: Loading X.509 certificate: UEFI:MokListRT (MOKvar table)"]
    for entry in efi.get("enrolled", []):
        der = mok.key_der(entry)
        key_id = mok.certificate_key_id(der) or mok.sha1_fingerprint(der)
        lines.append("integrity: Loaded X.509 cert '%s: %s'" % (mok.certificate_subject_cn(der), key_id))
    return lines


def _module_verdict(modinfo: dict, efi: dict) -> tuple:
    """(accepted, kmsg lines) for loading a module with this modinfo under this EFI state."""
    secure_boot = bool(efi.get("efi") and efi.get("secure_boot"))
    signed = bool(modinfo.get("signer"))
    enrolled = signer_is_enrolled(modinfo, efi.get("enrolled", []))
    if secure_boot and not signed:
        return False, [(kmsg.LEVEL_ERROR, "Lockdown: modprobe: unsigned module loading is restricted; see man "
                                          "kernel_lockdown.7"),
                       (kmsg.LEVEL_ERROR, "Loading of unsigned module is rejected")]
    if secure_boot and not enrolled:
        return False, [(kmsg.LEVEL_ERROR, "Loading of module with unavailable key is rejected")]
    lines = [(kmsg.LEVEL_WARNING, "nvidia: loading out-of-tree module taints kernel.")]
    if flavor_of(modinfo) == "proprietary":
        lines += [(kmsg.LEVEL_WARNING, "nvidia: module license 'NVIDIA' taints kernel."),
                  (kmsg.LEVEL_WARNING, "Disabling lock debugging due to kernel taint")]
    if not enrolled:
        lines.append((kmsg.LEVEL_WARNING, "nvidia: module verification failed: signature and/or required key "
                                          "missing - tainting kernel"))
    return True, lines


def _loaded_views(root: str, release: str, gpus: list, modinfo: dict) -> dict:
    version = modinfo.get("version")
    flavor = flavor_of(modinfo)
    installed = ["nvidia"] + [stem for stem in COMPANION_MODULES if find_installed_module(root, release, stem)]
    names = [stem.replace("-", "_") for stem in installed]
    users = {"nvidia": [n for n in ("nvidia_uvm", "nvidia_modeset") if n in names],
             "nvidia_modeset": ["nvidia_drm"] if "nvidia_drm" in names else []}
    modules = [{"name": name, "size": MODULE_SIZES[name], "used_by": users.get(name, []),
                "taint": "POE" if flavor == "proprietary" else "OE"} for name in reversed(names)]
    files = {"/proc/driver/nvidia/version": proc_version_text(version, flavor),
             "/proc/driver/nvidia/params": "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"}
    for name in names:
        files["/sys/module/%s/version" % name] = version + "\n"
        files["/sys/module/%s/initstate" % name] = "live\n"
        files["/sys/module/%s/refcnt" % name] = "%d\n" % len(users.get(name, []))
    # the device minor is the GPU's index: /dev/nvidiaN stays the same GPU when another one is missing
    for gpu in gpus:
        files["/proc/driver/nvidia/gpus/%s/information" % gpu["pci_address"]] = gpu_information_text(gpu, gpu["index"])
    dev_nodes = [{"path": "/dev/nvidiactl", "major": NVIDIA_MAJOR, "minor": NVIDIACTL_MINOR}]
    dev_nodes += [{"path": "/dev/nvidia%d" % gpu["index"], "major": NVIDIA_MAJOR, "minor": gpu["index"]}
                  for gpu in gpus]
    if "nvidia_modeset" in names:
        dev_nodes.append({"path": "/dev/nvidia-modeset", "major": NVIDIA_MAJOR, "minor": MODESET_MINOR})
    if "nvidia_uvm" in names:
        dev_nodes += [{"path": "/dev/nvidia-uvm", "major": UVM_MAJOR, "minor": 0},
                      {"path": "/dev/nvidia-uvm-tools", "major": UVM_MAJOR, "minor": 1}]
    lines = ["nvidia-nvlink: Nvlink Core is being initialized, major device number 239"]
    lines += ["nvidia %s: enabling device (0000 -> 0002)" % gpu["pci_address"] for gpu in gpus]
    lines.append(nvrm_loading_line(version, flavor))
    if "nvidia_modeset" in names:
        lines.append("nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  %s  %s" % (
            version, build_date(version)))
    if "nvidia_drm" in names:
        lines += ["[drm] [nvidia-drm] [GPU ID 0x%s] Loading driver" % gpu["pci_address"].replace(":", "")[4:8]
                  .rjust(8, "0") for gpu in gpus]
    if "nvidia_uvm" in names:
        lines.append("nvidia_uvm: module uses symbols nvUvmInterfaceDisableAccessCntr from proprietary module nvidia, "
                     "inheriting taint." if flavor == "proprietary" else "nvidia-uvm: Loaded the UVM driver, major "
                     "device number %d." % UVM_MAJOR)
    return {"modules": modules, "files": files, "dev_nodes": dev_nodes, "kmsg": lines}


def _pci_view(gpus: list, driver: str | None) -> list:
    return [{"address": gpu["pci_address"], "vendor": "0x10de", "device": gpu["device_id"], "class": "0x030200",
             "subsystem_vendor": "0x" + gpu["subsystem_id"][-4:], "subsystem_device": gpu["subsystem_id"][:6],
             "driver": gpu.get("driver_override") or driver} for gpu in gpus]


def compute_boot_state(root: str, hw: dict, efi: dict, faults=None) -> dict:
    """The NVIDIA side of a node after a boot (contract in `lab/ARCHITECTURE.md`).

    Extra keys beyond the contract: `efi` (the EFI state after MokManager ran: write it back to efi.json),
    `kmsg_records` (the `kmsg` lines in `/dev/kmsg` record format, for `run/kmsg` after a `# boot_epoch=` line),
    `nouveau_loaded`, `module_rejected`, `kernel_module_path`.

    Faults it honours: `dkms-fail` (a dkms-built module is not there for the running kernel), `driver-mismatch`
    (the loaded module is the previous driver's), `nouveau` (nouveau wins the GPUs even with nvidia installed),
    `headers-missing` (no `/lib/modules/<release>/build` link is made). It also makes that link (to the Debian
    headers) on every other boot, so the node's kernel has "its" headers.
    """
    faults_active = _fault_kinds(faults)
    release = kernel_release(hw)
    if "headers-missing" not in faults_active:
        try:
            installer.ensure_kernel_build_link(root, release)
        except installer.InstallerError:
            pass   # the host has no linux-headers-*: the node has none either
    efi, _newly_enrolled = mok.apply_staged_keys(efi)
    gpus = [gpu for gpu in hw.get("gpus", []) if gpu.get("on_bus", True)]
    state = {"module_loaded": False, "kernel_driver_version": None, "files": _efivar_files(efi),
             "pci_devices": [], "dev_nodes": [], "modules": [], "kmsg": [], "efi": efi, "nouveau_loaded": False,
             "module_rejected": False, "kernel_module_path": None}
    kmsg_lines = [(kmsg.LEVEL_INFO, line) for line in _mok_kmsg(efi)]
    ko_path = find_installed_module(root, release)
    nouveau = bool(gpus) and not nouveau_blacklisted(root) and (ko_path is None or "nouveau" in faults_active)
    driver = None
    if nouveau:
        state["nouveau_loaded"] = True
        state["modules"] = list(NOUVEAU_MODULES)
        driver = "nouveau"
        kmsg_lines += [(kmsg.LEVEL_INFO, "nouveau %s: NVIDIA %s (%s)" % (gpu["pci_address"], gpu["architecture"],
                                                                        gpu["device_id"])) for gpu in gpus]
        if ko_path:
            kmsg_lines += [(kmsg.LEVEL_ERROR, "NVRM: The NVIDIA probe routine was not called for %d device(s)."
                            % len(gpus)),
                           (kmsg.LEVEL_ERROR, "NVRM: This can occur when a driver such as: \nNVRM: nouveau, rivafb, "
                            "nvidiafb or rivatv \nNVRM: was loaded and obtained ownership of the NVIDIA device(s)."),
                           (kmsg.LEVEL_ERROR, "NVRM: No NVIDIA devices probed.")]
    elif ko_path and "explicit-modprobe" not in faults_active and nvidia_blacklisted(root):
        # built and installed, but nothing loads it at boot (udev honours the blacklist): a `modprobe nvidia` does
        state["kernel_module_path"] = ko_path
    elif ko_path and "dkms-fail" in faults_active and "/updates/dkms/" in ko_path:
        # models a kernel update whose dkms rebuild failed: no module for the running kernel, nothing logged
        state["kernel_module_path"] = ko_path
    elif ko_path:
        state["kernel_module_path"] = ko_path
        modinfo = read_modinfo(ko_path)
        if "driver-mismatch" in faults_active:
            # the module of the previous driver is what got loaded: kernel and userspace now differ
            modinfo = dict(modinfo, version=mismatched_version(modinfo.get("version", "0.0")))
        accepted, verdict_lines = _module_verdict(modinfo, efi)
        kmsg_lines += verdict_lines
        if accepted and gpus:
            views = _loaded_views(root, release, gpus, modinfo)
            state.update({"module_loaded": True, "kernel_driver_version": modinfo.get("version"),
                          "modules": views["modules"], "dev_nodes": views["dev_nodes"]})
            state["files"].update(views["files"])
            kmsg_lines += [(kmsg.LEVEL_INFO, line) for line in views["kmsg"]]
            driver = "nvidia"
        elif accepted:
            kmsg_lines.append((kmsg.LEVEL_ERROR, "NVRM: No NVIDIA GPU found."))
        else:
            state["module_rejected"] = True
    state["pci_devices"] = _pci_view(gpus, driver)
    state["kmsg"] = [text for _level, text in kmsg_lines]
    state["kmsg_records"] = kmsg.boot_records(kmsg_lines)
    return state


# ---------------------------------------------------------------------------------------------- live faults

def _apply_xid_effect(gpu: dict, code: int) -> None:
    if code == 79:
        gpu["on_bus"] = False
    elif code in (48, 94, 95):
        gpu["ecc_volatile_uncorrectable"] += 1
        gpu["ecc_aggregate_uncorrectable"] += 1
        if gpu.get("retired_pages_pending") is not None:
            gpu["retired_pages_pending"] = True
        elif gpu.get("remapped_rows_pending") is not None:
            gpu["remapped_rows_pending"] = True
            gpu["remapped_rows_uncorrectable"] += 1
    elif code == 63:
        gpu["remapped_rows_pending"] = True
        gpu["remapped_rows_uncorrectable"] += 1
    elif code == 64:
        gpu["remapped_rows_failure"] = True


def apply_xid(hw: dict, code: int, gpu_index: int, pid: int | None = None, process: str | None = None) -> tuple:
    """(new hw, kernel-log lines) after the driver reports Xid `code` on a GPU; the GPU state changes as the
    Xid implies (79: off the bus; 48/94/95: uncorrectable ECC and pending retirement/remap; 63/64: row remapper)."""
    new_hw = copy.deepcopy(hw)
    gpu = _gpu_by_index(new_hw, gpu_index)
    lines = kmsg.xid_lines(new_hw, gpu_index, code, pid, process)
    _apply_xid_effect(gpu, code)
    return new_hw, lines


def clear_gpu_faults(hw: dict, gpu_index: int | None = None) -> dict:
    """GPU state after a reset/reboot: back on the bus, volatile ECC counters and pending flags cleared
    (aggregate counters and remap failures persist, as on real GPUs)."""
    new_hw = copy.deepcopy(hw)
    for gpu in new_hw["gpus"]:
        if gpu_index is not None and gpu["index"] != gpu_index:
            continue
        gpu["on_bus"] = True
        gpu["ecc_volatile_uncorrectable"] = 0
        if gpu.get("retired_pages_pending") is not None:
            gpu["retired_pages_pending"] = False
        if gpu.get("remapped_rows_pending") is not None:
            gpu["remapped_rows_pending"] = False
    return new_hw


def _gpu_by_index(hw: dict, gpu_index: int) -> dict:
    for gpu in hw["gpus"]:
        if gpu["index"] == gpu_index:
            return gpu
    raise ValueError("node %s has no GPU %d" % (hw.get("node"), gpu_index))
