# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's MIG layout across a driver upgrade: pure decisions on nvidia_driver_facts' GPUs.

MIG mode survives a reboot, the GPU and compute instances do not: the driver upgrade reads the layout before
(``mig_layout``), re-creates it after the reboot (``create_instances_argv``: ``nvidia-smi mig -i N -cgi P,P -C``)
unless the MIG Manager does (its ``nvidia.com/mig.config`` label), and waits for the extended resources the
device plugin must then advertise (``expected_resources``: per profile with the mixed strategy, MIG devices as
``nvidia.com/gpu`` with the single strategy). The layout read before is kept in the node's upgrade record
(``recorded_layout``), so a run resumed after the reboot - which dropped the instances - re-creates it from there
(``layout_to_recreate``).
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
STRATEGIES = ("mixed", "single")


def mig_layout(gpus):
    """The GPUs whose MIG mode is on, each with the profiles of its MIG devices in NVML's order:
    ``[{"index", "uuid", "profiles": ["3g.40gb", ...]}]``; empty when no GPU is in MIG mode."""
    layout = []
    for gpu in gpus or []:
        if not gpu.get("mig_mode_current"):
            continue
        devices = sorted(gpu.get("mig_devices") or [], key=lambda device: device.get("index") or 0)
        layout.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"),
                       "profiles": [device.get("profile") for device in devices if device.get("profile")]})
    return layout


def recorded_layout(layout):
    """The layout as the node's upgrade record keeps it: only the GPUs with MIG devices,
    ``[{"index", "uuid", "profiles"}]``."""
    return [{"index": gpu.get("index"), "uuid": gpu.get("uuid"), "profiles": list(gpu["profiles"])}
            for gpu in layout or [] if gpu.get("profiles")]


def layout_to_recreate(layout, recorded):
    """``(layout, from_record)``: the layout read now when it has MIG devices (``from_record`` False); else, for a
    run resumed after the reboot dropped them, the record's layout (``recorded``, as ``recorded_layout`` wrote it)
    on the GPUs still in MIG mode now - matched by UUID (by index where either has none) and given the index the
    GPU has now - with ``from_record`` True when that layout has MIG devices. Without a recorded layout (a record
    of an older run) the layout read now, as it is."""
    if any(gpu.get("profiles") for gpu in layout or []):
        return layout, False
    by_uuid = dict((gpu.get("uuid"), gpu) for gpu in layout or [] if gpu.get("uuid"))
    by_index = dict((gpu.get("index"), gpu) for gpu in layout or [])
    restored = []
    for kept in recorded or []:
        if not isinstance(kept, dict) or not kept.get("profiles"):
            continue
        now = by_uuid.get(kept.get("uuid")) if kept.get("uuid") and by_uuid else by_index.get(kept.get("index"))
        if now is not None:
            restored.append({"index": now.get("index"), "uuid": now.get("uuid"),
                             "profiles": [str(profile) for profile in kept["profiles"]]})
    if not restored:
        return layout, False
    chosen = set(gpu["index"] for gpu in restored)
    others = [gpu for gpu in layout if gpu.get("index") not in chosen]
    return sorted(restored + others, key=lambda gpu: gpu.get("index") or 0), True


def expected_resources(layout, strategy, gpu_count=None):
    """Extended resource -> count the device plugin advertises for ``layout``, by its MIG strategy; ``{}`` when
    there is nothing to check (no MIG instance, no or an unknown strategy). ``gpu_count``: every GPU of the node,
    so the mixed strategy also expects the whole GPUs outside MIG mode."""
    instances = sum(len(gpu["profiles"]) for gpu in layout or [])
    if not instances or strategy not in STRATEGIES:
        return {}
    if strategy == "single":
        return {GPU_RESOURCE: instances}
    counts = {}
    for gpu in layout:
        for profile in gpu["profiles"]:
            name = MIG_RESOURCE_PREFIX + profile
            counts[name] = counts.get(name, 0) + 1
    whole = (gpu_count or 0) - len(layout)
    if whole > 0:
        counts[GPU_RESOURCE] = whole
    return counts


def driver_branch(version):
    """The branch of a driver version (``570`` of ``570.86.15``); None when it is not one."""
    head = str(version or "").split(".", maxsplit=1)[0]
    return int(head) if head.isdigit() else None


def major_change(from_version, to_version):
    """The branch changes (550 -> 570): a major upgrade. An unknown version counts as a major change."""
    before, after = driver_branch(from_version), driver_branch(to_version)
    return before is None or after is None or before != after


def create_instances_argv(gpu):
    """``nvidia-smi mig -i INDEX -cgi P1,P2 -C``: the GPU instances of one GPU of the layout and a compute
    instance in each; None when the GPU had none."""
    if not gpu.get("profiles"):
        return None
    return ["nvidia-smi", "mig", "-i", str(gpu["index"]), "-cgi", ",".join(gpu["profiles"]), "-C"]


def missing_resources(expected, allocatable):
    """``["nvidia.com/mig-3g.40gb: 0 of 2", ...]`` for each resource of ``expected`` the node's allocatable (a
    Node's ``status.allocatable``) has fewer of; empty when the layout is all there."""
    missing = []
    for name in sorted(expected):
        have = _quantity((allocatable or {}).get(name))
        if have < expected[name]:
            missing.append("%s: %d of %d" % (name, have, expected[name]))
    return missing


def _quantity(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0
