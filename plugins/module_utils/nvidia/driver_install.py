# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA driver install decisions (private to this collection): the runfile's name and command line, whether
the node already has what was asked, the record kept on the node for rollbacks, and what the next boot must
show. No I/O here; nvidia_driver_runfile gathers and acts.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import gpu_support as gpu

# -M/--kernel-module-type appeared in 555.42.02; older runfiles only know -m=kernel-open (deprecated since).
KERNEL_MODULE_TYPE_OPTION_BRANCH = 555
# Before 520 the installer silently dropped --dkms when module-signing keys were given.
DKMS_WITH_SIGNING_BRANCH = 520
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
RECORD_VERSION = 1


def validate_request(version, sha256=None):
    """Error messages for a malformed request (empty list when fine)."""
    errors = []
    if not gpu.is_driver_version(version):
        errors.append("version %r is not a full NVIDIA driver version (branch.minor[.patch], e.g. 580.95.05)"
                      % (version,))
    if sha256 and not SHA256_RE.match(sha256):
        errors.append("the runfile checksum %r is not a sha256 hex digest (64 hex digits)" % (sha256,))
    return errors


def installer_argv(runfile, version, module_type, dkms=True, no_drm=True, signing_key=None,
                   signing_certificate=None, kernel_release=None, running_release=None, extra_args=None):
    """The runfile command line of the runbook: --silent --dkms --no-drm, the flavour, the signing keys."""
    branch = (gpu.parse_driver_version(version) or (0,))[0]
    argv = ["sh", runfile, "--silent"]
    if dkms:
        argv.append("--dkms")
    if no_drm:
        argv.append("--no-drm")
    if module_type:
        if branch >= KERNEL_MODULE_TYPE_OPTION_BRANCH:
            argv.append("--kernel-module-type=%s" % module_type)
        elif module_type == "open":
            argv.append("--kernel-module-build-directory=kernel-open")
    if signing_key and signing_certificate:
        argv += ["--module-signing-secret-key=%s" % signing_key,
                 "--module-signing-public-key=%s" % signing_certificate]
    if kernel_release and running_release and kernel_release != running_release:
        argv.append("--kernel-name=%s" % kernel_release)
    return argv + list(extra_args or [])


def request_problems(version, dkms, signing):
    """Combinations the installer would mishandle silently."""
    branch = (gpu.parse_driver_version(version) or (0,))[0]
    if dkms and signing and branch and branch < DKMS_WITH_SIGNING_BRANCH:
        return ["driver %s predates %d: its installer drops --dkms when module-signing keys are given, so kernel "
                "updates would leave the module unbuilt; use a %d+ driver or dkms: false" % (
                    version, DKMS_WITH_SIGNING_BRANCH, DKMS_WITH_SIGNING_BRANCH)]
    return []


def installed_state(userspace_version, module_version, module_license, module_signer, loaded_version):
    """What the node has for one kernel: the userspace driver, the module on disk (version, flavour, signer)."""
    flavor = None
    if module_license:
        flavor = "open" if ("MIT" in module_license or "GPL" in module_license) else "proprietary"
    return {"userspace_version": userspace_version, "module_version": module_version, "module_flavor": flavor,
            "module_signer": module_signer, "loaded_version": loaded_version}


def differences(state, version, module_type, signer_cn):
    """Why the node is not at the request (empty when it is): the idempotence test."""
    reasons = []
    if state["userspace_version"] != version:
        reasons.append("userspace driver is %s" % (state["userspace_version"] or "not installed"))
    if state["module_version"] != version:
        reasons.append("kernel module for the target kernel is %s" % (state["module_version"] or "not built"))
    elif module_type and state["module_flavor"] and state["module_flavor"] != module_type:
        reasons.append("kernel module is the %s flavour" % state["module_flavor"])
    if state["module_version"] == version and signer_cn and state["module_signer"] != signer_cn:
        reasons.append("kernel module is signed by %s, not %s" % (state["module_signer"] or "no key", signer_cn))
    return reasons


def next_boot(version, module_type, signer_cn, loaded_version):
    """(reboot_required, what the next boot must show) after the node holds the requested driver."""
    expected = {"driver_version": version, "kernel_module_type": module_type, "signer": signer_cn}
    return loaded_version != version, expected


def new_record(previous_record, state, version, method, module_type, signer_cn, runfile_sha256, now):
    """The record written to the node: what is installed and what was there before (for a rollback)."""
    if previous_record and previous_record.get("version"):
        previous = {key: previous_record.get(key) for key in ("version", "method", "kernel_module_type")}
    elif state.get("userspace_version") or state.get("module_version"):
        previous = {"version": state.get("userspace_version") or state.get("module_version"), "method": "unknown",
                    "kernel_module_type": state.get("module_flavor")}
    else:
        previous = None
    return {"format": RECORD_VERSION, "version": version, "method": method, "kernel_module_type": module_type,
            "signer": signer_cn, "runfile_sha256": runfile_sha256, "installed_at": now, "previous": previous}


def parse_gpu_processes(xml_text):
    """Processes using a GPU, from `nvidia-smi -q -x`: [{gpu_bus_id, pid, name, type, used_memory_mib}]."""
    try:
        root = ElementTree.fromstring(xml_text or "")
    except ElementTree.ParseError:
        return []
    processes = []
    for gpu_element in root.findall("gpu"):
        bus_id = gpu_element.get("id")
        for info in gpu_element.findall("processes/process_info"):
            memory = (info.findtext("used_memory") or "").split()
            processes.append({
                "gpu_bus_id": bus_id,
                "pid": int(info.findtext("pid")) if (info.findtext("pid") or "").isdigit() else None,
                "name": info.findtext("process_name"),
                "type": info.findtext("type"),
                "used_memory_mib": int(memory[0]) if memory and memory[0].isdigit() else None,
            })
    return processes
