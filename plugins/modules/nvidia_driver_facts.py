#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_facts
short_description: Gather NVIDIA GPU driver facts (PCI, kernel module, Secure Boot, DKMS, NVML, Xid) and diagnose them
version_added: 0.1.0
description:
  - Reads layers 0-2 of the GPU node troubleshooting method, read-only, and returns them as
    C(ansible_facts.nvidia_driver) together with an ordered C(diagnosis).
  - Layer 0 (hardware) from C(/sys/bus/pci/devices); layer 1 (kernel driver) from C(/proc/modules) (or C(lsmod)),
    C(/proc/driver/nvidia/version), C(modinfo nvidia), C(mokutil) (or the efivars C(SecureBoot) and C(SetupMode)
    variables), C(dkms status), C(/lib/modules/<release>/build) and the C(/dev/nvidia*) character devices;
    layer 2 (NVML) from one C(nvidia-smi -q -x) call, plus C(nvidia-smi -L) only when a GPU has MIG enabled.
  - Xid events come from C(dmesg --time-format=iso), then plain C(dmesg), then C(journalctl -k) when C(dmesg) is
    not permitted.
  - A missing tool never fails the module; the facts it would give are null and the diagnosis holds a
    C(data_source_unavailable) (or C(nvidia_smi_not_found)) entry. The module fails only on invalid options.
  - See C(docs/nvidia_driver_facts.md) in the collection for every fact and diagnosis code.
author: gpuops.nvidia contributors (@gpuops)
options:
  nvidia_smi:
    description:
      - Path of the C(nvidia-smi) binary.
      - When not set, C(nvidia-smi) is searched in E(PATH) and the sbin directories.
    type: path
  gather_subset:
    description:
      - Which groups of facts to gather. Choices are V(all), V(pci), V(kernel), V(nvml), V(secure_boot),
        V(dkms) and V(xid).
      - Prefix a name with V(!) to exclude it, as for M(ansible.builtin.setup). A list of only exclusions
        starts from V(all).
      - Facts of groups not gathered keep their empty value (V(null), V([]) or V(false)) and are not diagnosed.
    type: list
    elements: str
    default: [all]
  xid_since_boot:
    description:
      - Only report Xid events of the current boot.
      - C(dmesg) only holds the current boot; when V(false), C(journalctl -k) (all boots in the journal) is
        tried first.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each external command may run.
      - Enforced by running the command under coreutils C(timeout) when that is in E(PATH); without it the
        commands run unbounded.
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
  - Run as root for complete facts; without root C(dmesg) may be refused (C(kernel.dmesg_restrict)) and
    C(/proc/driver/nvidia) is still readable.
seealso:
  - name: NVIDIA Xid errors
    description: NVIDIA's catalog of Xid error codes.
    link: https://docs.nvidia.com/deploy/xid-errors/index.html
"""

EXAMPLES = r"""
- name: Gather NVIDIA driver facts
  gpuops.nvidia.nvidia_driver_facts:

- name: Fail when the node has a critical driver problem
  ansible.builtin.assert:
    that: ansible_facts.nvidia_driver.diagnosis | selectattr('severity', 'equalto', 'critical') | list | length == 0
    fail_msg: "{{ ansible_facts.nvidia_driver.diagnosis | map(attribute='message') | list }}"

- name: Only the kernel side, without the Xid scan
  gpuops.nvidia.nvidia_driver_facts:
    gather_subset: [kernel, secure_boot, dkms]

- name: Everything but DKMS, with a custom nvidia-smi
  gpuops.nvidia.nvidia_driver_facts:
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
    gather_subset: ['!dkms']
    timeout: 60
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    nvidia_driver:
      description: NVIDIA driver state of the host, layers 0-2, and its diagnosis.
      returned: always
      type: dict
      contains:
        pci_devices:
          description: NVIDIA GPU (class 0x03xxxx) and NVSwitch (class 0x0680xx) PCI functions and their bound driver.
          type: list
          elements: dict
          returned: always
          sample: [{address: "0000:18:00.0", vendor_id: "0x10de", device_id: "0x2330", class_id: "0x030200", driver: nvidia}]
        nouveau_loaded:
          description: Whether the nouveau module is loaded.
          type: bool
          returned: always
        kernel_module:
          description:
            - The nvidia kernel module. V(version) and V(flavor) are the loaded module's when loaded, else the on-disk one's.
            - V(signer), V(sig_key), V(license), V(filename) and V(vermagic) come from C(modinfo nvidia).
          type: dict
          returned: always
          sample: {loaded: true, version: "535.129.03", flavor: open, companions: [nvidia_uvm, nvidia_drm],
                   signer: null, sig_key: null, license: "Dual MIT/GPL", filename: /lib/modules/6.1.0-18-amd64/updates/dkms/nvidia.ko,
                   vermagic: "6.1.0-18-amd64 SMP preempt mod_unload modversions"}
        userspace:
          description: What nvidia-smi/NVML says; V(error) and V(error_kind) explain a failure.
          type: dict
          returned: always
          sample: {nvidia_smi_path: /usr/bin/nvidia-smi, driver_version: "535.129.03", cuda_version: "12.2", nvml_ok: true,
                   error: null, error_kind: null, nvml_library_version: null}
        version_mismatch:
          description: The loaded kernel module and the userspace driver have different versions.
          type: bool
          returned: always
        device_nodes:
          description: C(/dev/nvidia*) character devices with their major and minor numbers.
          type: list
          elements: dict
          returned: always
          sample: [{path: /dev/nvidia0, major: 195, minor: 0}]
        gpus:
          description: GPUs as NVML reports them (memory in MiB, power in W, temperature in C), MIG devices included.
          type: list
          elements: dict
          returned: always
        gpu_count:
          description: Number of GPUs NVML reported.
          type: int
          returned: always
        secure_boot:
          description: Secure Boot state; V(enabled) is null on legacy BIOS boots or when it cannot be read.
          type: dict
          returned: always
          sample: {enabled: true, setup_mode: false, source: mokutil}
        mok:
          description: Enrolled and pending Machine Owner Keys (subject, SHA1 fingerprint lower-case without colons).
          type: dict
          returned: always
          sample: {enrolled: [{subject: "CN=ubuntu Secure Boot Module Signature key", fingerprint: "76a092065800bf376901c372cd55a90e1fded2e0"}], pending: []}
        dkms:
          description: C(dkms status) entries of NVIDIA modules.
          type: list
          elements: dict
          returned: always
          sample: [{module: nvidia, version: "535.86.05", kernel: "6.1.0-18-amd64", arch: x86_64, state: installed, warning: null}]
        kernel:
          description:
            - Running kernel release and whether its headers (C(/lib/modules/<release>/build)) are present.
            - V(build_tools_missing) lists what a DKMS build of the module would miss besides the headers (C(dkms),
              C(make), a C compiler, the C library headers); empty when the node can build it, null when the
              V(kernel) subset was not gathered.
          type: dict
          returned: always
          sample: {release: "6.1.0-18-amd64", headers_present: true, headers_path: /lib/modules/6.1.0-18-amd64/build,
                   build_tools_missing: []}
        xid_events:
          description: Xid events from the kernel log.
          type: list
          elements: dict
          returned: always
          sample: [{code: 79, pci_address: "0000:44:00", pid: null, process: null, message: GPU has fallen off the bus, time: null}]
        diagnosis:
          description: Findings ordered by layer (0 hardware, 1 kernel driver, 2 NVML and GPU health) then severity; empty on a healthy node.
          type: list
          elements: dict
          returned: always
          sample: [{layer: 1, code: module_not_loaded, severity: critical, message: The nvidia kernel module is not loaded.,
                    remedy: Run 'modprobe nvidia' and read the kernel log.}]
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.diagnosis import (
    diagnose,
    resolve_gather_subset,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
    COMPANION_MODULES,
    NVML_LIBRARY_DIRS,
    build_kernel_module,
    companion_modules,
    device_node_sort_key,
    is_nvidia_device_node_name,
    kernel_userspace_mismatch,
    nvml_library_version_from_filename,
    nvidia_dkms_entries,
    parse_dkms_status,
    parse_efivar_bool,
    parse_modinfo,
    parse_mok_list,
    parse_module_list,
    parse_proc_version,
    parse_sb_state,
    read_pci_devices,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.smi import (
    classify_error,
    merge_mig_listing,
    parse_list,
    parse_query_xml,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.xid import parse_kernel_log

# Host paths, module level so tests can point them at a fake host tree.
SYSFS_PCI = "/sys/bus/pci/devices"
SYSFS_MODULE = "/sys/module"
SYSFS_EFI = "/sys/firmware/efi"
PROC_MODULES = "/proc/modules"
PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"
DEV_DIR = "/dev"
LIB_MODULES = "/lib/modules"
# What building the kernel module needs besides the kernel headers: DKMS, make, a C compiler, the C library headers.
BUILD_COMMANDS = ("dkms", "make")
C_COMPILERS = ("gcc", "cc")
C_LIBRARY_HEADER = "/usr/include/stdio.h"

EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
TIMEOUT_EXIT_CODE = 124  # coreutils timeout(1) when the command ran too long
USERSPACE_TOOLS = ("nvidia-smi", "dmesg", "journalctl")  # layer 2 sources; every other tool is layer 1

GPU_FACT_KEYS = (
    "index", "uuid", "name", "pci_bus_id", "memory_total_mib", "memory_used_mib", "persistence_mode",
    "compute_mode", "mig_mode_current", "mig_mode_pending", "mig_devices", "ecc_volatile_uncorrectable",
    "ecc_aggregate_uncorrectable", "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure",
    "temperature_c", "power_draw_w", "power_limit_w",
)
MIG_FACT_KEYS = ("index", "gpu_instance_id", "compute_instance_id", "memory_total_mib", "profile", "uuid")


def empty_facts():
    """The contract's shape with the values of 'not gathered'."""
    return {
        "pci_devices": [],
        "nouveau_loaded": False,
        "kernel_module": build_kernel_module(False, None, None, []),
        "userspace": {"nvidia_smi_path": None, "driver_version": None, "cuda_version": None, "nvml_ok": False,
                      "error": None, "error_kind": None, "nvml_library_version": None},
        "version_mismatch": False,
        "device_nodes": [],
        "gpus": [],
        "gpu_count": 0,
        "secure_boot": {"enabled": None, "setup_mode": None, "source": None},
        "mok": {"enrolled": [], "pending": []},
        "dkms": [],
        "kernel": {"release": os.uname()[2], "headers_present": False, "headers_path": None, "build_tools_missing": None},
        "xid_events": [],
        "diagnosis": [],
    }


class HostReader:
    """Runs the read-only commands and file reads; records what could not be read."""

    def __init__(self, module, timeout):
        self.module = module
        self.timeout = timeout
        self.unavailable = []
        self._timeout_bin = module.get_bin_path("timeout")

    def note_unavailable(self, source, layer, reason):
        self.unavailable.append({"source": source, "layer": layer, "reason": reason})

    def find_tool(self, name):
        return self.module.get_bin_path(name)

    def timed_out(self, rc):
        return bool(self._timeout_bin) and rc == TIMEOUT_EXIT_CODE

    def run(self, argv, note_timeout=True):
        """(rc, stdout, stderr) of argv, wrapped in timeout(1) when available; a timeout is noted as unavailable."""
        full_argv = list(argv)
        if self._timeout_bin:
            full_argv = [self._timeout_bin, str(self.timeout)] + full_argv
        rc, out, err = self.module.run_command(full_argv, environ_update={"LC_ALL": "C", "LANG": "C"})
        if note_timeout and self.timed_out(rc):
            tool = os.path.basename(argv[0])
            layer = 2 if tool in USERSPACE_TOOLS else 1
            self.note_unavailable(tool, layer, "timed out after %s seconds" % self.timeout)
        return rc, out, err

    def run_tool(self, name, args, layer, missing_reason):
        """Run tool `name` if installed; None (and a note) when it is not."""
        path = self.find_tool(name)
        if not path:
            if missing_reason:
                self.note_unavailable(name, layer, missing_reason)
            return None
        return self.run([path] + list(args))


def read_text(path):
    try:
        with open(path) as text_file:
            return text_file.read()
    except (IOError, OSError):
        return None


def read_bytes(path):
    try:
        with open(path, "rb") as data_file:
            return data_file.read()
    except (IOError, OSError):
        return None


# ---------------------------------------------------------------- layer 0


def gather_pci(facts):
    facts["pci_devices"] = read_pci_devices(SYSFS_PCI)


# ---------------------------------------------------------------- layer 1


def loaded_modules(reader):
    """Module list from /proc/modules, else lsmod; None when neither is readable."""
    text = read_text(PROC_MODULES)
    if text is None:
        result = reader.run_tool("lsmod", [], 1, "no /proc/modules and lsmod not found: loaded modules unknown")
        if result is None or result[0] != 0:
            return None
        text = result[1]
    return parse_module_list(text)


def loaded_module_version(proc_text):
    proc_version = parse_proc_version(proc_text) if proc_text else {}
    if not proc_version.get("version"):
        sys_version = (read_text(os.path.join(SYSFS_MODULE, "nvidia", "version")) or "").strip()
        proc_version = dict(proc_version, version=sys_version or None)
    return proc_version


def modinfo_nvidia(reader):
    result = reader.run_tool("modinfo", ["nvidia"], 1, "modinfo not found: on-disk module, signer and license unknown")
    if result is None or result[0] != 0:
        return {}
    return parse_modinfo(result[1])


def gather_device_nodes():
    paths = []
    for directory in (DEV_DIR, os.path.join(DEV_DIR, "nvidia-caps")):
        try:
            names = os.listdir(directory)
        except (IOError, OSError):
            continue
        paths.extend(os.path.join(directory, name) for name in names if is_nvidia_device_node_name(name))
    nodes = []
    for path in sorted(paths, key=device_node_sort_key):
        try:
            node_stat = os.stat(path)
        except (IOError, OSError):
            continue
        if stat.S_ISCHR(node_stat.st_mode):
            nodes.append({"path": path, "major": os.major(node_stat.st_rdev), "minor": os.minor(node_stat.st_rdev)})
    return nodes


def gather_kernel_release(reader):
    release = os.uname()[2]
    headers_path = os.path.join(LIB_MODULES, release, "build")
    present = os.path.isdir(headers_path)
    return {"release": release, "headers_present": present, "headers_path": headers_path if present else None,
            "build_tools_missing": missing_build_tools(reader.find_tool)}


def missing_build_tools(find_tool):
    """What a DKMS build of the module would miss, by name (empty when it can build)."""
    missing = [name for name in BUILD_COMMANDS if not find_tool(name)]
    if not any(find_tool(name) for name in C_COMPILERS):
        missing.append("gcc")
    if not os.path.exists(C_LIBRARY_HEADER):
        missing.append("C library headers")
    return missing


def modules_in_sysfs():
    """NVIDIA and nouveau modules that have a /sys/module entry (the kernel creates it when loading them)."""
    names = ("nvidia", "nouveau") + COMPANION_MODULES
    return set(name for name in names if os.path.isdir(os.path.join(SYSFS_MODULE, name)))


def gather_kernel(reader, facts):
    # /proc/modules (or lsmod) and /sys/module agree on a real host; either one is enough.
    names = set(module["name"] for module in loaded_modules(reader) or []) | modules_in_sysfs()
    loaded = "nvidia" in names
    facts["nouveau_loaded"] = "nouveau" in names
    facts["kernel_module"] = build_kernel_module(
        loaded, loaded_module_version(read_text(PROC_DRIVER_VERSION)) if loaded else None, modinfo_nvidia(reader),
        companion_modules(names),
    )
    facts["device_nodes"] = gather_device_nodes()
    facts["kernel"] = gather_kernel_release(reader)


def efivar_flag(name):
    return parse_efivar_bool(read_bytes(os.path.join(SYSFS_EFI, "efivars", "%s-%s" % (name, EFI_GLOBAL_GUID))))


def secure_boot_from_efivars():
    efivars_dir = os.path.join(SYSFS_EFI, "efivars")
    if not os.path.isdir(SYSFS_EFI) or not os.path.isdir(efivars_dir) or not os.listdir(efivars_dir):
        return {"enabled": None, "setup_mode": None, "source": None}  # legacy BIOS or efivarfs not mounted
    enabled = efivar_flag("SecureBoot")
    return {"enabled": bool(enabled), "setup_mode": efivar_flag("SetupMode"), "source": "efivars"}


def mok_keys(reader, mokutil, option):
    """Keys of `mokutil option`; [] and a note when it fails, so the diagnosis reads the list as unknown."""
    rc, out, err = reader.run([mokutil, option])
    if rc == 0:
        return parse_mok_list(out)
    if not reader.timed_out(rc):  # reader.run noted the timeout
        said = (err or out).strip().splitlines()
        reader.note_unavailable("mokutil", 1, "mokutil %s failed (rc %s: %s): MOK keys unknown"
                                % (option, rc, said[0] if said else "no output"))
    return []


def gather_secure_boot(reader, facts):
    mokutil = reader.find_tool("mokutil")
    state = None
    if mokutil:
        rc, out, err = reader.run([mokutil, "--sb-state"])
        state = parse_sb_state(out + "\n" + err)
    else:
        reader.note_unavailable("mokutil", 1, "mokutil not found: Secure Boot read from efivars, MOK keys unknown")
    if state is None:
        facts["secure_boot"] = secure_boot_from_efivars()
    else:
        facts["secure_boot"] = dict(state, source="mokutil")
    if mokutil and facts["secure_boot"]["enabled"] is not None:
        facts["mok"] = {"enrolled": mok_keys(reader, mokutil, "--list-enrolled"),
                        "pending": mok_keys(reader, mokutil, "--list-new")}


def gather_dkms(reader, facts):
    # No dkms is normal (runfile or prebuilt packages), so its absence is not reported.
    result = reader.run_tool("dkms", ["status"], 1, None)
    if result is not None:
        facts["dkms"] = nvidia_dkms_entries(parse_dkms_status(result[1]))


# ---------------------------------------------------------------- kernel log


def kernel_log_commands(since_boot):
    dmesg = [["dmesg", "--time-format=iso"], ["dmesg"]]
    journal = [["journalctl", "-k", "--no-pager", "-o", "short-iso"] + (["-b"] if since_boot else [])]
    return dmesg + journal if since_boot else journal + dmesg


def read_kernel_log(reader, since_boot):
    for argv in kernel_log_commands(since_boot):
        path = reader.find_tool(argv[0])
        if not path:
            continue
        rc, out, err = reader.run([path] + argv[1:])
        if rc == 0:
            return out  # the first command that works is the kernel log, even when it is empty
    return None


def gather_xid(reader, facts, since_boot):
    text = read_kernel_log(reader, since_boot)
    if text is None:
        reader.note_unavailable("kernel log", 2, "neither dmesg nor journalctl -k could be run (not installed or not "
                                                 "permitted, see kernel.dmesg_restrict): Xid events unknown")
        return
    facts["xid_events"] = parse_kernel_log(text)


# ---------------------------------------------------------------- layer 2


def contract_gpu(gpu):
    projected = dict((key, gpu.get(key)) for key in GPU_FACT_KEYS)
    projected["mig_devices"] = [dict((key, mig.get(key)) for key in MIG_FACT_KEYS)
                                for mig in gpu.get("mig_devices") or []]
    return projected


def nvidia_smi_path(module, reader):
    configured = module.params["nvidia_smi"]
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return reader.find_tool("nvidia-smi")


def with_mig_profiles(reader, smi, gpus):
    if not any(gpu.get("mig_mode_current") for gpu in gpus):
        return gpus
    rc, out, err = reader.run([smi, "-L"])
    return merge_mig_listing(gpus, parse_list(out)) if rc == 0 else gpus


def installed_nvml_library_version():
    for directory in NVML_LIBRARY_DIRS:
        library = os.path.join(directory, "libnvidia-ml.so.1")
        if os.path.exists(library):
            return nvml_library_version_from_filename(os.path.basename(os.path.realpath(library)))
    return None


def gather_nvml(module, reader, facts):
    userspace = facts["userspace"]
    smi = nvidia_smi_path(module, reader)
    if not smi:
        where = module.params["nvidia_smi"] or "PATH"
        userspace.update(error_kind="not_found", error="nvidia-smi not found or not executable (%s)" % where)
        return
    userspace["nvidia_smi_path"] = smi
    rc, out, err = reader.run([smi, "-q", "-x"], note_timeout=False)
    if reader.timed_out(rc):
        userspace.update(error_kind="other", error="nvidia-smi -q -x did not answer within %s seconds (hung GPU or "
                                                   "driver?)" % reader.timeout)
        return
    xml_start = out.find("<?xml")
    if rc != 0 and xml_start < 0:
        userspace.update(classify_error(out + "\n" + err, rc))
        if userspace["error_kind"] == "version_mismatch" and not userspace["nvml_library_version"]:
            # Drivers before 580 do not print the library's version: its file name says it.
            userspace["nvml_library_version"] = installed_nvml_library_version()
        return
    try:
        parsed = parse_query_xml(out)
    except ValueError as exc:
        userspace.update(error_kind="other", error=str(exc))
        return
    if rc != 0:
        # Some GPUs did not answer (e.g. "GPU is lost" after Xid 79): nvidia-smi exits non-zero, names them
        # before the XML, and still reports the GPUs that did answer.
        userspace.update(classify_error(out[:xml_start] + "\n" + err, rc))
    gpus = with_mig_profiles(reader, smi, parsed["gpus"])
    userspace.update(driver_version=parsed["driver_version"], cuda_version=parsed["cuda_version"], nvml_ok=True)
    facts["gpus"] = [contract_gpu(gpu) for gpu in gpus]
    facts["gpu_count"] = len(facts["gpus"])


# ---------------------------------------------------------------- main


def gather_facts(module, subsets):
    reader = HostReader(module, module.params["timeout"])
    facts = empty_facts()
    if "pci" in subsets:
        gather_pci(facts)
    if "kernel" in subsets:
        gather_kernel(reader, facts)
    if "secure_boot" in subsets:
        gather_secure_boot(reader, facts)
    if "dkms" in subsets:
        gather_dkms(reader, facts)
    if "nvml" in subsets:
        gather_nvml(module, reader, facts)
    if "xid" in subsets:
        gather_xid(reader, facts, module.params["xid_since_boot"])
    facts["version_mismatch"] = kernel_userspace_mismatch(facts["kernel_module"], facts["userspace"])
    facts["diagnosis"] = diagnose(facts, gathered=subsets, unavailable=reader.unavailable)
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            gather_subset=dict(type="list", elements="str", default=["all"]),
            xid_since_boot=dict(type="bool", default=True),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %s" % module.params["timeout"])
    try:
        subsets = resolve_gather_subset(module.params["gather_subset"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"nvidia_driver": gather_facts(module, subsets)})


if __name__ == "__main__":
    main()
