# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kernel-side parsers for nvidia_driver_facts (private to this collection).

Every ``parse_*`` function takes text (or bytes) and returns plain data; ``read_pci_devices`` only walks
the directory tree it is given, so tests feed it tmp_path trees.
"""

from __future__ import annotations

import os
import re

NVIDIA_PCI_VENDOR_ID = "0x10de"
# Display controllers (VGA 0x0300, 3D 0x0302) are GPUs; 0x0680 "other bridge" is how NVSwitch
# shows up. HDMI audio (0x0403), USB-C (0x0c03) and UCSI (0x0c80) functions of consumer cards
# are not GPUs and are left out.
GPU_PCI_CLASS_PREFIX = "0x03"
NVSWITCH_PCI_CLASS_PREFIX = "0x0680"

# Where distributions and the runfile put libnvidia-ml.so.1 (a link to libnvidia-ml.so.<driver version>).
NVML_LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
COMPANION_MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia_vgpu_vfio")

_PROC_VERSION_RE = re.compile(
    r"NVRM version:\s+NVIDIA UNIX\s+(?P<open>Open\s+)?(?:(?P<arch_old>\S+)\s+)?Kernel Module"
    r"(?:\s+for\s+(?P<arch>\S+))?\s+(?P<version>\d+(?:\.\d+)+)"
)
_MODINFO_LINE_RE = re.compile(r"^(?P<key>[A-Za-z0-9_]+):\s*(?P<value>.*)$")
_MODINFO_MULTI_KEYS = ("alias", "firmware", "parm", "import_ns", "softdep")
_SHORT_MOK_LINE_RE = re.compile(r"^(?P<fingerprint>[0-9a-fA-F]{40})\s+(?P<subject>.+)$")
_CN_RE = re.compile(r"(?:^|[,/]\s*)CN\s*=\s*(?P<cn>[^,/]+)")
_DKMS_SUFFIX_RE = re.compile(r"\s*\((?P<warning>[^()]*)\)\s*$")


# ---------------------------------------------------------------- layer 0: PCI


def is_nvidia_gpu_or_switch(vendor_id, class_id):
    """True for NVIDIA GPU (display/3D) and NVSwitch functions."""
    if (vendor_id or "").lower() != NVIDIA_PCI_VENDOR_ID:
        return False
    class_id = (class_id or "").lower()
    return class_id.startswith(GPU_PCI_CLASS_PREFIX) or class_id.startswith(NVSWITCH_PCI_CLASS_PREFIX)


def is_gpu_class(class_id):
    return (class_id or "").lower().startswith(GPU_PCI_CLASS_PREFIX)


def _read_sysfs_attr(device_dir, name):
    try:
        with open(os.path.join(device_dir, name)) as attr_file:
            return attr_file.read().strip().lower()
    except (IOError, OSError):
        return None


def _bound_driver(device_dir):
    link = os.path.join(device_dir, "driver")
    if not os.path.islink(link) and not os.path.isdir(link):
        return "none"
    return os.path.basename(os.path.realpath(link)) or "none"


def read_pci_devices(sysfs_pci_dir):
    """NVIDIA GPU/NVSwitch functions under a /sys/bus/pci/devices-like directory, sorted by address."""
    try:
        addresses = sorted(os.listdir(sysfs_pci_dir))
    except (IOError, OSError):
        return []
    devices = []
    for address in addresses:
        device_dir = os.path.join(sysfs_pci_dir, address)
        vendor_id = _read_sysfs_attr(device_dir, "vendor")
        class_id = _read_sysfs_attr(device_dir, "class")
        if not is_nvidia_gpu_or_switch(vendor_id, class_id):
            continue
        devices.append({
            "address": address.lower(),
            "vendor_id": vendor_id,
            "device_id": _read_sysfs_attr(device_dir, "device"),
            "class_id": class_id,
            "driver": _bound_driver(device_dir),
        })
    return devices


# ---------------------------------------------------------------- layer 1: kernel module


def parse_proc_version(text):
    """/proc/driver/nvidia/version -> {version, flavor, arch} (all None when not recognised)."""
    match = _PROC_VERSION_RE.search(text or "")
    if not match:
        return {"version": None, "flavor": None, "arch": None}
    # Open builds say "Open Kernel Module for <arch>"; proprietary ones "<arch> Kernel Module".
    is_open = bool(match.group("open")) or bool(match.group("arch"))
    return {
        "version": match.group("version"),
        "flavor": "open" if is_open else "proprietary",
        "arch": match.group("arch") or match.group("arch_old"),
    }


def parse_module_list(text):
    """/proc/modules or lsmod output -> [{name, size, refcount, used_by: [..]}].

    /proc/modules: ``nvidia_uvm 4661248 2 nvidia_peermem, Live 0x0 (POE)`` (used_by '-' when none);
    lsmod: ``nvidia 54059008 13 nvidia_uvm,nvidia_modeset`` after a ``Module Size Used by`` header.
    """
    modules = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].isdigit():
            continue
        used_by = []
        if len(fields) >= 4 and fields[3] not in ("-", "Live", "Loading", "Unloading"):
            used_by = [name for name in fields[3].split(",") if name]
        modules.append({
            "name": fields[0],
            "size": int(fields[1]),
            "refcount": int(fields[2]) if fields[2].isdigit() else None,
            "used_by": used_by,
        })
    return modules


def parse_modinfo(text):
    """``modinfo nvidia`` -> dict; single keys map to the first value, alias/firmware/parm/... to lists.

    Continuation lines (the hex ``signature:`` block) are appended to the previous key.
    """
    info = {}
    last_key = None
    for line in (text or "").splitlines():
        if line.startswith("modinfo: "):
            continue  # "modinfo: ERROR: Module nvidia not found."
        match = _MODINFO_LINE_RE.match(line)
        if match and not line[:1].isspace():
            last_key = match.group("key")
            value = match.group("value").strip()
            if last_key in _MODINFO_MULTI_KEYS:
                info.setdefault(last_key, []).append(value)
            elif last_key not in info:
                info[last_key] = value
            else:
                last_key = None  # a repeated single key: keep the first, ignore its continuation
        elif last_key and line.strip() and last_key not in _MODINFO_MULTI_KEYS:
            info[last_key] += line.strip()
    return info


def flavor_from_license(license_text):
    """modinfo license -> open|proprietary|None ('Dual MIT/GPL' is the open kernel module)."""
    if not license_text:
        return None
    if "MIT" in license_text or "GPL" in license_text:
        return "open"
    if license_text.strip() == "NVIDIA":
        return "proprietary"
    return None


def companion_modules(loaded_names):
    """Loaded NVIDIA companion modules (from module names), in the order of COMPANION_MODULES."""
    loaded = set(loaded_names)
    return [name for name in COMPANION_MODULES if name in loaded]


def build_kernel_module(loaded, proc_version, modinfo, companions):
    """Assemble the contract's kernel_module dict.

    version and flavor: the loaded module's (/proc, /sys/module) when loaded, never the file on disk, which
    may be newer; when not loaded, the on-disk module's (modinfo version and license) that modprobe would load.
    """
    proc_version = proc_version or {}
    modinfo = modinfo or {}
    if loaded:
        version, flavor = proc_version.get("version"), proc_version.get("flavor")
    else:
        version, flavor = modinfo.get("version"), flavor_from_license(modinfo.get("license"))
    return {
        "loaded": bool(loaded),
        "version": version or None,
        "flavor": flavor,
        "companions": list(companions or []) if loaded else [],
        "signer": modinfo.get("signer") or None,
        "sig_key": modinfo.get("sig_key") or None,
        "license": modinfo.get("license") or None,
        "filename": modinfo.get("filename") or None,
        "vermagic": modinfo.get("vermagic") or None,
    }


# ---------------------------------------------------------------- layer 1: Secure Boot and MOK


def parse_sb_state(text):
    """``mokutil --sb-state`` output (stdout and stderr) -> {enabled, setup_mode} or None when unknown.

    "SecureBoot validation is disabled in shim" means shim does not enforce signatures, so the kernel
    accepts unsigned modules: enabled is reported false. Legacy BIOS ("EFI variables are not
    supported") gives enabled None; UEFI without a SecureBoot variable gives enabled False.
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if "EFI variables are not supported on this system" in lines:
        return {"enabled": None, "setup_mode": None}
    if "This system doesn't support Secure Boot" in lines:
        return {"enabled": False, "setup_mode": None}
    setup_mode = "Platform is in Setup Mode" in lines
    if "SecureBoot enabled" in lines:
        validation_disabled = "SecureBoot validation is disabled in shim" in lines
        return {"enabled": not validation_disabled, "setup_mode": False}
    if "SecureBoot disabled" in lines:
        return {"enabled": False, "setup_mode": setup_mode}
    return None


def parse_efivar_bool(data):
    """An efivarfs file (4 attribute bytes then the value) -> bool, or None when too short."""
    if data is None or len(data) < 5:
        return None
    return bytearray(data)[4] != 0


def normalize_fingerprint(fingerprint):
    """'76:A0:92:...' -> '76a092...' (SHA1, lower-case, no colons)."""
    return (fingerprint or "").replace(":", "").strip().lower()


def parse_mok_list(text):
    """``mokutil --list-enrolled`` / ``--list-new`` (full or --short form) -> [{subject, fingerprint}].

    Full form: ``[key N]`` blocks with ``SHA1 Fingerprint:`` and the certificate's ``Subject:`` line.
    Short form: ``<sha1 hex> <CN>`` per line. "MokNew is empty"/"MokListRT is empty" give [].
    """
    keys = []
    current = None
    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        short = _SHORT_MOK_LINE_RE.match(line)
        if line.startswith("[key "):
            current = {"subject": None, "fingerprint": None}
            keys.append(current)
        elif line.startswith("SHA1 Fingerprint:"):
            fingerprint = line.split(":", 1)[1].strip()
            if current is None or current["fingerprint"] is not None:
                current = {"subject": None, "fingerprint": None}
                keys.append(current)
            current["fingerprint"] = normalize_fingerprint(fingerprint)
        elif line.startswith("Subject:") and current is not None and current["subject"] is None:
            current["subject"] = line.split(":", 1)[1].strip()
        elif short and current is None:
            keys.append({"subject": short.group("subject").strip(),
                         "fingerprint": normalize_fingerprint(short.group("fingerprint"))})
    return [key for key in keys if key["fingerprint"] or key["subject"]]


def common_name(subject):
    """The CN of an X.509 subject as mokutil prints it ('C=GB, O=x, CN=y' or 'CN = y'); else the subject."""
    if not subject:
        return None
    match = _CN_RE.search(subject)
    return (match.group("cn") if match else subject).strip()


# ---------------------------------------------------------------- layer 1: DKMS, kernel


def _parse_dkms_head(head):
    """'nvidia/535.86.05, 6.1.0, x86_64' (3.x) or 'nvidia, 535.86.05, 6.1.0, x86_64' (2.x)."""
    parts = [part.strip() for part in head.split(",")]
    if "/" in parts[0]:
        module, version = parts[0].split("/", 1)
        rest = parts[1:]
    elif len(parts) >= 2:
        module, version = parts[0], parts[1]
        rest = parts[2:]
    else:
        return None
    return {
        "module": module,
        "version": version,
        "kernel": rest[0] if len(rest) >= 1 and rest[0] else None,
        "arch": rest[1] if len(rest) >= 2 and rest[1] else None,
    }


def parse_dkms_status(text):
    """``dkms status`` (2.x and 3.x formats) -> [{module, version, kernel, arch, state, warning}].

    ``installed-weak from <kernel>`` keeps state 'installed-weak'; a trailing parenthesised note
    ("WARNING! Diff between built and installed module!", "Original modules exist") is the warning.
    """
    entries = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "Error!", "Warning:")) or ":" not in line:
            continue
        head, _sep, tail = line.rpartition(":")
        entry = _parse_dkms_head(head)
        if entry is None:
            continue
        warning = None
        suffix = _DKMS_SUFFIX_RE.search(tail)
        if suffix:
            warning = suffix.group("warning").strip()
            tail = tail[:suffix.start()]
        words = tail.split()
        if not words:
            continue
        entry["state"] = words[0]
        entry["warning"] = warning
        entries.append(entry)
    return entries


def nvidia_dkms_entries(entries):
    """DKMS entries of NVIDIA modules (nvidia, nvidia-open, Debian's nvidia-current, ...)."""
    return [entry for entry in entries if entry["module"].lower().startswith("nvidia")]


# ---------------------------------------------------------------- layer 1: device nodes


def is_nvidia_device_node_name(name):
    """/dev entries created by the driver: nvidia0.., nvidiactl, nvidia-uvm, nvidia-modeset, nvidia-capN."""
    return name.startswith("nvidia")


def device_node_sort_key(path):
    """Natural order: /dev/nvidia2 before /dev/nvidia10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


# ---------------------------------------------------------------- kernel vs userspace


_NVML_LIBRARY_FILE_RE = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


def nvml_library_version_from_filename(filename):
    """'libnvidia-ml.so.550.54.15' (what libnvidia-ml.so.1 resolves to) -> '550.54.15'; None for other names."""
    match = _NVML_LIBRARY_FILE_RE.match(filename or "")
    return match.group(1) if match else None


def kernel_userspace_mismatch(kernel_module, userspace):
    """True when NVML says so, or when the loaded module and the userspace driver report different versions."""
    if (userspace or {}).get("error_kind") == "version_mismatch":
        return True
    kernel_version = (kernel_module or {}).get("version") if (kernel_module or {}).get("loaded") else None
    user_version = (userspace or {}).get("driver_version")
    return bool(kernel_version and user_version and kernel_version != user_version)
