# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A MIG layout applied to a node with ``nvidia-smi`` (the change kind ``mig_layout`` on hosts without the GPU
Operator's MIG Manager): pure decisions on nvidia_driver_facts' GPUs.

A layout is a list of entries as mig-parted's are, with the profiles spelled out:
``{"devices": "all" | [index, ...], "mig_enabled": bool, "profiles": ["3g.40gb", "1g.10gb", ...]}``; a later entry
naming a GPU replaces what an earlier one said, GPUs no entry names are left as they are. Turning it into
commands is what mig-parted's ``apply`` amounts to: MIG mode per GPU (``nvidia-smi -i N -mig 1|0`` then a GPU
reset ``-r``, the node drained), then for a GPU whose MIG devices differ from the layout ``mig -dci``, ``mig -dgi``
and ``mig -cgi PROFILES -C``; a GPU already as the layout wants gets no command.
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def normalize_layout(layout):
    """``(entries, errors)``: the layout's entries with their defaults (``devices`` all, ``mig_enabled`` true,
    ``profiles`` empty)."""
    entries, errors = [], []
    for position, entry in enumerate(layout or []):
        if not isinstance(entry, dict):
            errors.append("layout[%d] is not a mapping" % position)
            continue
        devices = entry.get("devices", "all")
        if devices != "all":
            if not isinstance(devices, list) or not all(str(index).isdigit() for index in devices):
                errors.append("layout[%d].devices is neither 'all' nor a list of GPU indexes" % position)
                continue
            devices = [int(index) for index in devices]
        enabled = entry.get("mig_enabled", True)
        profiles = [str(profile) for profile in entry.get("profiles") or []]
        if not enabled and profiles:
            errors.append("layout[%d] has profiles but mig_enabled false" % position)
            continue
        entries.append({"devices": devices, "mig_enabled": bool(enabled), "profiles": profiles})
    return entries, errors


def wanted_by_gpu(entries, gpus):
    """``(wanted, errors)``: GPU index -> None (MIG off) or the profiles it must have, for the GPUs the entries
    name; an error for an index the node has not, or a GPU that cannot take MIG (``mig_mode_current`` null)."""
    by_index = dict((gpu.get("index"), gpu) for gpu in gpus or [])
    wanted, errors = {}, []
    for entry in entries:
        indexes = sorted(by_index) if entry["devices"] == "all" else entry["devices"]
        for index in indexes:
            gpu = by_index.get(index)
            if gpu is None:
                errors.append("GPU %s: not on the node (it has %d)" % (index, len(by_index)))
                continue
            if entry["mig_enabled"] and gpu.get("mig_mode_current") is None:
                errors.append("GPU %s (%s): not MIG-capable" % (index, gpu.get("name") or "?"))
                continue
            wanted[index] = list(entry["profiles"]) if entry["mig_enabled"] else None
    return wanted, errors


def current_profiles(gpu):
    """The profiles of a GPU's MIG devices in NVML's order; None when MIG mode is off (or N/A)."""
    if not gpu.get("mig_mode_current"):
        return None
    devices = sorted(gpu.get("mig_devices") or [], key=lambda device: device.get("index") or 0)
    return [device.get("profile") for device in devices if device.get("profile")]


def layout_steps(wanted, gpus):
    """The ``nvidia-smi`` argument lists, in order, each ``{"gpu": index, "argv": [...]}``."""
    by_index = dict((gpu.get("index"), gpu) for gpu in gpus or [])
    steps = []
    for index in sorted(wanted):
        gpu, profiles = by_index[index], wanted[index]
        current = current_profiles(gpu)
        pending = gpu.get("mig_mode_pending")
        if profiles is None:
            if current is not None or pending:
                steps += [_step(index, "-mig", "0"), _step(index, "-r")]
            continue
        if current is None:
            steps += [_step(index, "-mig", "1"), _step(index, "-r")]
            current = []
        if sorted(current) == sorted(profiles):
            continue
        if current:
            steps += [_mig_step(index, "-dci"), _mig_step(index, "-dgi")]
        if profiles:
            steps.append(_mig_step(index, "-cgi", ",".join(profiles), "-C"))
    return steps


def _step(index, *args):
    return {"gpu": index, "argv": ["nvidia-smi", "-i", str(index)] + list(args)}


def _mig_step(index, *args):
    return {"gpu": index, "argv": ["nvidia-smi", "mig", "-i", str(index)] + list(args)}


def layout_after(wanted, gpus):
    """Every GPU of the node as the layout leaves it: ``[{"index", "uuid", "mig_enabled", "profiles"}]`` (the GPUs
    the layout does not name as they are; ``mig_enabled`` null on a GPU without MIG)."""
    after = []
    for gpu in sorted(gpus or [], key=lambda one: one.get("index") or 0):
        index = gpu.get("index")
        if index in wanted:
            profiles = wanted[index]
            enabled = profiles is not None
        else:
            profiles = current_profiles(gpu)
            enabled = gpu.get("mig_mode_current")
        after.append({"index": index, "uuid": gpu.get("uuid"), "mig_enabled": enabled,
                      "profiles": sorted(profiles or [])})
    return after


def layout_resources(after, strategy):
    """``(resources, error)``: extended resource -> count the device plugin advertises for the node's GPUs as
    ``layout_after`` gives them, by its MIG strategy (``mixed``: ``nvidia.com/gpu`` for the GPUs outside MIG mode and
    ``nvidia.com/mig-<profile>`` per profile; ``single``: every GPU in MIG mode with one profile, or none in MIG
    mode, all counted as ``nvidia.com/gpu``), a resource of none left out; ``error`` says why the single strategy cannot take the layout (the
    plugin would refuse it). An unknown strategy expects nothing."""
    if strategy == "mixed":
        counts = {GPU_RESOURCE: sum(1 for gpu in after if not gpu["mig_enabled"])}
        for gpu in after:
            for profile in gpu["profiles"] if gpu["mig_enabled"] else []:
                name = MIG_RESOURCE_PREFIX + profile
                counts[name] = counts.get(name, 0) + 1
        return dict((name, count) for name, count in counts.items() if count), None
    if strategy != "single":
        return {}, None
    enabled = [gpu for gpu in after if gpu["mig_enabled"]]
    if not enabled:
        return {GPU_RESOURCE: len(after)}, None
    if len(enabled) != len(after):
        return {}, ("the single MIG strategy needs every GPU in MIG mode or none: %d of %d would be"
                    % (len(enabled), len(after)))
    profiles = set(profile for gpu in enabled for profile in gpu["profiles"])
    if len(profiles) > 1:
        return {}, "the single MIG strategy takes one profile on the node, the layout has %s" % ", ".join(
            sorted(profiles))
    instances = sum(len(gpu["profiles"]) for gpu in enabled)
    return ({GPU_RESOURCE: instances} if instances else {}), None


def previous_layout(gpus):
    """The node's layout now, as a layout (one entry per MIG-capable GPU), for a rollback to apply again."""
    entries = []
    for gpu in sorted(gpus or [], key=lambda one: one.get("index") or 0):
        if gpu.get("mig_mode_current") is None:
            continue
        profiles = current_profiles(gpu)
        entries.append({"devices": [gpu.get("index")], "mig_enabled": profiles is not None,
                        "profiles": profiles or []})
    return entries


def layout_mismatches(wanted, gpus):
    """``["GPU 0: 3g.40gb, 1g.10gb, wanted 3g.40gb, 3g.40gb", ...]`` for each GPU the layout names that NVML does
    not show as wanted (MIG mode pending counts as not there)."""
    by_index = dict((gpu.get("index"), gpu) for gpu in gpus or [])
    mismatches = []
    for index in sorted(wanted):
        gpu = by_index.get(index)
        now = current_profiles(gpu) if gpu else None
        want = wanted[index]
        if gpu is None:
            mismatches.append("GPU %s: not seen" % index)
        elif (want is None) != (now is None) or sorted(want or []) != sorted(now or []):
            mismatches.append("GPU %s: %s, wanted %s" % (index, _describe(now), _describe(want)))
    return mismatches


def _describe(profiles):
    if profiles is None:
        return "MIG off"
    return ", ".join(profiles) if profiles else "MIG on, no instance"


def plan_layout(gpus, layout, strategy=""):
    """Everything the change kind needs for one node: ``steps`` (the commands, empty when the GPUs already show
    the layout), ``after`` (``layout_after``), ``resources`` (what the plugin must advertise then, ``{}`` when the
    strategy is unknown), ``errors`` (the layout does not suit the node: nothing may be run), ``mismatches``
    (``layout_mismatches`` now), ``previous`` (``previous_layout``) and ``at_target``."""
    entries, errors = normalize_layout(layout)
    wanted, gpu_errors = wanted_by_gpu(entries, gpus)
    errors += gpu_errors
    after = layout_after(wanted, gpus)
    resources, strategy_error = layout_resources(after, strategy)
    if strategy_error:
        errors.append(strategy_error)
    mismatches = layout_mismatches(wanted, gpus)
    return {
        "steps": [] if errors else layout_steps(wanted, gpus),
        "after": after,
        "resources": resources,
        "errors": errors,
        "mismatches": mismatches,
        "previous": previous_layout(gpus),
        "at_target": not errors and not mismatches,
    }
