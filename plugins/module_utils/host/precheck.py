# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU node pre-check's decisions (private to this collection): parsers for what node_precheck_facts reads,
and ``evaluate`` which turns the gathered facts and the requirements into a verdict listing every unmet
requirement with its remedy. No I/O here.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import gpu_support as gpu

CONTAINERD_VERSION_RE = re.compile(r"\bv?(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)")
CONTAINERD_CDI_MIN = "1.7.0"
CONTAINERD_GPU_OPERATOR_MIN = "2.0.0"
KUBELET_ROOT_DIR_RE = re.compile(r"--root-dir(?:=|\s+)(?P<dir>\S+)")
DEFAULT_KUBELET_ROOT_DIR = "/var/lib/kubelet"


# ---------------------------------------------------------------- parsers


def parse_containerd_version(text):
    """`containerd --version` -> '1.7.20' (Debian's '1.6.20~ds1' -> '1.6.20'); None when not found.

    Output shapes: ``containerd containerd.io 1.7.20 8fc6bcff...``, ``containerd github.com/containerd/containerd
    v2.0.0 207ad71...``, ``containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3``.
    """
    for word in (text or "").split()[1:]:
        match = CONTAINERD_VERSION_RE.match(word)
        if match and not word.startswith(("github.com", "containerd")):
            return match.group("version")
    return None


def parse_kubelet_root_dir(*texts):
    """--root-dir from kubelet flag files (kubeadm-flags.env, /etc/default/kubelet); None when not set."""
    for text in texts:
        match = KUBELET_ROOT_DIR_RE.search(text or "")
        if match:
            return match.group("dir").strip("\"'")
    return None


def parse_swaps(text):
    """/proc/swaps -> [{device, size_kib}] of active swap areas."""
    areas = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].isdigit():
            areas.append({"device": fields[0], "size_kib": int(fields[2])})
    return areas


def parse_meminfo_hugepages(text):
    """/proc/meminfo -> {total, free, size_kib} of the default huge page size (None where absent)."""
    values = {}
    for line in (text or "").splitlines():
        key, _sep, rest = line.partition(":")
        number = rest.split()
        if number and number[0].isdigit():
            values[key.strip()] = int(number[0])
    return {"total": values.get("HugePages_Total"), "free": values.get("HugePages_Free"),
            "size_kib": values.get("Hugepagesize")}


def kernel_release_key(release):
    """Sort key of kernel releases ('6.1.0-18-amd64' < '6.1.0-27-amd64' < '6.12.9-200.fc41')."""
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.\-+~_]", release or ""))


def newest_kernel(releases):
    return max(releases, key=kernel_release_key) if releases else None


# ---------------------------------------------------------------- evaluation


def _finding(code, message, remedy):
    return {"code": code, "message": message, "remedy": remedy}


def _check_gpus(facts, requirements, unmet, notes):
    """GPUs present, nouveau, and what the requested driver / CUDA versions support. Returns the module type."""
    gpus = [device for device in facts.get("pci_devices") or [] if (device.get("class_id") or "").startswith("0x03")]
    if not gpus:
        unmet.append(_finding("no_nvidia_gpu", "No NVIDIA GPU is visible on the PCI bus.",
                              "Check the GPU is seated and enabled in the BIOS (lspci -d 10de:), or leave this "
                              "host out of the GPU node group."))
        return None
    if facts.get("nouveau_loaded") or any(device.get("driver") == "nouveau" for device in gpus):
        notes.append(_finding("nouveau_loaded", "The nouveau driver is loaded.",
                              "The nvidia_driver role blacklists it and rebuilds the initramfs; a reboot then "
                              "unloads it."))
    generations = [gpu.generation_of(device.get("device_id")) for device in gpus]
    driver_version = requirements.get("driver_version")
    if driver_version:
        if not gpu.is_driver_version(driver_version):
            unmet.append(_finding("driver_version_malformed",
                                  "Requested driver version %r is not a full NVIDIA driver version." % driver_version,
                                  "Give the full version, e.g. 580.95.05 (branch.minor.patch)."))
        else:
            for generation in sorted(set(generation for generation in generations if generation),
                                     key=gpu.generation_rank):
                why = gpu.driver_supports_generation(driver_version, generation)
                if why:
                    unmet.append(_finding("driver_unsupported_gpu", "Driver %s does not support this node's %s GPUs: "
                                          "%s." % (driver_version, generation.capitalize(), why),
                                          "Request a driver branch that supports them."))
    module = gpu.resolve_module_type(requirements.get("kernel_module_type") or "auto", generations, driver_version)
    if module["error"]:
        unmet.append(_finding("kernel_module_type_unsupported", "Kernel modules: %s." % module["error"],
                              "Set the kernel module type the GPUs support (open for Turing and newer, "
                              "proprietary for Volta and older)."))
    _check_cuda(requirements, driver_version, generations, unmet)
    return module["module_type"]


def _check_cuda(requirements, driver_version, generations, unmet):
    cuda_version = requirements.get("cuda_version")
    if not cuda_version:
        return
    minimum, how = gpu.cuda_min_driver(cuda_version)
    if how == "malformed":
        unmet.append(_finding("cuda_version_malformed", "Requested CUDA version %r is malformed." % cuda_version,
                              "Give it as major.minor, e.g. 12.8."))
        return
    if minimum is None:
        unmet.append(_finding("cuda_version_unknown", "CUDA %s: %s." % (cuda_version, how),
                              "Check the CUDA release notes for the driver it needs."))
    elif driver_version and gpu.parse_driver_version(driver_version) and not gpu.version_at_least(
            driver_version, minimum):
        unmet.append(_finding("driver_too_old_for_cuda", "CUDA %s needs driver %s or newer (%s); %s was requested."
                              % (cuda_version, minimum, how, driver_version),
                              "Request driver %s or newer, or an older CUDA version." % minimum))
    for generation in sorted(set(generation for generation in generations if generation), key=gpu.generation_rank):
        why = gpu.cuda_supports_generation(cuda_version, generation)
        if why:
            unmet.append(_finding("cuda_unsupported_gpu", "%s." % why,
                                  "Use CUDA 12.x for these GPUs, or newer GPUs for CUDA %s." % cuda_version))


def _check_secure_boot(facts, requirements, unmet, notes):
    secure_boot = facts.get("secure_boot") or {}
    sign = requirements.get("secure_boot_sign") or "auto"
    must_sign = sign == "always" or (sign == "auto" and secure_boot.get("enabled"))
    if sign == "never" and secure_boot.get("enabled"):
        unmet.append(_finding("secure_boot_signing_disabled",
                              "Secure Boot is enabled but module signing is turned off: the kernel will refuse "
                              "the NVIDIA modules.", "Set secure_boot_sign to auto, or disable Secure Boot."))
        return
    if not must_sign:
        return
    mok = facts.get("mok") or {}
    tools = mok.get("tools") or {}
    if mok.get("enrolled"):
        notes.append(_finding("mok_enrolled", "The signing key %s is enrolled." % mok.get("certificate_path"), ""))
        return
    if not requirements.get("allow_key_enrollment", True) and (
            mok.get("key_present") or mok.get("pending") or requirements.get("allow_key_creation", True)):
        # an unattended run: a key staged now, or created and staged, is only enrolled if someone confirms it at
        # the console at the next boot; without that the kernel refuses the signed modules after the reboot
        unmet.append(_finding("secure_boot_key_not_enrolled",
                              "Module signing is needed and the signing key %s is not enrolled%s (key enrolment "
                              "is not allowed: it needs someone at the console at the next boot)."
                              % (mok.get("certificate_path"),
                                 ", only staged" if mok.get("pending")
                                 else "" if mok.get("key_present") else ", nor present"),
                              "Enrol the key first (mokutil --import, confirmed at the console in MokManager), or "
                              "point the signing key variables at a key that is enrolled."))
        return
    if mok.get("pending"):
        notes.append(_finding("mok_enrollment_pending", "The signing key %s is staged for enrolment."
                              % mok.get("certificate_path"),
                              "Confirm it at the console (MokManager) at the next boot."))
        return
    problems = []
    if not mok.get("key_present") and not requirements.get("allow_key_creation", True):
        problems.append(_finding("secure_boot_no_signing_key",
                                 "Module signing is needed and no signing key is at %s (key creation is not allowed)."
                                 % mok.get("certificate_path"),
                                 "Provide the MOK key pair (vault variables) or allow the role to create one."))
    missing = [name for name, needed in (("openssl", not mok.get("key_present")),
                                         ("mokutil", secure_boot.get("enabled"))) if needed and not tools.get(name)]
    if missing:
        problems.append(_finding("secure_boot_tools_missing", "Module signing needs %s, not installed here."
                                 % " and ".join(missing), "Install the %s package(s)." % " ".join(missing)))
    unmet.extend(problems)
    if not problems:
        notes.append(_finding("mok_to_stage", "The signing key will be %s and staged for enrolment."
                              % ("used" if mok.get("key_present") else "created"),
                              "Someone confirms it at the console (MokManager) at the next boot."))


def _check_kernel(facts, unmet):
    kernel = facts.get("kernel") or {}
    if not kernel.get("running_headers"):
        unmet.append(_finding("kernel_headers_missing", "No kernel headers for the running kernel %s "
                              "(/lib/modules/%s/build)." % (kernel.get("running"), kernel.get("running")),
                              "Install the headers package of the running kernel (linux-headers-%s, or "
                              "kernel-devel-%s on Rocky)." % (kernel.get("running"), kernel.get("running"))))
    newest = kernel.get("newest_installed")
    if newest and newest != kernel.get("running") and not kernel.get("newest_headers"):
        unmet.append(_finding("kernel_headers_missing_next_boot", "Kernel %s is installed and will run at the next "
                              "boot, but has no headers: DKMS cannot build the module for it." % newest,
                              "Install linux-headers-%s (kernel-devel-%s on Rocky), or remove that kernel."
                              % (newest, newest)))


def _check_containerd(facts, requirements, unmet, notes):
    """Returns the runtime path: 'cdi', 'legacy' or None (no containerd)."""
    containerd = facts.get("containerd") or {}
    version = containerd.get("version")
    wanted = requirements.get("container_runtime_path") or "auto"
    if not containerd.get("present"):
        if requirements.get("require_containerd", True):
            unmet.append(_finding("containerd_missing", "containerd is not installed.",
                                  "Install containerd (1.7 or newer for CDI) before the GPU runtime."))
        return None
    if version is None:
        unmet.append(_finding("containerd_version_unknown", "containerd is installed but `containerd --version` "
                              "gave no version.", "Check the containerd binary runs."))
        return None
    cdi_capable = gpu.version_at_least(version, CONTAINERD_CDI_MIN)
    if requirements.get("gpu_operator") and not gpu.version_at_least(version, CONTAINERD_GPU_OPERATOR_MIN):
        unmet.append(_finding("containerd_too_old_for_gpu_operator", "GPU Operator 26.x needs containerd 2.0 or "
                              "newer; this node has %s." % version, "Upgrade containerd to 2.x."))
    if wanted == "cdi" and not cdi_capable:
        unmet.append(_finding("containerd_too_old_for_cdi", "CDI needs containerd 1.7 or newer; this node has %s."
                              % version, "Upgrade containerd, or use the legacy runtime path."))
        return None
    if not cdi_capable:
        notes.append(_finding("containerd_legacy_only", "containerd %s predates CDI (1.7): only the legacy "
                              "nvidia runtime path is possible." % version,
                              "Upgrade containerd to 1.7+ to use CDI."))
        return "legacy"
    return "legacy" if wanted == "legacy" else "cdi"


def _check_host(facts, requirements, unmet):
    kubelet = facts.get("kubelet") or {}
    if requirements.get("require_kubelet", True) and not kubelet.get("device_plugin_dir_present"):
        unmet.append(_finding("kubelet_device_plugin_dir_missing", "The kubelet device-plugin directory %s does not "
                              "exist." % kubelet.get("device_plugin_dir"),
                              "Join the node to the cluster first (kubeadm join), or set the kubelet root dir "
                              "if it is not %s." % DEFAULT_KUBELET_ROOT_DIR))
    for disk in facts.get("disks") or []:
        if disk.get("free_mib") is None:
            continue
        if disk["free_mib"] < disk["min_free_mib"]:
            unmet.append(_finding("disk_free_low", "%s (on %s) has %d MiB free, %d MiB needed."
                                  % (disk["path"], disk.get("mount") or disk["path"], disk["free_mib"],
                                     disk["min_free_mib"]), "Free space on %s." % (disk.get("mount") or disk["path"])))
    swap = facts.get("swap") or []
    if requirements.get("swap_off", True) and swap:
        unmet.append(_finding("swap_on", "Swap is on (%s): the kubelet refuses to run with swap by default."
                              % ", ".join(area["device"] for area in swap),
                              "swapoff -a and remove the swap entries from /etc/fstab."))
    wanted_pages = requirements.get("hugepages_total")
    hugepages = facts.get("hugepages") or {}
    if wanted_pages is not None and hugepages.get("total") != wanted_pages:
        unmet.append(_finding("hugepages_mismatch", "HugePages_Total is %s, %d configured."
                              % (hugepages.get("total"), wanted_pages),
                              "Set vm.nr_hugepages=%d (sysctl) or the hugepages= kernel argument." % wanted_pages))


def evaluate(facts, requirements):
    """Every unmet requirement (not the first) and the notes, with the decisions the other roles take from it.

    Returns {ok, unmet: [{code, message, remedy}], notes: [...], kernel_module_type, container_runtime_path}.
    """
    unmet, notes = [], []
    module_type = _check_gpus(facts, requirements, unmet, notes)
    _check_secure_boot(facts, requirements, unmet, notes)
    _check_kernel(facts, unmet)
    runtime_path = _check_containerd(facts, requirements, unmet, notes)
    _check_host(facts, requirements, unmet)
    return {"ok": not unmet, "unmet": unmet, "notes": notes, "kernel_module_type": module_type,
            "container_runtime_path": runtime_path}


def failure_message(host, verdict):
    """The one failure text: every unmet requirement, numbered, each with its remedy."""
    lines = ["%s does not meet %d requirement(s) of a GPU node:" % (host, len(verdict["unmet"]))]
    for number, finding in enumerate(verdict["unmet"], start=1):
        lines.append("%d. [%s] %s Remedy: %s" % (number, finding["code"], finding["message"], finding["remedy"]))
    return "\n".join(lines)
