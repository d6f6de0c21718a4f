# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What nvidia_driver_facts reads on a GPU node and how it combines it (private to this collection).

Layer 0 from sysfs, layer 1 from the module list, /proc/driver/nvidia, modinfo, mokutil or the efivars, dkms and
/dev; layer 2 from one `nvidia-smi -q -x` (and `-L` for MIG); Xid events from the kernel log. Commands run through
the host wing's CommandRunner; a source that cannot be read is recorded for the diagnosis, never raised.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.gpuops.nvidia.plugins.module_utils.host.files import read_bytes, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.diagnosis import diagnose
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


class Sources:
    """Runs the read-only commands through a CommandRunner and records the sources that could not be read."""

    def __init__(self, runner):
        self.runner = runner
        self.unavailable = []

    def note_unavailable(self, source, layer, reason):
        self.unavailable.append({"source": source, "layer": layer, "reason": reason})

    def find_tool(self, name):
        return self.runner.find(name)

    def run(self, argv, note_timeout=True):
        """The CommandResult of argv; a timeout is noted as unavailable unless note_timeout is false."""
        result = self.runner.run(argv)
        if note_timeout and result.timed_out:
            layer = 2 if result.name in USERSPACE_TOOLS else 1
            self.note_unavailable(result.name, layer, "timed out after %s seconds" % result.timeout)
        return result

    def run_tool(self, name, args, layer, missing_reason):
        """Run tool `name` if installed; None (and a note when missing_reason) when it is not."""
        path = self.find_tool(name)
        if not path:
            if missing_reason:
                self.note_unavailable(name, layer, missing_reason)
            return None
        return self.run([path] + list(args))


# ---------------------------------------------------------------- layer 0


def gather_pci(facts):
    facts["pci_devices"] = read_pci_devices(SYSFS_PCI)


# ---------------------------------------------------------------- layer 1


def loaded_modules(sources):
    """Module list from /proc/modules, else lsmod; None when neither is readable."""
    text = read_text(PROC_MODULES)
    if text is None:
        result = sources.run_tool("lsmod", [], 1, "no /proc/modules and lsmod not found: loaded modules unknown")
        if result is None or result.rc != 0:
            return None
        text = result.stdout
    return parse_module_list(text)


def loaded_module_version(proc_text):
    proc_version = parse_proc_version(proc_text) if proc_text else {}
    if not proc_version.get("version"):
        sys_version = (read_text(os.path.join(SYSFS_MODULE, "nvidia", "version")) or "").strip()
        proc_version = dict(proc_version, version=sys_version or None)
    return proc_version


def modinfo_nvidia(sources):
    result = sources.run_tool("modinfo", ["nvidia"], 1, "modinfo not found: on-disk module, signer and license unknown")
    if result is None or result.rc != 0:
        return {}
    return parse_modinfo(result.stdout)


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


def gather_kernel_release(sources):
    release = os.uname()[2]
    headers_path = os.path.join(LIB_MODULES, release, "build")
    present = os.path.isdir(headers_path)
    return {"release": release, "headers_present": present, "headers_path": headers_path if present else None,
            "build_tools_missing": missing_build_tools(sources.find_tool)}


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


def gather_kernel(sources, facts):
    # /proc/modules (or lsmod) and /sys/module agree on a real host; either one is enough.
    names = set(module["name"] for module in loaded_modules(sources) or []) | modules_in_sysfs()
    loaded = "nvidia" in names
    facts["nouveau_loaded"] = "nouveau" in names
    facts["kernel_module"] = build_kernel_module(
        loaded, loaded_module_version(read_text(PROC_DRIVER_VERSION)) if loaded else None, modinfo_nvidia(sources),
        companion_modules(names),
    )
    facts["device_nodes"] = gather_device_nodes()
    facts["kernel"] = gather_kernel_release(sources)


def efivar_flag(name):
    return parse_efivar_bool(read_bytes(os.path.join(SYSFS_EFI, "efivars", "%s-%s" % (name, EFI_GLOBAL_GUID))))


def secure_boot_from_efivars():
    efivars_dir = os.path.join(SYSFS_EFI, "efivars")
    if not os.path.isdir(SYSFS_EFI) or not os.path.isdir(efivars_dir) or not os.listdir(efivars_dir):
        return {"enabled": None, "setup_mode": None, "source": None}  # legacy BIOS or efivarfs not mounted
    enabled = efivar_flag("SecureBoot")
    return {"enabled": bool(enabled), "setup_mode": efivar_flag("SetupMode"), "source": "efivars"}


def mok_keys(sources, mokutil, option):
    """Keys of `mokutil option`; [] and a note when it fails, so the diagnosis reads the list as unknown."""
    result = sources.run([mokutil, option])
    if result.rc == 0:
        return parse_mok_list(result.stdout)
    if not result.timed_out:  # sources.run noted the timeout
        sources.note_unavailable("mokutil", 1, "mokutil %s failed (rc %s: %s): MOK keys unknown"
                                 % (option, result.rc, result.first_error_line()))
    return []


def gather_secure_boot(sources, facts):
    mokutil = sources.find_tool("mokutil")
    state = None
    if mokutil:
        result = sources.run([mokutil, "--sb-state"])
        state = parse_sb_state(result.stdout + "\n" + result.stderr)
    else:
        sources.note_unavailable("mokutil", 1, "mokutil not found: Secure Boot read from efivars, MOK keys unknown")
    if state is None:
        facts["secure_boot"] = secure_boot_from_efivars()
    else:
        facts["secure_boot"] = dict(state, source="mokutil")
    if mokutil and facts["secure_boot"]["enabled"] is not None:
        facts["mok"] = {"enrolled": mok_keys(sources, mokutil, "--list-enrolled"),
                        "pending": mok_keys(sources, mokutil, "--list-new")}


def gather_dkms(sources, facts):
    # No dkms is normal (runfile or prebuilt packages), so its absence is not reported.
    result = sources.run_tool("dkms", ["status"], 1, None)
    if result is not None:
        facts["dkms"] = nvidia_dkms_entries(parse_dkms_status(result.stdout))


# ---------------------------------------------------------------- kernel log


def kernel_log_commands(since_boot):
    dmesg = [["dmesg", "--time-format=iso"], ["dmesg"]]
    journal = [["journalctl", "-k", "--no-pager", "-o", "short-iso"] + (["-b"] if since_boot else [])]
    return dmesg + journal if since_boot else journal + dmesg


def read_kernel_log(sources, since_boot):
    for argv in kernel_log_commands(since_boot):
        path = sources.find_tool(argv[0])
        if not path:
            continue
        result = sources.run([path] + argv[1:])
        if result.rc == 0:
            return result.stdout  # the first command that works is the kernel log, even when it is empty
    return None


def gather_xid(sources, facts, since_boot):
    text = read_kernel_log(sources, since_boot)
    if text is None:
        sources.note_unavailable("kernel log", 2, "neither dmesg nor journalctl -k could be run (not installed or not "
                                                  "permitted, see kernel.dmesg_restrict): Xid events unknown")
        return
    facts["xid_events"] = parse_kernel_log(text)


# ---------------------------------------------------------------- layer 2


def contract_gpu(gpu):
    projected = dict((key, gpu.get(key)) for key in GPU_FACT_KEYS)
    projected["mig_devices"] = [dict((key, mig.get(key)) for key in MIG_FACT_KEYS)
                                for mig in gpu.get("mig_devices") or []]
    return projected


def nvidia_smi_path(sources, configured):
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return sources.find_tool("nvidia-smi")


def with_mig_profiles(sources, smi, gpus):
    if not any(gpu.get("mig_mode_current") for gpu in gpus):
        return gpus
    listing = sources.run([smi, "-L"])
    return merge_mig_listing(gpus, parse_list(listing.stdout)) if listing.rc == 0 else gpus


def installed_nvml_library_version():
    for directory in NVML_LIBRARY_DIRS:
        library = os.path.join(directory, "libnvidia-ml.so.1")
        if os.path.exists(library):
            return nvml_library_version_from_filename(os.path.basename(os.path.realpath(library)))
    return None


def gather_nvml(sources, facts, nvidia_smi):
    userspace = facts["userspace"]
    smi = nvidia_smi_path(sources, nvidia_smi)
    if not smi:
        userspace.update(error_kind="not_found",
                         error="nvidia-smi not found or not executable (%s)" % (nvidia_smi or "PATH"))
        return
    userspace["nvidia_smi_path"] = smi
    query = sources.run([smi, "-q", "-x"], note_timeout=False)
    if query.timed_out:
        userspace.update(error_kind="other", error="nvidia-smi -q -x did not answer within %s seconds (hung GPU or "
                                                   "driver?)" % query.timeout)
        return
    out, err, rc = query.stdout, query.stderr, query.rc
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
    gpus = with_mig_profiles(sources, smi, parsed["gpus"])
    userspace.update(driver_version=parsed["driver_version"], cuda_version=parsed["cuda_version"], nvml_ok=True)
    facts["gpus"] = [contract_gpu(gpu) for gpu in gpus]
    facts["gpu_count"] = len(facts["gpus"])


# ---------------------------------------------------------------- all layers


def gather_facts(runner, subsets, nvidia_smi=None, xid_since_boot=True):
    """ansible_facts.nvidia_driver of this host: the subsets gathered (the rest empty), diagnosed.

    runner: a host.command.CommandRunner; subsets: resolved gather_subset names; nvidia_smi and xid_since_boot
    as the module's options.
    """
    sources = Sources(runner)
    facts = empty_facts()
    if "pci" in subsets:
        gather_pci(facts)
    if "kernel" in subsets:
        gather_kernel(sources, facts)
    if "secure_boot" in subsets:
        gather_secure_boot(sources, facts)
    if "dkms" in subsets:
        gather_dkms(sources, facts)
    if "nvml" in subsets:
        gather_nvml(sources, facts, nvidia_smi)
    if "xid" in subsets:
        gather_xid(sources, facts, xid_since_boot)
    facts["version_mismatch"] = kernel_userspace_mismatch(facts["kernel_module"], facts["userspace"])
    facts["diagnosis"] = diagnose(facts, gathered=subsets, unavailable=sources.unavailable)
    return facts
