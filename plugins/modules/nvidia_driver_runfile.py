#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_runfile
short_description: Install or remove the NVIDIA driver with NVIDIA's runfile, exactly at the version asked for
version_added: 0.1.0
description:
  - Installs the driver O(version) from the runfile O(runfile) already on the node, the runbook's way
    (C(--silent --dkms --no-drm), the kernel module flavour, the module-signing key), or removes it.
  - Idempotent. The node is at the request when the userspace driver (what C(libnvidia-ml.so.1) resolves to)
    and the C(nvidia) module C(modinfo -k) finds for the target kernel are that version, of the flavour asked
    for and, when O(signer) is set, signed by it. Then nothing runs.
  - Before running the installer it checks the request (malformed version, checksum mismatch with O(sha256),
    GPUs the flavour does not support) and looks for processes using the GPUs (C(nvidia-smi -q -x)); with
    some, it fails unless O(allow_gpu_processes). Nothing on the node is changed when one of these fails.
  - Never reboots. Returns RV(reboot_required) and what the next boot must show (RV(next_boot)), and keeps a
    record of the installed and the previous version and method in O(state_dir)C(/nvidia_driver.json) so a
    rollback can reinstall the previous one.
author: gpuops.nvidia contributors (@gpuops)
options:
  version:
    description: The full driver version (C(580.95.05)); the version of the runfile.
    type: str
    required: true
  state:
    description: V(present) installs O(version); V(absent) uninstalls the runfile driver.
    type: str
    choices: [present, absent]
    default: present
  runfile:
    description: Path of the runfile on the node. Required with O(state=present).
    type: path
  sha256:
    description: The runfile's expected SHA-256 (hex); verified before it runs.
    type: str
  kernel_module_type:
    description:
      - V(open) or V(proprietary) kernel modules; V(auto) picks by the GPUs on the PCI bus (open for Turing and
        newer, required from Blackwell; proprietary for Volta and older) and the driver branch.
    type: str
    choices: [auto, open, proprietary]
    default: auto
  dkms:
    description: Register the module sources with DKMS (C(--dkms)) so kernel updates rebuild them.
    type: bool
    default: true
  no_drm:
    description: Leave out nvidia-drm (C(--no-drm)); compute nodes have no display.
    type: bool
    default: true
  signing_key:
    description: Private key the installer signs the modules with (C(--module-signing-secret-key)).
    type: path
  signing_certificate:
    description: Certificate of O(signing_key) (C(--module-signing-public-key)).
    type: path
  signer:
    description:
      - The signer name C(modinfo) must show on the installed module (the certificate's common name); a module
        signed by another key is reinstalled.
    type: str
  kernel_release:
    description: The kernel to build the module for; default the running kernel.
    type: str
  allow_gpu_processes:
    description: Change the driver although processes use the GPUs (they will fail); default is to refuse.
    type: bool
    default: false
  extra_args:
    description: More installer options, appended as given.
    type: list
    elements: str
    default: []
  state_dir:
    description: Where the install record C(nvidia_driver.json) is kept.
    type: path
    default: /var/lib/gpuops
  timeout:
    description: Seconds the installer may run.
    type: int
    default: 1800
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: linux
notes:
  - Needs root, the kernel headers of the target kernel and, with O(dkms), C(dkms).
  - With O(dkms), DKMS builds and signs the module with its own configured key (C(mok_signing_key) in
    C(/etc/dkms/framework.conf.d/)); M(gpuops.nvidia.mok_signing_key) points it at the same key as O(signing_key).
seealso:
  - module: gpuops.nvidia.mok_signing_key
  - module: gpuops.nvidia.nvidia_driver_facts
"""

EXAMPLES = r"""
- name: Install 580.95.05, signed with the node's MOK
  gpuops.nvidia.nvidia_driver_runfile:
    version: 580.95.05
    runfile: /var/lib/gpuops/runfiles/NVIDIA-Linux-x86_64-580.95.05.run
    sha256: 2d8e1b0a7c6b4f5e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c
    signing_key: /var/lib/gpuops/mok/MOK.priv
    signing_certificate: /var/lib/gpuops/mok/MOK.der
    signer: gpuops.nvidia module signing key
  register: driver

- name: Tell the runbook what the next boot must show
  ansible.builtin.debug:
    var: driver.next_boot
  when: driver.reboot_required
"""

RETURN = r"""
installed:
  description: The driver the node holds after the run (version, method, kernel module type, signer).
  returned: always
  type: dict
  sample: {version: 580.95.05, method: runfile, kernel_module_type: open, signer: gpuops.nvidia module signing key}
previous:
  description: What was there before (from the record, or detected with method V(unknown)); null on a bare node.
  returned: always
  type: dict
  sample: {version: 570.172.08, method: runfile, kernel_module_type: open}
reasons:
  description: Why the node was not at the request (empty when nothing had to change).
  returned: always
  type: list
  elements: str
kernel_module_type_reason:
  description: Why this flavour (V(requested) or the GPU generation rule).
  returned: always
  type: str
reboot_required:
  description: The loaded module is not the requested version; the runbook reboots (this module never does).
  returned: always
  type: bool
next_boot:
  description: What the next boot must show.
  returned: always
  type: dict
  sample: {driver_version: 580.95.05, kernel_module_type: open, signer: gpuops.nvidia module signing key}
gpu_processes:
  description: Processes that used the GPUs before the change.
  returned: always
  type: list
  elements: dict
installer_argv:
  description: The installer command line run (or that would run in check mode); empty when nothing ran.
  returned: always
  type: list
  elements: str
"""

import datetime
import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.files import read_text, write_atomic
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
    NVML_LIBRARY_DIRS,
    nvml_library_version_from_filename,
    parse_modinfo,
    read_pci_devices,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.gpu_support import generation_of, resolve_module_type
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_install import (
    differences,
    installed_state,
    installer_argv,
    new_record,
    next_boot,
    parse_gpu_processes,
    request_problems,
    validate_request,
)

SYSFS_PCI = "/sys/bus/pci/devices"
SYSFS_NVIDIA_VERSION = "/sys/module/nvidia/version"
RECORD_NAME = "nvidia_driver.json"
INSTALLER_LOG = "/var/log/nvidia-installer.log"
QUERY_TIMEOUT = 60  # seconds for modinfo and nvidia-smi; the installer gets the timeout option


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def userspace_version():
    for directory in NVML_LIBRARY_DIRS:
        library = os.path.join(directory, "libnvidia-ml.so.1")
        if os.path.exists(library):
            return nvml_library_version_from_filename(os.path.basename(os.path.realpath(library)))
    return None


def module_info(runner, kernel_release):
    modinfo = runner.find("modinfo")
    if not modinfo:
        return {}
    result = runner.run([modinfo, "-k", kernel_release, "nvidia"])
    return parse_modinfo(result.stdout) if result.rc == 0 else {}


def node_state(runner, kernel_release):
    info = module_info(runner, kernel_release)
    loaded = (read_text(SYSFS_NVIDIA_VERSION) or "").strip() or None
    return installed_state(userspace_version(), info.get("version"), info.get("license"), info.get("signer"), loaded)


def gpu_processes(runner):
    smi = runner.find("nvidia-smi")
    if not smi:
        return []
    result = runner.run([smi, "-q", "-x"])
    return parse_gpu_processes(result.stdout) if result.rc == 0 else []


def load_record(path):
    try:
        return json.loads(read_text(path) or "null")
    except ValueError:
        return None


def write_record(path, record):
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), mode=0o644)


def installer_failure(module, run, **result):
    log_tail = "\n".join((read_text(INSTALLER_LOG) or "").splitlines()[-20:])
    module.fail_json(msg="the NVIDIA installer failed (rc %d): %s" % (run.rc, (run.stderr or run.stdout).strip()),
                     installer_argv=run.argv, installer_log_tail=log_tail, **result)


def resolve_type(module):
    params = module.params
    generations = [generation_of(device["device_id"]) for device in read_pci_devices(SYSFS_PCI)
                   if (device.get("class_id") or "").startswith("0x03")]
    decision = resolve_module_type(params["kernel_module_type"], generations, params["version"])
    if decision["error"]:
        module.fail_json(msg="kernel_module_type=%s: %s; nothing was changed" % (params["kernel_module_type"],
                                                                                 decision["error"]))
    return decision


def ensure_absent(module, runner, record_path, record, state):
    params = module.params
    installed = state["userspace_version"] or state["module_version"]
    result = {"changed": bool(installed), "installed": None, "previous": None, "reasons": [],
              "kernel_module_type_reason": None, "reboot_required": bool(state["loaded_version"]) and bool(installed),
              "next_boot": {"driver_version": None, "kernel_module_type": None, "signer": None},
              "gpu_processes": [], "installer_argv": []}
    if not installed:
        module.exit_json(**result)
    result["previous"] = {"version": installed, "method": (record or {}).get("method") or "unknown",
                          "kernel_module_type": state["module_flavor"]}
    result["gpu_processes"] = gpu_processes(runner)
    if result["gpu_processes"] and not params["allow_gpu_processes"]:
        module.fail_json(msg="%d process(es) use the GPUs; drain the node first (or allow_gpu_processes); nothing "
                             "was changed" % len(result["gpu_processes"]), **result)
    uninstaller = runner.find("nvidia-uninstall")
    if not uninstaller:
        module.fail_json(msg="the driver %s was not installed by a runfile (no nvidia-uninstall): remove it with "
                             "the method that installed it" % installed, **result)
    result["installer_argv"] = [uninstaller, "--silent"]
    if module.check_mode:
        module.exit_json(**result)
    run = runner.run(result["installer_argv"], timeout=params["timeout"])
    if run.rc != 0:
        installer_failure(module, run)
    write_record(record_path, new_record(record, state, None, None, None, None, None, now()))
    module.exit_json(**result)


def now():
    return datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            version=dict(type="str", required=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            runfile=dict(type="path"),
            sha256=dict(type="str"),
            kernel_module_type=dict(type="str", default="auto", choices=["auto", "open", "proprietary"]),
            dkms=dict(type="bool", default=True),
            no_drm=dict(type="bool", default=True),
            signing_key=dict(type="path", no_log=False),
            signing_certificate=dict(type="path"),
            signer=dict(type="str"),
            kernel_release=dict(type="str"),
            allow_gpu_processes=dict(type="bool", default=False),
            extra_args=dict(type="list", elements="str", default=[]),
            state_dir=dict(type="path", default="/var/lib/gpuops"),
            timeout=dict(type="int", default=1800),
        ),
        required_if=[("state", "present", ("runfile",))],
        required_together=[("signing_key", "signing_certificate")],
        supports_check_mode=True,
    )
    params = module.params
    errors = validate_request(params["version"], sha256=params["sha256"])
    errors += request_problems(params["version"], params["dkms"], bool(params["signing_key"]))
    if errors:
        module.fail_json(msg="; ".join(errors) + "; nothing was changed")
    runner = CommandRunner(module, QUERY_TIMEOUT)
    running = os.uname()[2]
    kernel_release = params["kernel_release"] or running
    record_path = os.path.join(params["state_dir"], RECORD_NAME)
    record = load_record(record_path)
    state = node_state(runner, kernel_release)
    if params["state"] == "absent":
        ensure_absent(module, runner, record_path, record, state)

    version = params["version"]
    runfile = params["runfile"]
    runfile_sha256 = None
    if os.path.exists(runfile):
        runfile_sha256 = sha256_of(runfile)
        if params["sha256"] and runfile_sha256 != params["sha256"].lower():
            module.fail_json(msg="checksum mismatch for %s: expected sha256 %s, the file has %s; nothing was changed"
                             % (runfile, params["sha256"].lower(), runfile_sha256))
    elif not module.check_mode:
        module.fail_json(msg="the runfile %s is not on the node; nothing was changed" % runfile)
    decision = resolve_type(module)
    module_type = decision["module_type"]
    reasons = differences(state, version, module_type, params["signer"])
    argv = installer_argv(runfile, version, module_type, params["dkms"], params["no_drm"], params["signing_key"],
                          params["signing_certificate"], kernel_release, running, params["extra_args"])
    previous = (record or {}).get("previous") if not reasons else None
    result = {"changed": bool(reasons), "reasons": reasons, "kernel_module_type_reason": decision["reason"],
              "installed": {"version": version, "method": "runfile", "kernel_module_type": module_type,
                            "signer": params["signer"]},
              "previous": previous, "gpu_processes": [], "installer_argv": argv if reasons else [],
              "diff": {"before": {"version": state["userspace_version"], "kernel_module": state["module_version"],
                                  "kernel_module_type": state["module_flavor"], "signer": state["module_signer"]},
                       "after": {"version": version, "kernel_module": version, "kernel_module_type": module_type,
                                 "signer": params["signer"] or state["module_signer"]}}}
    result["reboot_required"], result["next_boot"] = next_boot(version, module_type, params["signer"],
                                                               state["loaded_version"])
    if not reasons:
        module.exit_json(**result)

    new = new_record(record, state, version, "runfile", module_type, params["signer"], runfile_sha256, now())
    result["previous"] = new["previous"]
    if state["loaded_version"]:
        result["gpu_processes"] = gpu_processes(runner)
        if result["gpu_processes"] and not params["allow_gpu_processes"]:
            module.fail_json(msg="%d process(es) use the GPUs (%s); drain the node first, or set allow_gpu_processes; "
                                 "nothing was changed" % (len(result["gpu_processes"]), ", ".join(
                                     "%s[%s]" % (proc["name"], proc["pid"]) for proc in result["gpu_processes"])),
                             **result)
    if module.check_mode:
        module.exit_json(**result)

    workdir = os.path.join(module.tmpdir, "runfile")
    os.makedirs(workdir)
    run = runner.run(argv, timeout=params["timeout"], cwd=workdir)
    if run.rc != 0:
        installer_failure(module, run, previous=result["previous"])
    after = node_state(runner, kernel_release)
    left = differences(after, version, module_type, params["signer"])
    if left:
        module.fail_json(msg="the installer succeeded but the node is not at the request: %s" % "; ".join(left),
                         installer_argv=argv, previous=result["previous"])
    write_record(record_path, new)
    result["reboot_required"], result["next_boot"] = next_boot(version, module_type, params["signer"],
                                                               after["loaded_version"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
