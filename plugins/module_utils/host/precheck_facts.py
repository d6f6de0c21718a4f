# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What node_precheck_facts reads on a host, and its verdict (private to this collection).

Reads the PCI functions, nouveau, Secure Boot and the signing key's enrolment, kernel headers, containerd, the
kubelet device-plugin directory, free space, swap and huge pages, read-only, through the host wing's
CommandRunner and file reader; precheck.evaluate judges them.
"""

from __future__ import annotations

import glob
import hashlib
import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.host.files import read_bytes, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.precheck import (
    DEFAULT_KUBELET_ROOT_DIR,
    evaluate,
    failure_message,
    newest_kernel,
    parse_containerd_version,
    parse_kubelet_root_dir,
    parse_meminfo_hugepages,
    parse_swaps,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
    parse_efivar_bool,
    parse_mok_list,
    parse_module_list,
    parse_sb_state,
    read_pci_devices,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import generation_of
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mok import parse_test_key

# Host paths, module level so tests can point them at a fake host tree.
SYSFS_PCI = "/sys/bus/pci/devices"
SYSFS_MODULE = "/sys/module"
SYSFS_EFI = "/sys/firmware/efi"
PROC_MODULES = "/proc/modules"
PROC_SWAPS = "/proc/swaps"
PROC_MEMINFO = "/proc/meminfo"
BOOT_DIR = "/boot"
LIB_MODULES = "/lib/modules"
KUBELET_FLAG_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet")
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
MIB = 1024 * 1024
# The options that are requirements; the others say where to read.
REQUIREMENT_OPTIONS = (
    "driver_version", "cuda_version", "kernel_module_type", "secure_boot_sign", "allow_key_creation",
    "allow_key_enrollment", "require_kubelet", "require_containerd", "container_runtime_path", "gpu_operator",
    "swap_off", "hugepages_total")


def gather_pci():
    devices = read_pci_devices(SYSFS_PCI)
    for device in devices:
        device["generation"] = generation_of(device.get("device_id"))
    return devices


def nouveau_loaded(runner):
    if os.path.isdir(os.path.join(SYSFS_MODULE, "nouveau")):
        return True
    text = read_text(PROC_MODULES)
    if text is None:
        lsmod = runner.find("lsmod")
        text = runner.run([lsmod]).stdout if lsmod else ""
    return any(module["name"] == "nouveau" for module in parse_module_list(text))


def gather_secure_boot(runner):
    """({enabled, efi}, mokutil path or None)."""
    mokutil = runner.find("mokutil")
    if mokutil:
        result = runner.run([mokutil, "--sb-state"])
        state = parse_sb_state(result.stdout + "\n" + result.stderr)
        if state is not None:
            return {"enabled": state["enabled"], "efi": state["enabled"] is not None}, mokutil
    efivars = os.path.join(SYSFS_EFI, "efivars")
    if not os.path.isdir(efivars):
        return {"enabled": None, "efi": False}, mokutil
    enabled = parse_efivar_bool(read_bytes(os.path.join(efivars, "SecureBoot-%s" % EFI_GLOBAL_GUID)))
    return {"enabled": bool(enabled), "efi": True}, mokutil


def certificate_sha1(path):
    data = read_bytes(path)
    return None if data is None else hashlib.sha1(data).hexdigest()


def gather_mok(runner, mokutil, secure_boot, mok_certificate, mok_private_key):
    mok = {"certificate_path": mok_certificate,
           "key_present": os.path.exists(mok_certificate) and os.path.exists(mok_private_key),
           "enrolled": None, "pending": None,
           "tools": {"openssl": bool(runner.find("openssl")), "mokutil": bool(mokutil)}}
    if mokutil and secure_boot["efi"] and os.path.exists(mok_certificate):
        test = runner.run([mokutil, "--test-key", mok_certificate])
        answer = parse_test_key(test.stdout + test.stderr)
        mok["enrolled"] = None if answer is None else answer == "enrolled"
        staged = runner.run([mokutil, "--list-new"])
        fingerprint = certificate_sha1(mok_certificate)
        mok["pending"] = staged.rc == 0 and any(key["fingerprint"] == fingerprint
                                                for key in parse_mok_list(staged.stdout))
    return mok


def gather_kernel():
    running = os.uname()[2]
    images = [os.path.basename(path)[len("vmlinuz-"):] for path in glob.glob(os.path.join(BOOT_DIR, "vmlinuz-*"))]
    newest = newest_kernel(images + [running]) if images else None

    def headers(release):
        return os.path.isfile(os.path.join(LIB_MODULES, release, "build", "Makefile"))
    return {"running": running, "running_headers": headers(running), "newest_installed": newest,
            "newest_headers": headers(newest) if newest else None}


def gather_containerd(runner):
    containerd = runner.find("containerd")
    if not containerd:
        return {"present": False, "version": None}
    result = runner.run([containerd, "--version"])
    return {"present": True, "version": parse_containerd_version(result.stdout) if result.rc == 0 else None}


def gather_kubelet(kubelet_root_dir):
    root_dir = kubelet_root_dir or parse_kubelet_root_dir(
        *[read_text(path) for path in KUBELET_FLAG_FILES]) or DEFAULT_KUBELET_ROOT_DIR
    plugin_dir = os.path.join(root_dir, "device-plugins")
    return {"root_dir": root_dir, "device_plugin_dir": plugin_dir, "device_plugin_dir_present": os.path.isdir(plugin_dir)}


def mount_point(path):
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def nearest_existing(path):
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def gather_disks(min_free_mib):
    disks = []
    for path in sorted(min_free_mib):
        existing = nearest_existing(path)
        try:
            stats = os.statvfs(existing)
            free_mib = stats.f_bavail * stats.f_frsize // MIB
        except OSError:
            free_mib = None
        disks.append({"path": path, "mount": mount_point(existing), "free_mib": free_mib,
                      "min_free_mib": int(min_free_mib[path])})
    return disks


def gather_facts(runner, options):
    """ansible_facts.gpu_node_precheck: what was read, the verdict and the failure message.

    runner: a host.command.CommandRunner; options: node_precheck_facts's options by name.
    """
    secure_boot, mokutil = gather_secure_boot(runner)
    facts = {
        "pci_devices": gather_pci(),
        "nouveau_loaded": nouveau_loaded(runner),
        "secure_boot": secure_boot,
        "mok": gather_mok(runner, mokutil, secure_boot, options["mok_certificate"], options["mok_private_key"]),
        "kernel": gather_kernel(),
        "containerd": gather_containerd(runner),
        "kubelet": gather_kubelet(options["kubelet_root_dir"]),
        "disks": gather_disks(options["min_free_mib"]),
        "swap": parse_swaps(read_text(PROC_SWAPS)),
        "hugepages": parse_meminfo_hugepages(read_text(PROC_MEMINFO)),
    }
    facts["verdict"] = evaluate(facts, dict((name, options[name]) for name in REQUIREMENT_OPTIONS))
    facts["failure_message"] = "" if facts["verdict"]["ok"] else failure_message(os.uname()[1], facts["verdict"])
    return facts
