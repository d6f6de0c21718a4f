# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Does the ledger match reality? The judging of the weekly health check and of the diagnose runbook, without I/O.

Input: the API's JSON of Nodes, Pods (all namespaces), DaemonSets (all namespaces) and, optionally, per node the
``nvidia_driver_facts`` of that node and the previous report (the Xid baseline). Output: findings
``{node, check, code, severity, case, message, remedy, runbook}``, worst first, and a per-node table.

``case`` is the production case of the runbook the finding matches (docs/diagnose.md): 1 stale ledger, 2 pod
running with no GPU, 3 device-plugin crash loop, 4 Xid 79 / hardware, 5 VRAM leak signs, 6 MIG config lost after a
driver upgrade, 7 GPU resources gone after a reboot; ``None`` when it is none of them.
"""

from __future__ import annotations

import hashlib
import json
import math

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import pods as _pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import parse_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import dra_gpu_count

SEVERITIES = ("critical", "error", "warning", "info")
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"
GPU_NODE_LABELS = ("feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present")
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
DRIVER_LABEL_PARTS = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                      "nvidia.com/cuda.driver-version.revision")
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
CORDON_ANNOTATION = "gpuops.nvidia/cordon"
REASON_ANNOTATION = "gpuops.nvidia/cordon-reason"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
DOCS = "docs/alerts.md#"
# component -> how its pods are told apart (container image name part, app label values)
COMPONENTS = {
    "device-plugin": ("k8s-device-plugin", ("nvidia-device-plugin-ds", "nvidia-device-plugin-daemonset",
                                            "nvidia-device-plugin")),
    "gfd": ("gpu-feature-discovery", ("gpu-feature-discovery", "nvidia-gpu-feature-discovery")),
    "dcgm-exporter": ("dcgm-exporter", ("nvidia-dcgm-exporter", "dcgm-exporter")),
}
RESTARTS_WARNING = 5
# Xid codes that mean the hardware (not the application): the node leaves service
HARDWARE_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)


CASES = {
    1: ("stale ledger", "restart the device-plugin pod on the node (device_plugin_restart); safe to automate",
        "gpuallocatablezero"),
    2: ("pod running with no GPU", "give the pod a nvidia.com/gpu limit; do not run the device plugin and DRA for "
        "the same GPUs", None),
    3: ("device-plugin crash loop", "read the plugin's previous log: NVML not found (driver or toolkit missing), "
        "driver/library mismatch (reboot after the upgrade), no GPU visible (runtime not nvidia/CDI)",
        "gpuallocatablezero"),
    4: ("Xid 79 / GPU hardware", "cordon and taint the node, drain it, reset the GPU or reboot; again = RMA",
        "gpuxiderror"),
    5: ("VRAM leak signs", "find the process holding memory (nvidia-smi), restart the workload", "gpumemorypressure"),
    6: ("MIG config lost after a driver upgrade", "reapply the MIG profile (nvidia-smi mig -cgi ... -C)", None),
    7: ("GPU resources gone after a reboot", "fix the driver first: rebuild DKMS for the running kernel, enroll the "
        "signing key for Secure Boot, then reapply MIG", "gpuallocatablezero"),
}
# which layer a finding belongs to: L0 hardware, L1 kernel driver, L2 NVML, L3 container runtime,
# L4 device plugin, L5 kubelet ledger / scheduling, L6 in the container
CHECK_LAYERS = {"vram": 6, "xid": 0, "ecc": 0, "mig": 2, "driver": 1, "components": 4, "ledger": 5, "pending": 5,
                "pods": 6, "cordon": 5}


class HealthInputError(ValueError):
    """A threshold or option the judging cannot use; the message says which and why."""


def finding(node, check, code, severity, message, remedy, case=None, runbook=None):
    return {"node": node, "check": check, "code": code, "severity": severity, "case": case, "message": message,
            "remedy": remedy, "runbook": (DOCS + runbook) if runbook else None}


def severity_rank(severity):
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def worst_first(findings):
    return sorted(findings, key=lambda item: (severity_rank(item["severity"]), item["node"] or "", item["code"]))


def parse_duration_minutes(value, name):
    """Minutes from an int/float or a string ``30``, ``30m``, ``2h``, ``1d``; HealthInputError otherwise."""
    text = str(value).strip().lower() if value is not None else ""
    factor = {"m": 1, "h": 60, "d": 1440}.get(text[-1:], None)
    number = text[:-1] if factor else text
    try:
        minutes = float(number) * (factor or 1)
    except ValueError:
        raise HealthInputError("%s: %r is not a duration (minutes, or a number with m, h or d: 30m, 2h, 1d)"
                               % (name, value))
    if minutes < 0 or math.isnan(minutes) or math.isinf(minutes):
        raise HealthInputError("%s: %r must be a finite duration, not negative" % (name, value))
    return minutes


# ---------------------------------------------------------------- reading API objects


def _meta(obj):
    return obj.get("metadata") or {}


def _int(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def gpu_resources(node):
    """``{resource: {"capacity": n, "allocatable": n}}`` of the NVIDIA extended resources a node advertises."""
    status = node.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    found = {}
    for name in sorted(set(capacity) | set(allocatable)):
        if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX) or (
                name.startswith("nvidia.com/") and name.endswith(SHARED_SUFFIX)):
            found[name] = {"capacity": _int(capacity.get(name)) or 0, "allocatable": _int(allocatable.get(name)) or 0}
    return found


def is_gpu_node(node):
    labels = _meta(node).get("labels") or {}
    return bool(gpu_resources(node)) or any(labels.get(label) == "true" for label in GPU_NODE_LABELS)


def driver_version(node):
    labels = _meta(node).get("labels") or {}
    if labels.get(DRIVER_LABEL):
        return labels[DRIVER_LABEL]
    parts = [labels.get(label) for label in DRIVER_LABEL_PARTS]
    return ".".join(part for part in parts if part) or None


def is_ready(node):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def pod_gpu_request(pod):
    """Extended NVIDIA resources the pod's containers limit (the scheduler counts limits for extended resources)."""
    wanted = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for source in (resources.get("limits") or {}, resources.get("requests") or {}):
            for name, value in source.items():
                if name.startswith("nvidia.com/") and name not in wanted:
                    wanted[name] = _int(value) or 0
    return wanted


def component_of(pod):
    labels = _meta(pod).get("labels") or {}
    values = set(str(value) for value in labels.values())
    images = " ".join(container.get("image") or "" for container in (pod.get("spec") or {}).get("containers") or [])
    for component, (image_part, label_values) in COMPONENTS.items():
        if image_part in images or values & set(label_values):
            return component
    return None


def cordon_info(node, now):
    """``{since, by, reason, minutes}`` of a cordoned node, or None. When: our annotation's ``at``, else the
    ``node.kubernetes.io/unschedulable`` taint's ``timeAdded``; by: ours when our annotation is there."""
    if not (node.get("spec") or {}).get("unschedulable"):
        return None
    annotations = _meta(node).get("annotations") or {}
    ours = annotations.get(CORDON_ANNOTATION)
    since = None
    by = "unknown (no gpuops.nvidia/cordon annotation)"
    if ours:
        try:
            record = json.loads(ours)
        except ValueError:
            record = {}
        by = record.get("by") or "gpuops.nvidia"
        since = parse_time(record.get("at")) if record.get("at") else None
    if since is None:
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("key") == UNSCHEDULABLE_TAINT and taint.get("timeAdded"):
                since = parse_time(taint["timeAdded"])
    return {"since": since, "by": by, "ours": bool(ours), "reason": annotations.get(REASON_ANNOTATION),
            "minutes": None if since is None else max(0.0, (now - since) / 60.0)}


# ---------------------------------------------------------------- the cluster's view of each node


def cluster_view(nodes, pods, daemonsets, resource_slices=()):
    """``{node name: view}`` of every GPU node: resources, readiness, driver label, MIG labels, its component pods,
    its GPU pods; plus which components the cluster runs at all (a DaemonSet, or pods of it)."""
    gpu_nodes = [node for node in nodes if is_gpu_node(node)]
    views = {}
    for node in gpu_nodes:
        labels = _meta(node).get("labels") or {}
        views[_meta(node)["name"]] = {
            "name": _meta(node)["name"], "ready": is_ready(node), "resources": gpu_resources(node),
            "driver_version": driver_version(node), "labels": {key: value for key, value in labels.items()
                                                               if key.startswith("nvidia.com/")},
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "components": {component: [] for component in COMPONENTS}, "gpu_pods": [], "node": node,
            "dra_gpus": dra_gpu_count(resource_slices, _meta(node)["name"]) if resource_slices else None}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        view = views.get(node_name)
        if view is None or not _pods.is_alive(pod):
            continue
        component = component_of(pod)
        if component:
            view["components"][component].append(pod)
        elif pod_gpu_request(pod) or _uses_gpu_without_limit(pod):
            view["gpu_pods"].append(pod)
    present = set(component for component in (component_of(_template_as_pod(ds)) for ds in daemonsets) if component)
    for view in views.values():
        present.update(component for component, found in view["components"].items() if found)
    return views, sorted(present)


def _template_as_pod(daemonset):
    template = (daemonset.get("spec") or {}).get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {}, _daemonset=_meta(daemonset).get("name"))
    return {"metadata": {"labels": labels}, "spec": template.get("spec") or {}}


def _uses_gpu_without_limit(pod):
    """A container asking for GPUs through NVIDIA_VISIBLE_DEVICES without a resource limit (case 2)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "NVIDIA_VISIBLE_DEVICES" and env.get("value") not in (None, "", "void", "none"):
                return True
    return False


# ---------------------------------------------------------------- checks


def check_ledger(view, facts=None):
    """Capacity vs allocatable vs what NVML sees on the node (facts, when the node was looked at)."""
    name, findings = view["name"], []
    nvml = None
    if facts:
        nvml = len(facts.get("gpus") or []) if (facts.get("userspace") or {}).get("nvml_ok") else 0
    pci = None
    if facts and facts.get("pci_devices") is not None:
        pci = len([dev for dev in facts.get("pci_devices") or [] if str(dev.get("class_id", "")).startswith("0x03")])
    resources = view["resources"]
    gpu = resources.get(GPU_RESOURCE)
    if not view["ready"]:
        findings.append(finding(name, "ledger", "node_not_ready", "critical",
                                "%s is not Ready: the kubelet does not post its status" % name,
                                "check the kubelet and the node (systemctl status kubelet)"))
    if view.get("dra_gpus") is not None and resources:
        findings.append(finding(name, "ledger", "device_plugin_and_dra", "error",
                                "%s: the device plugin advertises %s and the DRA driver publishes %d GPU(s): both "
                                "hand out the same GPUs" % (name, ", ".join(sorted(resources)), view["dra_gpus"]),
                                "run one of them per node (label the node out of the device plugin's DaemonSet)",
                                case=2))
    if view.get("dra_gpus") is not None and not resources:
        if nvml is not None and nvml > view["dra_gpus"] and nvml_ok_of(facts):
            findings.append(finding(name, "ledger", "gpu_unhealthy", "error",
                                    "%s: the DRA driver publishes %d GPU(s), NVML sees %d" % (
                                        name, view["dra_gpus"], nvml),
                                    "read the node's Xid events (diagnose runbook)", case=4, runbook="gpuxiderror"))
        return findings
    if gpu is None and not any(res.startswith(MIG_RESOURCE_PREFIX) for res in resources):
        findings.append(finding(name, "ledger", "gpu_resources_gone", "critical",
                                "%s is a GPU node but advertises no nvidia.com/gpu resource%s" % (
                                    name, "" if nvml is None else " (NVML sees %d GPU(s))" % nvml),
                                "run the diagnose runbook on the node: driver not loaded after a reboot (DKMS not "
                                "rebuilt, Secure Boot rejecting the module) or the device plugin not running",
                                case=7, runbook="gpuallocatablezero"))
        return findings
    for resource, counts in sorted(resources.items()):
        capacity, allocatable = counts["capacity"], counts["allocatable"]
        if capacity > 0 and allocatable == 0:
            if nvml is None:
                code, case, what = "allocatable_zero", 1, "the stale ledger when NVML still sees the GPUs"
                remedy = "look at the node (NVML count); stale ledger: restart its device-plugin pod"
            elif nvml >= capacity or resource != GPU_RESOURCE:
                code, case, what = "stale_ledger", 1, "the stale ledger (the device plugin lost its registration)"
                remedy = "restart the device-plugin pod on the node (diagnose with gpuops_remediate: true)"
            else:
                code, case, what = "gpu_resources_gone", 7, "NVML sees fewer GPUs than the ledger"
                remedy = "run the diagnose runbook on the node: fix the driver (layers 1-2) first"
            findings.append(finding(name, "ledger", code, "critical", "%s: %s capacity %d, allocatable 0%s: %s" % (
                name, resource, capacity, "" if nvml is None else ", NVML %d" % nvml, what), remedy, case=case,
                runbook="gpuallocatablezero"))
        elif allocatable < capacity:
            findings.append(finding(name, "ledger", "gpu_unhealthy", "error",
                                    "%s: %s allocatable %d of capacity %d: the device plugin marked %d GPU(s) "
                                    "unhealthy" % (name, resource, allocatable, capacity, capacity - allocatable),
                                    "read the node's Xid events (diagnose runbook); drain and reset the GPU",
                                    case=4, runbook="gpuxiderror"))
    nvml_ok = nvml_ok_of(facts)
    if gpu is not None and nvml_ok and pci is not None and nvml < pci:
        findings.append(finding(name, "ledger", "gpu_off_the_bus", "critical",
                                "%s: NVML sees %d GPU(s), PCI shows %d: a GPU is gone from the bus" % (name, nvml, pci),
                                "cordon, drain and reboot or reset the node; a GPU that falls off again goes back to "
                                "the vendor", case=4, runbook="gpuxiderror"))
    elif gpu is not None and nvml_ok and gpu["capacity"] > nvml:
        findings.append(finding(name, "ledger", "gpu_off_the_bus", "critical",
                                "%s: capacity %d but NVML sees %d GPU(s): a GPU is gone from the bus"
                                % (name, gpu["capacity"], nvml), "cordon, drain and reset or reboot the node",
                                case=4, runbook="gpuxiderror"))
    return findings


def nvml_ok_of(facts):
    return bool(facts and (facts.get("userspace") or {}).get("nvml_ok"))


def check_components(view, present):
    """Device plugin / GFD / DCGM exporter pods on the node: missing, crash-looping, restarting."""
    name, findings = view["name"], []
    for component in present:
        pods = view["components"].get(component) or []
        severity_missing = "critical" if component == "device-plugin" else "warning"
        if not pods:
            findings.append(finding(name, "components", "%s_missing" % component.replace("-", "_"),
                                    severity_missing, "%s: no %s pod on this GPU node" % (name, component),
                                    "check the DaemonSet's nodeSelector, tolerations and the node's labels",
                                    case=3 if component == "device-plugin" else None,
                                    runbook="gpuallocatablezero" if component == "device-plugin" else None))
            continue
        for pod in pods:
            reason, restarts = _pods.waiting_reason(pod), _pods.restart_count(pod)
            pod_name = _pods.pod_key(pod)
            if reason == "CrashLoopBackOff" or (reason and reason.startswith("Err")) or reason == "Error":
                findings.append(finding(
                    name, "components", "%s_crash_loop" % component.replace("-", "_"),
                    "critical" if component == "device-plugin" else "error",
                    "%s: %s pod %s is %s (%d restarts)" % (name, component, pod_name, reason, restarts),
                    "read its log (kubectl logs --previous): NVML not found = driver/toolkit missing on the node, "
                    "'could not load NVML' after an upgrade = userspace and kernel mismatch",
                    case=3 if component == "device-plugin" else None,
                    runbook="gpuallocatablezero" if component == "device-plugin" else None))
            elif restarts >= RESTARTS_WARNING:
                findings.append(finding(name, "components", "%s_restarts" % component.replace("-", "_"), "warning",
                                        "%s: %s pod %s restarted %d times" % (name, component, pod_name, restarts),
                                        "read its previous log (kubectl logs --previous)"))
    return findings


def check_gpu_pods(view):
    """Case 2: a pod running on the GPU node that sees GPUs without a resource limit."""
    findings = []
    for pod in view["gpu_pods"]:
        if not pod_gpu_request(pod) and (pod.get("status") or {}).get("phase") == "Running":
            findings.append(finding(view["name"], "pods", "gpu_pod_without_limit", "warning",
                                    "%s: pod %s/%s sets NVIDIA_VISIBLE_DEVICES without a nvidia.com/gpu limit: it "
                                    "uses GPUs the ledger does not count" % (
                                        view["name"], _meta(pod).get("namespace"), _meta(pod).get("name")),
                                    "give it a nvidia.com/gpu limit; set the device plugin's "
                                    "deviceListStrategy to volume-mounts / CDI so env does not grant GPUs", case=2))
    return findings


def check_mig(view):
    """MIG layout / time-slicing drift: what GFD labels say the node should have vs what the plugin advertises."""
    name, labels, resources, findings = view["name"], view["labels"], view["resources"], []
    state = labels.get(MIG_CONFIG_STATE_LABEL)
    wanted = labels.get(MIG_CONFIG_LABEL)
    if state == "failed":
        findings.append(finding(name, "mig", "mig_config_failed", "error",
                                "%s: MIG manager could not apply mig.config=%s" % (name, wanted),
                                "reapply the MIG profile (diagnose with gpuops_remediate: true)", case=6))
    strategy = labels.get(MIG_STRATEGY_LABEL)
    mig_resources = [res for res in resources if res.startswith(MIG_RESOURCE_PREFIX)]
    if wanted and wanted not in ("all-disabled", "") and strategy == "mixed" and not mig_resources:
        findings.append(finding(name, "mig", "mig_layout_lost", "error",
                                "%s: mig.config=%s but the device plugin advertises no nvidia.com/mig-* resource: "
                                "the MIG layout is gone (driver upgrade or reboot)" % (name, wanted),
                                "reapply the MIG profile (diagnose with gpuops_remediate: true)", case=6))
    replicas = _int(labels.get(REPLICAS_LABEL))
    count = _int(labels.get("nvidia.com/gpu.count"))
    gpu = resources.get(GPU_RESOURCE)
    if replicas and replicas > 1 and count and gpu and gpu["capacity"] == count:
        findings.append(finding(name, "mig", "time_slicing_not_applied", "warning",
                                "%s: gpu.replicas=%d but nvidia.com/gpu capacity is %d (= GPUs): the time-slicing "
                                "config is not in effect" % (name, replicas, gpu["capacity"]),
                                "check the device plugin's config map and restart its pod on the node"))
    return findings


def check_cordon(view, now, threshold_minutes):
    info = cordon_info(view["node"], now)
    if info is None:
        return []
    long_enough = info["minutes"] is None or info["minutes"] >= threshold_minutes
    if not long_enough:
        return []
    since = "since an unknown time" if info["minutes"] is None else "for %.0f min" % info["minutes"]
    return [finding(view["name"], "cordon", "cordoned_long", "warning" if info["ours"] else "error",
                    "%s: cordoned %s by %s%s" % (view["name"], since, info["by"],
                                                 "; reason: %s" % info["reason"] if info["reason"] else ""),
                    "finish the work and uncordon, or annotate why it stays out (node_drain reason)")]


def check_pending(pods, gpu_node_names, now, threshold_minutes):
    """GPU pods Pending longer than the threshold, with the scheduler's reason (PodScheduled=False message)."""
    findings = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending" or not pod_gpu_request(pod) or not _pods.is_alive(pod):
            continue
        created = parse_time(_meta(pod).get("creationTimestamp"))
        minutes = None if created is None else (now - created) / 60.0
        if minutes is not None and minutes < threshold_minutes:
            continue
        reason = "no scheduler message"
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reason = condition.get("message") or condition.get("reason") or reason
        node = (pod.get("spec") or {}).get("nodeName")
        findings.append(finding(node if node in gpu_node_names else None, "pending", "gpu_pod_pending", "warning",
                                "pod %s/%s (%s) Pending for %s: %s" % (
                                    _meta(pod).get("namespace"), _meta(pod).get("name"),
                                    ", ".join("%s=%s" % item for item in sorted(pod_gpu_request(pod).items())),
                                    "an unknown time" if minutes is None else "%.0f min" % minutes, reason),
                                "free or add GPU capacity, or fix the pod's selectors/tolerations"))
    return findings


def driver_spread(views, target=None):
    """``({version: node count}, target, findings)``: nodes off the target (given, else the most common version)."""
    counts = {}
    for view in views.values():
        version = view["driver_version"] or "unknown"
        counts[version] = counts.get(version, 0) + 1
    known = dict((version, count) for version, count in counts.items() if version != "unknown")
    if target is None and known:
        target = sorted(known.items(), key=lambda item: (-item[1], item[0]))[0][0]
    findings = []
    for view in views.values():
        version = view["driver_version"]
        if target and version and version != target:
            findings.append(finding(view["name"], "driver", "driver_off_target", "warning",
                                    "%s: driver %s, the fleet's target is %s" % (view["name"], version, target),
                                    "roll the target driver to the node (gpuops.nvidia driver upgrade runbook)"))
    return counts, target, findings


def _xid_key(event):
    return "%s|%s|%s" % (event.get("code"), event.get("pci_address"), event.get("time"))


def check_node_facts(name, facts, baseline_xids):
    """From nvidia_driver_facts: Xid events not in the baseline, uncorrectable ECC, retired pages / remapped rows,
    and the driver's own diagnosis of layers 0-2 (critical/error only, to stay readable)."""
    findings, seen = [], set(baseline_xids or ())
    new_events = [event for event in facts.get("xid_events") or [] if _xid_key(event) not in seen]
    by_code = {}
    for event in new_events:
        by_code.setdefault(event.get("code"), []).append(event)
    for code, events in sorted(by_code.items(), key=lambda item: str(item[0])):
        hardware = code in HARDWARE_XIDS
        findings.append(finding(name, "xid", "xid_%s" % code, "critical" if hardware else "warning",
                                "%s: %d new Xid %s event(s) since the last check, last on %s: %s" % (
                                    name, len(events), code, events[-1].get("pci_address"),
                                    events[-1].get("message")),
                                "cordon and drain the node; reset the GPU or reboot" if hardware
                                else "look at the workload that raised it", case=4 if hardware else None,
                                runbook="gpuxiderror"))
    for gpu in facts.get("gpus") or []:
        label = "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id"))
        if gpu.get("ecc_volatile_uncorrectable"):
            findings.append(finding(name, "ecc", "ecc_uncorrectable", "critical",
                                    "%s: %s has %s uncorrectable ECC errors since driver load" % (
                                        name, label, gpu["ecc_volatile_uncorrectable"]),
                                    "drain the node and reset the GPU", case=4, runbook="gpumemoryeccuncorrectable"))
        if gpu.get("remapped_rows_failure"):
            findings.append(finding(name, "ecc", "remapped_rows_failure", "critical",
                                    "%s: %s row remapping failed" % (name, label), "RMA the GPU", case=4,
                                    runbook="gpuretiredpagespending"))
        for key in ("retired_pages_pending", "remapped_rows_pending"):
            if gpu.get(key):
                findings.append(finding(name, "ecc", key, "warning", "%s: %s %s" % (
                    name, label, key.replace("_", " ")), "drain the node and reset the GPU to apply them",
                    runbook="gpuretiredpagespending"))
    for entry in facts.get("diagnosis") or []:
        code = entry.get("code") or ""
        if entry.get("severity") in ("critical", "error") and not code.startswith("xid_") \
                and code not in ("ecc_uncorrectable", "remapped_rows_failure"):
            findings.append(finding(name, "node", code, entry["severity"], "%s: %s" % (name, entry.get("message")),
                                    entry.get("remedy"), case=_node_case(code)))
    return findings


VRAM_HELD_MIB = 1024


def check_vram(view, facts):
    """Case 5, VRAM leak signs: GPU memory held while no GPU pod runs on the node (a process outlived its pod)."""
    running = [pod for pod in view["gpu_pods"] if (pod.get("status") or {}).get("phase") == "Running"]
    held = [gpu for gpu in (facts or {}).get("gpus") or [] if (gpu.get("memory_used_mib") or 0) >= VRAM_HELD_MIB]
    if running or not held:
        return []
    return [finding(view["name"], "vram", "vram_held_without_pod", "warning",
                    "%s: %d GPU(s) hold memory (%s) while no GPU pod runs on the node" % (
                        view["name"], len(held), ", ".join("GPU %s %s MiB" % (gpu.get("index"), gpu["memory_used_mib"])
                                                           for gpu in held)),
                    "find the process (nvidia-smi --query-compute-apps=pid,used_memory --format=csv) and end it",
                    case=5, runbook="gpumemorypressure")]


def _node_case(code):
    if code in ("dkms_not_built_for_running_kernel", "secure_boot_unsigned_module", "secure_boot_signer_not_enrolled",
                "module_not_loaded", "kernel_headers_missing"):
        return 7
    if code == "xid_79":
        return 4
    if code in ("mig_pending_reset", "mig_create_failed"):
        return 6
    return None


def layer_of(item, facts=None):
    if item["code"] == "gpu_off_the_bus" or item["code"].startswith("xid_"):
        return 0
    if item["check"] == "node":
        for entry in (facts or {}).get("diagnosis") or []:
            if entry.get("code") == item["code"]:
                return entry.get("layer")
    return CHECK_LAYERS.get(item["check"])


def layers_and_cases(node_findings, facts=None):
    """``(failing_layer, cases)``: the lowest layer L0..L6 with an error or critical finding ("L2"), else None;
    the production cases matched, each ``{case, name, fix, runbook}``."""
    failing = [layer_of(item, facts) for item in node_findings
               if severity_rank(item["severity"]) <= severity_rank("error")]
    failing = [layer for layer in failing if layer is not None]
    cases = []
    for number in sorted(set(item["case"] for item in node_findings if item["case"])):
        name, fix, anchor = CASES[number]
        cases.append({"case": number, "name": name, "fix": fix, "runbook": (DOCS + anchor) if anchor else None})
    return ("L%d" % min(failing)) if failing else None, cases


def xid_baseline(previous_report):
    """The Xid keys the previous report saw, per node."""
    baseline = {}
    for name, node in ((previous_report or {}).get("nodes") or {}).items():
        baseline[name] = list(node.get("xid_seen") or [])
    return baseline


def vram_from_facts(node_facts):
    """``[{node, gpu, used_mib, total_mib}]`` from the facts' per-GPU memory."""
    rows = []
    for name, facts in sorted((node_facts or {}).items()):
        for gpu in facts.get("gpus") or []:
            if gpu.get("memory_used_mib") is not None:
                rows.append({"node": name, "gpu": gpu.get("index"), "uuid": gpu.get("uuid"),
                             "used_mib": gpu["memory_used_mib"], "total_mib": gpu.get("memory_total_mib")})
    return rows


def vram_top(rows, count=10):
    return sorted(rows, key=lambda row: (-(row.get("used_mib") or 0), row["node"], str(row.get("gpu"))))[:count]


def nodes_to_look_at(findings, views, mode="flagged", sample=0, seed=""):
    """Which nodes the health check must SSH to: ``none``, ``all``, or ``flagged`` (a finding of warning or worse
    on the node) plus ``sample`` others, chosen by a hash of ``seed`` (e.g. the ISO week) and the node name so the
    sample rotates from one check to the next."""
    if mode == "none":
        return []
    if mode == "all":
        return sorted(views)
    flagged = sorted(set(item["node"] for item in findings
                         if item["node"] in views and severity_rank(item["severity"]) <= severity_rank("warning")))
    others = sorted((name for name in views if name not in flagged),
                    key=lambda name: hashlib.sha256(("%s|%s" % (seed, name)).encode("utf-8")).hexdigest())
    return flagged + sorted(others[:max(0, int(sample))])


def judge(nodes, pods, daemonsets, now, resource_slices=(), node_facts=None, previous_report=None,
          pending_minutes=30.0, cordon_minutes=24 * 60.0, target_driver=None, vram_rows=None):
    """The whole report but its I/O: ``{summary, findings, nodes, driver_versions, vram_top}``."""
    views, present = cluster_view(nodes, pods, daemonsets, resource_slices)
    node_facts = node_facts or {}
    baseline = xid_baseline(previous_report)
    findings = []
    for name, view in sorted(views.items()):
        facts = node_facts.get(name)
        findings += check_ledger(view, facts)
        findings += check_components(view, present)
        findings += check_gpu_pods(view)
        findings += check_mig(view)
        findings += check_cordon(view, now, cordon_minutes)
        if facts:
            findings += check_node_facts(name, facts, baseline.get(name))
            findings += check_vram(view, facts)
    findings += check_pending(pods, set(views), now, pending_minutes)
    counts, target, spread = driver_spread(views, target_driver)
    findings = worst_first(findings + spread)
    per_node = {}
    for name, view in views.items():
        mine = [item for item in findings if item["node"] == name]
        facts = node_facts.get(name)
        xid_seen = sorted(set(baseline.get(name) or []) | set(
            _xid_key(event) for event in (facts or {}).get("xid_events") or []))
        per_node[name] = {
            "worst": mine[0]["severity"] if mine else "ok", "findings": len(mine),
            "codes": [item["code"] for item in mine], "ready": view["ready"], "driver_version": view["driver_version"],
            "resources": view["resources"], "unschedulable": view["unschedulable"],
            "nvml_gpu_count": len((facts or {}).get("gpus") or []) if facts else None,
            "looked_at": facts is not None, "xid_seen": xid_seen}
        per_node[name]["failing_layer"], per_node[name]["cases"] = layers_and_cases(mine, facts)
    by_severity = dict((severity, sum(1 for item in findings if item["severity"] == severity))
                       for severity in SEVERITIES)
    rows = vram_rows if vram_rows is not None else vram_from_facts(node_facts)
    return {"summary": {"gpu_nodes": len(views), "nodes_listed": len(nodes), "pods_listed": len(pods),
                        "findings": by_severity, "critical": by_severity["critical"] > 0,
                        "components_present": present, "nodes_looked_at": sorted(node_facts)},
            "findings": findings, "nodes": per_node, "driver_versions": counts, "driver_target": target,
            "vram_top": vram_top(rows)}


def node_order(report):
    """Node names worst first (then by number of findings, then name)."""
    return sorted(report["nodes"], key=lambda name: (
        severity_rank(report["nodes"][name]["worst"]), -report["nodes"][name]["findings"], name))


def markdown(report):
    """The readable report: summary, per-node table worst first (nodes with findings; healthy ones counted),
    findings worst first, driver spread, VRAM top 10."""
    summary = report["summary"]
    lines = ["# GPU fleet health check", "",
             "Generated %s; %d GPU node(s) of %d listed, %d looked at over SSH; %d API list call(s)." % (
                 report.get("generated_at"), summary["gpu_nodes"], summary["nodes_listed"],
                 len(summary["nodes_looked_at"]), report.get("api", {}).get("list_calls", 0)), "",
             "Findings: " + ", ".join("%s %d" % (severity, summary["findings"][severity]) for severity in SEVERITIES),
             "", "## Nodes, worst first", "",
             "| node | worst | findings | ready | gpu cap/alloc | NVML | driver | cordoned |",
             "|---|---|---|---|---|---|---|---|"]
    healthy = 0
    for name in node_order(report):
        node = report["nodes"][name]
        if node["worst"] in ("ok", "info"):
            healthy += 1
            continue
        gpu = node["resources"].get(GPU_RESOURCE) or {}
        lines.append("| %s | %s | %s | %s | %s/%s | %s | %s | %s |" % (
            name, node["worst"], ", ".join(node["codes"]), "yes" if node["ready"] else "**no**",
            gpu.get("capacity", "-"), gpu.get("allocatable", "-"),
            "-" if node["nvml_gpu_count"] is None else node["nvml_gpu_count"], node["driver_version"] or "-",
            "yes" if node["unschedulable"] else "no"))
    lines += ["", "%d node(s) without findings." % healthy, "", "## Findings, worst first", ""]
    for item in report["findings"]:
        lines.append("- **%s** `%s`%s: %s. Fix: %s%s" % (
            item["severity"], item["code"], " (case %s)" % item["case"] if item["case"] else "",
            (item["message"] or "").rstrip("."), item["remedy"], " ([runbook](%s))" % item["runbook"] if item["runbook"] else ""))
    if not report["findings"]:
        lines.append("None.")
    lines += ["", "## Driver versions", "", "Target: %s" % (report.get("driver_target") or "-"), "",
              "| version | nodes |", "|---|---|"]
    for version, count in sorted(report["driver_versions"].items(), key=lambda item: (-item[1], item[0])):
        lines.append("| %s | %d |" % (version, count))
    lines += ["", "## VRAM top 10 (%s)" % report.get("vram_source", "nvidia-smi"), "",
              "| node | gpu | used MiB | total MiB |", "|---|---|---|---|"]
    for row in report["vram_top"]:
        lines.append("| %s | %s | %s | %s |" % (row["node"], row.get("gpu"), row.get("used_mib"),
                                                row.get("total_mib") if row.get("total_mib") is not None else "-"))
    return "\n".join(lines) + "\n"
