# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Reloading the NVIDIA kernel modules in place of a reboot (private to this collection): the decisions, pure.

After a driver package upgrade without a reboot the loaded module is the old build while the userspace (NVML) on
disk is the new one, and NVML refuses ("Driver/library version mismatch"). When nothing uses the GPUs, stopping
what keeps the modules open (nvidia-persistenced, the fabric manager, a host DCGM), unloading them in dependency
order (the users of nvidia first: nvidia_drm before nvidia_modeset; nvidia_uvm, nvidia_modeset and nvidia_peermem
before nvidia) and loading them again brings up the module on disk, without a reboot. The kernel refuses the unload
while a module is in use ("Module nvidia is in use"): then the caller reboots.
"""

from __future__ import annotations

import re

# the users of a module before the module (lsmod's "Used by"): nvidia_drm uses nvidia_modeset; all use nvidia
UNLOAD_ORDER = ("nvidia_peermem", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")
LOAD_ORDER = tuple(reversed(UNLOAD_ORDER))
# host services that keep /dev/nvidia* open while they run (stopped before the unload, started again after)
DEFAULT_SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm-exporter")

_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")


def version_key(version):
    """'550.54.15' -> (550, 54, 15); None for text that is not a dotted number."""
    text = (version or "").strip()
    if not _VERSION_RE.match(text):
        return None
    return tuple(int(part) for part in text.split("."))


def unload_order(loaded_names):
    """The loaded NVIDIA modules (names as in /sys/module), users first, as modprobe -r takes them."""
    loaded = set(loaded_names or [])
    return [name for name in UNLOAD_ORDER if name in loaded]


def load_order(unloaded_names):
    """The modules to load again (those unloaded), nvidia first."""
    unloaded = set(unloaded_names or [])
    return [name for name in LOAD_ORDER if name in unloaded]


def is_in_use_error(text):
    """True for the kernel's refusal of an unload: 'Module nvidia is in use' (modprobe -r, rmmod)."""
    return bool(re.search(r"\bis in use\b|\bResource temporarily unavailable\b", text or ""))


def parse_main_pid(text):
    """The MainPID of ``systemctl show --property=MainPID UNIT`` (0 or absent: not running) -> int or None."""
    for line in (text or "").splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() == "MainPID" and value.strip().isdigit() and int(value) > 0:
            return int(value)
    return None


def workload_holders(holder_pids, service_pids):
    """'pid N' for the processes holding a /dev/nvidia* device that are not the services stopped for the reload
    (nvidia-persistenced keeps the devices open but runs no work: stopping it is part of the reload)."""
    services = set(service_pids or [])
    return ["pid %d" % pid for pid in sorted(set(holder_pids or [])) if pid not in services]


def plan_reload(kernel_version, userspace_version, on_disk_version, loaded_names, holders):
    """Whether a module reload ends the skew, and how.

    kernel_version: the loaded module's (/sys/module/nvidia/version); userspace_version: the NVML library's on
    disk; on_disk_version: the module modprobe would load (modinfo -F version nvidia); holders: what holds a GPU
    device now (processes, pods). Returns {reload, reason, unload, load}: reload only when the loaded module is
    older than the userspace, the module on disk is the userspace's version, and nothing holds a GPU.
    """
    unload = unload_order(loaded_names)
    plan = {"reload": False, "reason": "", "unload": unload, "load": load_order(unload)}
    kernel, user, disk = version_key(kernel_version), version_key(userspace_version), version_key(on_disk_version)
    if kernel is None:
        plan["reason"] = "no NVIDIA kernel module is loaded (or its version is unreadable): nothing to reload"
    elif user is None:
        plan["reason"] = "the userspace driver's version is unknown: a reload could not be confirmed"
    elif kernel == user:
        plan["reason"] = "the loaded module %s and the userspace agree: no skew" % kernel_version
    elif kernel > user:
        plan["reason"] = ("the loaded module %s is newer than the userspace %s (not a package upgrade waiting for "
                          "its reboot): a reload does not end this skew" % (kernel_version, userspace_version))
    elif disk != user:
        plan["reason"] = ("the module on disk (%s) is not the userspace's %s: a reload would not end the skew"
                          % (on_disk_version or "not found", userspace_version))
    elif holders:
        plan["reason"] = "the GPU is in use (%s): the modules cannot be unloaded" % ", ".join(holders)
    else:
        plan["reload"] = True
        plan["reason"] = ("the loaded module %s is older than the userspace %s and nothing holds a GPU: unload %s, "
                          "load %s" % (kernel_version, userspace_version, " ".join(unload), " ".join(plan["load"])))
    return plan
