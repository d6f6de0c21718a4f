# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure planner: nvidia_driver facts -> ordered diagnosis (private to this collection).

Layers: 0 hardware/PCI, 1 kernel driver (module, Secure Boot, DKMS, headers), 2 NVML/userspace and
GPU health. Each check is one function returning a list of entries; ``diagnose`` runs the checks whose
facts were gathered and orders the result by layer, then severity.
"""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import (
    common_name,
    is_gpu_class,
    normalize_fingerprint,
    nvidia_dkms_entries,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.smi import sysfs_pci_address
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.xid import XID_CATALOG, xid_severity

SEVERITY_ORDER = ("critical", "error", "warning", "info")
ALL_SUBSETS = frozenset(("pci", "kernel", "nvml", "secure_boot", "dkms", "xid"))
# Xid 79 means the GPU vanished from PCIe: a hardware (layer 0) problem, not a software one.
XID_LAYER_OVERRIDES = {79: 0}
_INSTALLED_DKMS_STATES = ("installed", "installed-weak")


def resolve_gather_subset(requested):
    """gather_subset list -> frozenset of subset names, like ansible.builtin.setup.

    'all' or no positive name starts from every subset; '!name' removes one ('!all' removes every one
    not also named). Raises ValueError naming the invalid entries.
    """
    requested = [str(item).strip() for item in requested or []]
    names = [item.lstrip("!") for item in requested]
    invalid = sorted(set(name for name in names if name != "all" and name not in ALL_SUBSETS))
    if invalid:
        raise ValueError("gather_subset: invalid name(s) %s; valid: all, %s (each may be prefixed with '!')"
                         % (", ".join(invalid), ", ".join(sorted(ALL_SUBSETS))))
    included = set(item for item in requested if not item.startswith("!"))
    excluded = set(item[1:] for item in requested if item.startswith("!"))
    selected = set(ALL_SUBSETS) if "all" in included or not included else set()
    if "all" in excluded:
        selected = set()
    selected |= included - set(["all"])
    return frozenset(selected - excluded)


def entry(layer, code, severity, message, remedy):
    return {"layer": layer, "code": code, "severity": severity, "message": message, "remedy": remedy}


def _gpu_functions(facts):
    return [device for device in facts.get("pci_devices") or [] if is_gpu_class(device.get("class_id"))]


def _pci_shows_no_gpu(facts, gathered):
    """PCI was read and has no GPU: no_nvidia_pci_device says why, so driver checks stay silent."""
    return "pci" in gathered and not _gpu_functions(facts)


def _gpu_label(gpu):
    return "GPU %s (%s, %s)" % (gpu.get("index"), gpu.get("name") or "unknown model", gpu.get("pci_bus_id"))


# ---------------------------------------------------------------- layer 0


def check_pci_presence(facts):
    if _gpu_functions(facts):
        return []
    return [entry(
        0, "no_nvidia_pci_device", "critical",
        "No NVIDIA GPU (vendor 0x10de, PCI class 0x03xxxx) is visible under /sys/bus/pci/devices.",
        "Check that the GPU is seated and powered and enabled in firmware (Above 4G decoding on), or passed "
        "through to this VM; 'lspci -nn -d 10de:' must list it before any driver can work.",
    )]


def check_vfio_binding(facts):
    return [entry(
        0, "gpu_bound_to_vfio", "info",
        "GPU %s (device %s) is bound to vfio-pci: it is reserved for passthrough and invisible to the host "
        "driver and NVML." % (device["address"], device.get("device_id")),
        "Nothing to do if it is meant for a VM; otherwise remove the vfio-pci binding (driverctl "
        "unset-override %s, or the vfio-pci.ids= kernel argument) and reboot." % device["address"],
    ) for device in _gpu_functions(facts) if device.get("driver") == "vfio-pci"]


# ---------------------------------------------------------------- layer 1


def check_nouveau(facts):
    bound = [device["address"] for device in _gpu_functions(facts) if device.get("driver") == "nouveau"]
    if not bound:
        return []
    return [entry(
        1, "nouveau_bound", "error",
        "GPU(s) %s are bound to the nouveau driver, so the NVIDIA module cannot take them." % ", ".join(bound),
        "Blacklist nouveau ('blacklist nouveau' and 'options nouveau modeset=0' in "
        "/etc/modprobe.d/blacklist-nouveau.conf), rebuild the initramfs (update-initramfs -u or dracut -f) "
        "and reboot.",
    )]


def check_module_loaded(facts, gathered):
    module = facts.get("kernel_module") or {}
    if module.get("loaded") or _pci_shows_no_gpu(facts, gathered):
        return []
    release = (facts.get("kernel") or {}).get("release") or "the running kernel"
    if module.get("filename"):
        found = "The module on disk is %s (version %s)." % (module["filename"], module.get("version"))
    else:
        found = "modinfo found no nvidia module for %s." % release
    return [entry(
        1, "module_not_loaded", "critical",
        "The nvidia kernel module is not loaded. %s" % found,
        "Run 'modprobe nvidia' and read 'dmesg | grep -i -e nvrm -e nvidia' for the reason; the Secure "
        "Boot, DKMS, headers and nouveau entries of this diagnosis name the usual causes. Without a module "
        "for %s, (re)install the driver for this kernel." % release,
    )]


def check_unbound_gpus(facts):
    if not (facts.get("kernel_module") or {}).get("loaded"):
        return []
    unbound = [device["address"] for device in _gpu_functions(facts) if device.get("driver") == "none"]
    if not unbound:
        return []
    return [entry(
        1, "gpu_not_bound_to_nvidia", "error",
        "The nvidia module is loaded but GPU(s) %s have no driver bound (probe failed)." % ", ".join(unbound),
        "Read 'dmesg | grep NVRM' for the probe error (RmInitAdapter failed, unsupported GPU for this "
        "driver branch or flavor); reset the GPU or reboot, and check the driver supports this device.",
    )]


def check_device_nodes(facts):
    if not (facts.get("kernel_module") or {}).get("loaded"):
        return []
    paths = [node.get("path") or "" for node in facts.get("device_nodes") or []]
    if any(path.rsplit("/", 1)[-1] == "nvidiactl" for path in paths):
        return []
    return [entry(
        1, "device_nodes_missing", "error",
        "The nvidia module is loaded but /dev/nvidiactl is missing (found: %s)." % (", ".join(paths) or "none"),
        "Create the nodes with 'nvidia-modprobe -c 0 -u' (or run nvidia-smi once as root) and check that "
        "the NVIDIA udev rules and nvidia-persistenced are installed.",
    )]


def _mok_matches(module, keys):
    signer = (module.get("signer") or "").strip()
    sig_key = normalize_fingerprint(module.get("sig_key"))
    for key in keys:
        if signer and common_name(key.get("subject")) == signer:
            return True
        if sig_key and key.get("fingerprint") == sig_key:
            return True
    return False


def check_secure_boot_signature(facts, unavailable_sources=()):
    """Only an unloaded module is judged: a loaded one was accepted by the kernel (MOK or a built-in key).

    unavailable_sources: the tools that could not be read; with mokutil among them the MOK lists are unknown.
    """
    module = facts.get("kernel_module") or {}
    if not (facts.get("secure_boot") or {}).get("enabled") or module.get("loaded") or not module.get("filename"):
        return []
    if not module.get("signer"):
        return [entry(
            1, "secure_boot_unsigned_module", "critical",
            "Secure Boot is enforced and %s (version %s) is not signed, so the kernel refuses to load it."
            % (module["filename"], module.get("version")),
            "Sign the module with an enrolled Machine Owner Key (scripts/sign-file sha256 MOK.priv MOK.der "
            "<module>, or let DKMS sign it), enroll the key with 'mokutil --import MOK.der' and reboot to "
            "confirm it in MokManager; or disable Secure Boot in firmware.",
        )]
    if (facts.get("secure_boot") or {}).get("source") != "mokutil" or "mokutil" in unavailable_sources:
        return []  # mokutil missing or failing: the MOK lists are unknown, not empty (data_source_unavailable says so)
    mok = facts.get("mok") or {}
    if _mok_matches(module, mok.get("enrolled") or []):
        return []
    if _mok_matches(module, mok.get("pending") or []):
        return [entry(
            1, "secure_boot_signer_not_enrolled", "error",
            "The module is signed by '%s' (key %s), whose MOK is pending enrollment, not enrolled yet."
            % (module["signer"], module.get("sig_key")),
            "Reboot and, at the console, confirm the key in MokManager ('Enroll MOK', then the password "
            "given to mokutil --import); MokManager times out after 10 seconds and boots without it.",
        )]
    return [entry(
        1, "secure_boot_signer_not_enrolled", "critical",
        "Secure Boot is enforced and %s is signed by '%s' (key %s), which is not an enrolled MOK, so the "
        "kernel refuses it." % (module["filename"], module["signer"], module.get("sig_key")),
        "Enroll the signing certificate ('mokutil --import <cert.der>', set a one-time password), reboot "
        "and confirm it in MokManager; or re-sign the module with a key that is already enrolled.",
    )]


def check_mok_pending(facts):
    module = facts.get("kernel_module") or {}
    pending = (facts.get("mok") or {}).get("pending") or []
    if not pending or not module.get("loaded"):
        return []  # with the module unloaded, check_secure_boot_signature speaks about the pending key
    subjects = ", ".join(common_name(key.get("subject")) or key.get("fingerprint") or "?" for key in pending)
    return [entry(
        1, "mok_enrollment_pending", "warning",
        "MOK enrollment is pending for: %s." % subjects,
        "The next boot stops in MokManager for confirmation at the console; plan the reboot with console "
        "access (or 'mokutil --revoke-import' if the request was a mistake).",
    )]


def _running_kernel_dkms(entries, release):
    return [item for item in entries if item.get("kernel") == release
            and item.get("state") in _INSTALLED_DKMS_STATES]


def check_dkms(facts):
    entries = nvidia_dkms_entries(facts.get("dkms") or [])
    release = (facts.get("kernel") or {}).get("release")
    if not entries or not release or _running_kernel_dkms(entries, release):
        return []
    loaded = (facts.get("kernel_module") or {}).get("loaded")
    states = ", ".join("%s/%s %s for %s" % (item["module"], item["version"], item["state"],
                                            item.get("kernel") or "no kernel") for item in entries)
    return [entry(
        1, "dkms_not_built_for_running_kernel", "warning" if loaded else "critical",
        "DKMS has no installed NVIDIA module for the running kernel %s (%s)." % (release, states),
        "Install the headers for %s, then 'dkms autoinstall -k %s' (or 'dkms install %s/%s -k %s') and "
        "'modprobe nvidia'." % (release, release, entries[0]["module"], entries[0]["version"], release),
    )]


def check_headers(facts, gathered):
    kernel = facts.get("kernel") or {}
    if kernel.get("headers_present") or not kernel.get("release") or _pci_shows_no_gpu(facts, gathered):
        return []
    uses_dkms = bool(nvidia_dkms_entries(facts.get("dkms") or []))
    if not uses_dkms and (facts.get("kernel_module") or {}).get("loaded"):
        return []  # a prebuilt, loaded module needs no headers
    release = kernel["release"]
    return [entry(
        1, "kernel_headers_missing", "warning",
        "Kernel headers for %s are missing (no /lib/modules/%s/build): DKMS cannot build the NVIDIA module."
        % (release, release),
        "Install linux-headers-%s (Debian/Ubuntu) or kernel-devel-%s (RHEL family)." % (release, release),
    )]


# ---------------------------------------------------------------- layer 2


def check_userspace(facts):
    userspace = facts.get("userspace") or {}
    kind = userspace.get("error_kind")
    error = userspace.get("error") or ""
    if kind == "not_found":
        return [entry(
            2, "nvidia_smi_not_found", "error",
            "%s, so NVML state is unknown." % (error or "nvidia-smi not found in PATH"),
            "Install the driver's userspace (nvidia-utils / nvidia-driver package or the runfile) or set the "
            "module option nvidia_smi to its path.",
        )]
    if kind == "no_driver":
        return [entry(
            2, "nvml_cannot_talk_to_driver", "critical",
            "NVML cannot communicate with the kernel driver: %s" % error,
            "Fix the kernel driver first (layer 1 entries); with the module loaded, check /dev/nvidia* "
            "permissions and 'dmesg | grep NVRM' for RmInitAdapter errors.",
        )]
    if kind == "other":
        return [entry(
            2, "nvml_error", "error", "nvidia-smi failed: %s" % error,
            "Run 'nvidia-smi -q' by hand and read 'dmesg | grep NVRM'; reset the GPU or reboot if NVML hangs.",
        )]
    return []


def check_version_mismatch(facts):
    if not facts.get("version_mismatch"):
        return []
    module = facts.get("kernel_module") or {}
    userspace = facts.get("userspace") or {}
    user_version = userspace.get("driver_version") or userspace.get("nvml_library_version") or "unknown"
    return [entry(
        2, "version_mismatch", "critical",
        "Kernel module %s is loaded but the userspace driver (NVML) is %s: Driver/library version mismatch."
        % (module.get("version") or "unknown", user_version),
        "Reboot to load the installed module (or, with no GPU clients, 'rmmod nvidia_uvm nvidia_drm "
        "nvidia_modeset nvidia; modprobe nvidia'); if it persists, reinstall so the kernel module and "
        "userspace packages have the same version.",
    )]


def check_gpu_count(facts):
    if not (facts.get("userspace") or {}).get("nvml_ok"):
        return []
    expected = [device["address"] for device in _gpu_functions(facts) if device.get("driver") != "vfio-pci"]
    seen = set(sysfs_pci_address(gpu.get("pci_bus_id")) for gpu in facts.get("gpus") or [])
    count = facts.get("gpu_count") or 0
    if count == len(expected):
        return []
    missing = [address for address in expected if address not in seen]
    return [entry(
        2, "gpu_count_mismatch", "error",
        "PCI shows %d NVIDIA GPU(s) but NVML reports %d%s." % (
            len(expected), count, (" (missing: %s)" % ", ".join(missing)) if missing else ""),
        "Read 'dmesg | grep -e NVRM -e Xid' for the missing GPU (fallen off the bus, RmInitAdapter failed); "
        "drain the node, reset the GPU or reboot, and replace it if it does not come back.",
    )]


def check_mig(gpu):
    current, pending = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
    if pending is None or current is None or pending == current:
        return []
    state = {True: "Enabled", False: "Disabled"}
    return [entry(
        2, "mig_pending_reset", "warning",
        "%s: MIG mode is %s, %s is pending a GPU reset." % (_gpu_label(gpu), state[current], state[pending]),
        "Drain the node, stop GPU clients (device plugin, DCGM, nvidia-persistenced), then "
        "'nvidia-smi -i %s -r' or reboot." % gpu.get("index"),
    )]


def check_ecc(gpu):
    volatile = gpu.get("ecc_volatile_uncorrectable") or 0
    aggregate = gpu.get("ecc_aggregate_uncorrectable") or 0
    if not volatile and not aggregate:
        return []
    return [entry(
        2, "ecc_uncorrectable", "error" if volatile else "warning",
        "%s: %d uncorrectable ECC error(s) since the driver loaded, %d over its lifetime."
        % (_gpu_label(gpu), volatile, aggregate),
        "Drain the node and reset the GPU so pages/rows are retired; if the count keeps growing, run "
        "'dcgmi diag -r 3' and request an RMA.",
    )]


def check_retired_pages(gpu):
    if not gpu.get("retired_pages_pending"):
        return []
    return [entry(
        2, "retired_pages_pending", "warning",
        "%s: retired pages are pending; they take effect at the next GPU reset." % _gpu_label(gpu),
        "Drain the node, then 'nvidia-smi -i %s -r' or reboot." % gpu.get("index"),
    )]


def check_remapped_rows(gpu):
    entries = []
    if gpu.get("remapped_rows_failure"):
        entries.append(entry(
            2, "remapped_rows_failure", "critical",
            "%s: row remapping failed, the memory cannot be repaired." % _gpu_label(gpu),
            "Take the GPU out of service and request an RMA (attach 'nvidia-bug-report.sh' output).",
        ))
    if gpu.get("remapped_rows_pending"):
        entries.append(entry(
            2, "remapped_rows_pending", "warning",
            "%s: remapped rows are pending; they take effect at the next GPU reset." % _gpu_label(gpu),
            "Drain the node, then 'nvidia-smi -i %s -r' or reboot." % gpu.get("index"),
        ))
    return entries


def _group_xids(events):
    groups = {}
    for event in events:
        groups.setdefault((event.get("code"), event.get("pci_address")), []).append(event)
    return groups


def check_xids(facts):
    entries = []
    for (code, address), events in sorted(_group_xids(facts.get("xid_events") or []).items(),
                                          key=lambda item: (item[0][0], item[0][1] or "")):
        catalog = XID_CATALOG.get(code) or {}
        last = events[-1]
        when = (", last at %s" % last["time"]) if last.get("time") else ""
        entries.append(entry(
            XID_LAYER_OVERRIDES.get(code, 2), "xid_%s" % code, xid_severity(code),
            "Xid %s (%s) on %s, %d time(s) in the kernel log%s: %s" % (
                code, catalog.get("name") or "unknown Xid", address or "unknown GPU", len(events), when,
                last.get("message")),
            catalog.get("remedy") or "Look up Xid %s in NVIDIA's Xid catalog and 'dmesg | grep NVRM'." % code,
        ))
    return entries


# Xid 119/120: the GPU's GSP firmware did not answer the driver; NVML then fails with NVML_ERROR_UNKNOWN
GSP_XIDS = (119, 120)


def check_mig_gsp(facts):
    """Seed case 6 after a driver upgrade: a GPU in MIG mode without its MIG instances, and a GSP Xid on it in the
    kernel log: re-creating the layout (``nvidia-smi mig -cgi``) answers "Unknown Error" (NVML_ERROR_UNKNOWN)
    until the GPU is reset. An Xid without a PCI address counts for every such GPU."""
    events = [event for event in facts.get("xid_events") or [] if event.get("code") in GSP_XIDS]
    entries = []
    for gpu in facts.get("gpus") or []:
        if not gpu.get("mig_mode_current") or gpu.get("mig_devices"):
            continue
        address = (sysfs_pci_address(gpu.get("pci_bus_id")) or "").lower()
        mine = [event for event in events if not event.get("pci_address")
                or address.startswith(str(event["pci_address"]).lower())]
        if not mine:
            continue
        entries.append(entry(
            2, "mig_create_failed", "error",
            "%s: MIG mode is on but no MIG instance exists, and Xid %s (GSP RPC timeout) is in the kernel log %d "
            "time(s): creating its instances (nvidia-smi mig -cgi) fails with NVML_ERROR_UNKNOWN (\"Unknown Error\"), "
            "as after a driver upgrade (seed case 6)." % (_gpu_label(gpu), mine[-1]["code"], len(mine)),
            "Drain the node, stop the GPU's clients and reset it ('nvidia-smi -i %s -r') or reboot the node, then "
            "re-create the layout ('nvidia-smi mig -i %s -cgi PROFILES -C', or let the MIG Manager re-apply "
            "nvidia.com/mig.config) and restart the device plugin; check that the GSP firmware matches the new "
            "driver (firmware-nvidia-gsp); RMA if Xid 119 repeats across drivers." % (gpu.get("index"), gpu.get("index")),
        ))
    return entries


def check_unavailable(unavailable):
    return [entry(
        item["layer"], "data_source_unavailable", "info",
        "%s: %s" % (item["source"], item["reason"]),
        "Install or permit '%s' to get these facts; the facts it gives are null." % item["source"],
    ) for item in unavailable]


def _gpu_health(facts):
    entries = []
    for gpu in facts.get("gpus") or []:
        for check in (check_mig, check_ecc, check_retired_pages, check_remapped_rows):
            entries.extend(check(gpu))
    return entries


def _severity_rank(item):
    return SEVERITY_ORDER.index(item["severity"]) if item["severity"] in SEVERITY_ORDER else len(SEVERITY_ORDER)


def diagnose(facts, gathered=None, unavailable=()):
    """Ordered diagnosis for nvidia_driver facts; [] for a healthy node.

    gathered: the gather_subset names whose facts are real (None = all); checks of other subsets are
    skipped so an empty default is never read as a finding. unavailable: [{source, layer, reason}] for
    tools or files that could not be read.
    """
    gathered = ALL_SUBSETS if gathered is None else frozenset(gathered)
    entries = []
    if "pci" in gathered:
        entries += check_pci_presence(facts) + check_vfio_binding(facts) + check_nouveau(facts)
    if "kernel" in gathered:
        entries += check_module_loaded(facts, gathered) + check_device_nodes(facts) + check_headers(facts, gathered)
        if "pci" in gathered:
            entries += check_unbound_gpus(facts)
    if "secure_boot" in gathered and "kernel" in gathered:
        unavailable_sources = frozenset(item["source"] for item in unavailable)
        entries += check_secure_boot_signature(facts, unavailable_sources) + check_mok_pending(facts)
    if "dkms" in gathered and "kernel" in gathered:
        entries += check_dkms(facts)
    if "nvml" in gathered:
        entries += check_userspace(facts) + check_version_mismatch(facts) + _gpu_health(facts)
        if "pci" in gathered:
            entries += check_gpu_count(facts)
    if "xid" in gathered:
        entries += check_xids(facts)
        if "nvml" in gathered:
            entries += check_mig_gsp(facts)
    entries += check_unavailable(unavailable)
    return sorted(entries, key=lambda item: (item["layer"], _severity_rank(item)))
