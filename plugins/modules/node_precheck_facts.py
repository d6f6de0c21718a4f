#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_precheck_facts
short_description: Check that a host can become a GPU node, reading everything in one call
version_added: 0.1.0
description:
  - Reads, read-only, what the GPU node runbook needs before anything is changed, and returns it with a
    verdict in C(ansible_facts.gpu_node_precheck).
  - Read are the NVIDIA PCI functions and nouveau, Secure Boot and whether a module-signing key is enrolled,
    staged or can be made, kernel headers for the running kernel and for the newest installed kernel image
    (the next boot), the C(containerd) version (CDI needs 1.7, the GPU Operator 26.x needs 2.0), the kubelet
    device-plugin directory (honouring a non-default kubelet root dir), free disk space, swap and huge pages.
  - The verdict lists B(every) unmet requirement, each with its remedy, and notes that need no action now.
    The module itself never fails on an unmet requirement; the C(gpuops.nvidia.precheck) role fails once,
    listing them all.
author: gpuops.nvidia contributors (@gpuops)
options:
  driver_version:
    description:
      - The full NVIDIA driver version the node will get (C(580.95.05)); checked against the node's GPUs.
      - Not checked when not set.
    type: str
  cuda_version:
    description:
      - The CUDA version workloads need (C(12.8)); checked against the driver and the GPUs (CUDA 13 dropped
        Maxwell, Pascal and Volta).
    type: str
  kernel_module_type:
    description:
      - The kernel module flavour that will be installed; V(auto) picks it from the GPU generations.
    type: str
    choices: [auto, open, proprietary]
    default: auto
  secure_boot_sign:
    description:
      - V(auto) signs the modules when Secure Boot is on, V(always) also when it is off, V(never) never (an
        unmet requirement when Secure Boot is on).
    type: str
    choices: [auto, always, never]
    default: auto
  mok_certificate:
    description: The module-signing certificate (DER) that is or will be enrolled.
    type: path
    default: /var/lib/gpuops/mok/MOK.der
  mok_private_key:
    description: The private key of O(mok_certificate).
    type: path
    default: /var/lib/gpuops/mok/MOK.priv
  allow_key_creation:
    description: Whether a missing signing key may be created on the node (else it is an unmet requirement).
    type: bool
    default: true
  allow_key_enrollment:
    description:
      - Whether a signing key that is not enrolled yet may be staged for enrolment, to be confirmed at the console
        (MokManager) at the next boot. V(false), for unattended runs, makes a needed key that is not enrolled (absent,
        present or only staged) an unmet requirement.
    type: bool
    default: true
  kubelet_root_dir:
    description:
      - The kubelet root dir. When not set, the C(--root-dir) of C(/var/lib/kubelet/kubeadm-flags.env),
        C(/etc/default/kubelet) or C(/etc/sysconfig/kubelet), else C(/var/lib/kubelet).
    type: path
  require_kubelet:
    description: Whether the kubelet device-plugin directory must exist (the node has joined the cluster).
    type: bool
    default: true
  require_containerd:
    description: Whether containerd must be installed.
    type: bool
    default: true
  container_runtime_path:
    description:
      - V(cdi) requires containerd 1.7+; V(legacy) the nvidia runtime without CDI; V(auto) CDI where containerd
        supports it, else legacy (a note says so).
    type: str
    choices: [auto, cdi, legacy]
    default: auto
  gpu_operator:
    description: The GPU Operator (26.x) will run on the node; it needs containerd 2.0+.
    type: bool
    default: false
  min_free_mib:
    description: Free space needed per path, in MiB. A path that is no mount point is measured on its file system.
    type: dict
    default: {/var: 2048, /usr: 1024, /boot: 256, /tmp: 768}
  swap_off:
    description: Whether swap must be off.
    type: bool
    default: true
  hugepages_total:
    description: The number of default-size huge pages the node must have; not checked when not set.
    type: int
  timeout:
    description: Seconds each external command may run (under coreutils C(timeout) when present).
    type: int
    default: 30
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.FACTS
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: linux
notes:
  - Run as root (C(become)), as C(mokutil) and the kubelet files need it.
seealso:
  - module: gpuops.nvidia.nvidia_driver_facts
"""

EXAMPLES = r"""
- name: Check the node before installing driver 580.95.05 for CUDA 13.0
  gpuops.nvidia.node_precheck_facts:
    driver_version: 580.95.05
    cuda_version: "13.0"

- name: Fail once, listing every unmet requirement
  ansible.builtin.fail:
    msg: "{{ ansible_facts.gpu_node_precheck.failure_message }}"
  when: not ansible_facts.gpu_node_precheck.verdict.ok
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpu_node_precheck:
      description: What was read and the verdict.
      returned: always
      type: dict
      contains:
        pci_devices:
          description: NVIDIA GPU and NVSwitch PCI functions, with the generation of each GPU.
          type: list
          elements: dict
          returned: always
          sample: [{address: "0000:18:00.0", device_id: "0x2330", class_id: "0x030200", driver: nouveau, generation: hopper}]
        nouveau_loaded:
          description: Whether the nouveau module is loaded.
          type: bool
          returned: always
        secure_boot:
          description: Secure Boot state (V(enabled) null on legacy BIOS or when unknown) and whether EFI is there.
          type: dict
          returned: always
          sample: {enabled: true, efi: true}
        mok:
          description: The signing key at O(mok_certificate) and its enrolment, and the tools signing needs.
          type: dict
          returned: always
          sample: {certificate_path: /var/lib/gpuops/mok/MOK.der, key_present: false, enrolled: false, pending: false,
                   tools: {openssl: true, mokutil: true}}
        kernel:
          description: Running kernel, newest installed kernel image, and whether each has its headers.
          type: dict
          returned: always
          sample: {running: 6.8.0-45-generic, running_headers: true, newest_installed: 6.8.0-49-generic, newest_headers: false}
        containerd:
          description: Whether containerd is installed and its version.
          type: dict
          returned: always
          sample: {present: true, version: 1.7.20}
        kubelet:
          description: The kubelet root dir used and whether its device-plugin directory exists.
          type: dict
          returned: always
          sample: {root_dir: /var/lib/kubelet, device_plugin_dir: /var/lib/kubelet/device-plugins, device_plugin_dir_present: true}
        disks:
          description: Free space per checked path, in MiB, with its mount point and threshold.
          type: list
          elements: dict
          returned: always
          sample: [{path: /var, mount: /, free_mib: 51200, min_free_mib: 2048}]
        swap:
          description: Active swap areas.
          type: list
          elements: dict
          returned: always
        hugepages:
          description: Default-size huge pages (total, free, size in KiB).
          type: dict
          returned: always
        verdict:
          description:
            - V(ok), every V(unmet) requirement and the V(notes) as C({code, message, remedy}), the kernel module
              type to install and the container runtime path (V(cdi), V(legacy) or null without containerd).
          type: dict
          returned: always
          sample: {ok: false, unmet: [{code: disk_free_low, message: "/var (on /) has 12 MiB free, 2048 MiB needed.",
                   remedy: "Free space on /."}], notes: [], kernel_module_type: open, container_runtime_path: cdi}
        failure_message:
          description: One text listing every unmet requirement with its remedy; empty when the verdict is ok.
          type: str
          returned: always
"""

import glob
import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
    parse_efivar_bool,
    parse_mok_list,
    parse_module_list,
    parse_sb_state,
    read_pci_devices,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import generation_of
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mok import parse_test_key
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


def read_text(path):
    try:
        with open(path) as text_file:
            return text_file.read()
    except (IOError, OSError):
        return None


class Runner:
    def __init__(self, module):
        self.module = module
        self.timeout_bin = module.get_bin_path("timeout")

    def tool(self, name):
        return self.module.get_bin_path(name)

    def run(self, argv, data=None):
        if self.timeout_bin:
            argv = [self.timeout_bin, str(self.module.params["timeout"])] + list(argv)
        return self.module.run_command(argv, data=data, environ_update={"LC_ALL": "C", "LANG": "C"})


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
        lsmod = runner.tool("lsmod")
        text = runner.run([lsmod])[1] if lsmod else ""
    return any(module["name"] == "nouveau" for module in parse_module_list(text))


def gather_secure_boot(runner):
    mokutil = runner.tool("mokutil")
    if mokutil:
        rc, out, err = runner.run([mokutil, "--sb-state"])
        state = parse_sb_state(out + "\n" + err)
        if state is not None:
            return {"enabled": state["enabled"], "efi": state["enabled"] is not None}, mokutil
    efivars = os.path.join(SYSFS_EFI, "efivars")
    if not os.path.isdir(efivars):
        return {"enabled": None, "efi": False}, mokutil
    try:
        with open(os.path.join(efivars, "SecureBoot-%s" % EFI_GLOBAL_GUID), "rb") as handle:
            enabled = parse_efivar_bool(handle.read())
    except (IOError, OSError):
        enabled = None
    return {"enabled": bool(enabled), "efi": True}, mokutil


def certificate_sha1(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha1(handle.read()).hexdigest()
    except (IOError, OSError):
        return None


def gather_mok(runner, mokutil, secure_boot):
    params = runner.module.params
    certificate = params["mok_certificate"]
    mok = {"certificate_path": certificate,
           "key_present": os.path.exists(certificate) and os.path.exists(params["mok_private_key"]),
           "enrolled": None, "pending": None,
           "tools": {"openssl": bool(runner.tool("openssl")), "mokutil": bool(mokutil)}}
    if mokutil and secure_boot["efi"] and os.path.exists(certificate):
        rc, out, err = runner.run([mokutil, "--test-key", certificate])
        answer = parse_test_key(out + err)
        mok["enrolled"] = None if answer is None else answer == "enrolled"
        rc, out, err = runner.run([mokutil, "--list-new"])
        fingerprint = certificate_sha1(certificate)
        mok["pending"] = rc == 0 and any(key["fingerprint"] == fingerprint for key in parse_mok_list(out))
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
    containerd = runner.tool("containerd")
    if not containerd:
        return {"present": False, "version": None}
    rc, out, err = runner.run([containerd, "--version"])
    return {"present": True, "version": parse_containerd_version(out) if rc == 0 else None}


def gather_kubelet(root_dir):
    if not root_dir:
        root_dir = parse_kubelet_root_dir(*[read_text(path) for path in KUBELET_FLAG_FILES]) or DEFAULT_KUBELET_ROOT_DIR
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


def gather_disks(thresholds):
    disks = []
    for path in sorted(thresholds):
        existing = nearest_existing(path)
        try:
            stats = os.statvfs(existing)
            free_mib = stats.f_bavail * stats.f_frsize // MIB
        except OSError:
            free_mib = None
        disks.append({"path": path, "mount": mount_point(existing), "free_mib": free_mib,
                      "min_free_mib": int(thresholds[path])})
    return disks


def main():
    module = AnsibleModule(
        argument_spec=dict(
            driver_version=dict(type="str"),
            cuda_version=dict(type="str"),
            kernel_module_type=dict(type="str", default="auto", choices=["auto", "open", "proprietary"]),
            secure_boot_sign=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            mok_certificate=dict(type="path", default="/var/lib/gpuops/mok/MOK.der"),
            mok_private_key=dict(type="path", default="/var/lib/gpuops/mok/MOK.priv"),
            allow_key_creation=dict(type="bool", default=True),
            allow_key_enrollment=dict(type="bool", default=True),
            kubelet_root_dir=dict(type="path"),
            require_kubelet=dict(type="bool", default=True),
            require_containerd=dict(type="bool", default=True),
            container_runtime_path=dict(type="str", default="auto", choices=["auto", "cdi", "legacy"]),
            gpu_operator=dict(type="bool", default=False),
            min_free_mib=dict(type="dict", default={"/var": 2048, "/usr": 1024, "/boot": 256, "/tmp": 768}),
            swap_off=dict(type="bool", default=True),
            hugepages_total=dict(type="int"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for path, value in params["min_free_mib"].items():
        if not str(path).startswith("/") or not str(value).isdigit():
            module.fail_json(msg="min_free_mib maps absolute paths to MiB (whole numbers): %r: %r is not" % (path, value))
    runner = Runner(module)
    secure_boot, mokutil = gather_secure_boot(runner)
    facts = {
        "pci_devices": gather_pci(),
        "nouveau_loaded": nouveau_loaded(runner),
        "secure_boot": secure_boot,
        "mok": gather_mok(runner, mokutil, secure_boot),
        "kernel": gather_kernel(),
        "containerd": gather_containerd(runner),
        "kubelet": gather_kubelet(params["kubelet_root_dir"]),
        "disks": gather_disks(params["min_free_mib"]),
        "swap": parse_swaps(read_text(PROC_SWAPS)),
        "hugepages": parse_meminfo_hugepages(read_text(PROC_MEMINFO)),
    }
    requirements = dict((key, params[key]) for key in (
        "driver_version", "cuda_version", "kernel_module_type", "secure_boot_sign", "allow_key_creation",
        "allow_key_enrollment", "require_kubelet", "require_containerd", "container_runtime_path", "gpu_operator",
        "swap_off", "hugepages_total"))
    facts["verdict"] = evaluate(facts, requirements)
    facts["failure_message"] = "" if facts["verdict"]["ok"] else failure_message(
        os.uname()[1], facts["verdict"])
    module.exit_json(changed=False, ansible_facts={"gpu_node_precheck": facts})


if __name__ == "__main__":
    main()
