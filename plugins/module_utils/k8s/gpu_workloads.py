# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Case 2 of the seed runbook, "pod Running without GPUs", judged on the API's JSON (no I/O):

- ``cuda_pods_without_gpu_limit(pods)``: pods whose containers run a CUDA image (nvcr.io/nvidia/cuda, pytorch,
  tensorflow, tritonserver, ...) or set NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, with no container of the pod
  holding a ``nvidia.com/gpu`` or ``nvidia.com/mig-*`` limit. Such a pod is scheduled anywhere, and on a GPU node
  the NVIDIA runtime may hand it every GPU behind the scheduler's back (or none: CUDA then sees no device).
- ``double_served_nodes(nodes, resource_slices)``: nodes where the device plugin (allocatable ``nvidia.com/gpu``)
  and DRA (ResourceSlices of driver ``gpu.nvidia.com``) both serve GPUs: two ledgers for one set of devices.
"""

from __future__ import annotations

import re

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DRA_DRIVER = "gpu.nvidia.com"
GPU_ENV_VARS = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# Values that ask for no GPU (nvidia-container-runtime: "void" and "none"; CUDA: "" and "-1" hide every device).
NO_GPU_ENV_VALUES = ("", "void", "none", "-1", "NoDevFiles")

# Image repositories that only make sense with a GPU. Matched against the image's repository path (registry and
# tag stripped for the generic names, kept for the nvcr.io ones).
CUDA_IMAGE_PATTERNS = (
    r"(^|/)nvcr\.io/nvidia/",
    r"^nvcr\.io/nvidia/",
    r"(^|/)nvidia/cuda(:|@|$)",
    r"(^|/)pytorch/pytorch(:|@|$)",
    r"(^|/)tensorflow/tensorflow:[^@]*gpu",
    r"(^|/)tritonserver(:|@|$)",
    r"(^|/)(cuda|pytorch|tensorflow)[-_][^/:]*(:|@|$)",
    r"(^|/)vllm/vllm-openai(:|@|$)",
    r"(^|/)rapidsai/",
)
_CUDA_IMAGE_RE = re.compile("|".join("(?:%s)" % pattern for pattern in CUDA_IMAGE_PATTERNS))
# NVIDIA's own operator images do not use a GPU through a limit: they are the stack that serves them.
OPERATOR_IMAGE_RE = re.compile(r"nvcr\.io/nvidia/(k8s-device-plugin|k8s/(?!cuda-sample)|gpu-operator|cloud-native/|gpu-feature-discovery"
                               r"|driver|k8s-driver-manager|container-toolkit|dcgm|mig-manager|k8s-dra-driver)")


def is_cuda_image(image):
    """Whether ``image`` names a CUDA workload image (not one of the GPU stack's own images)."""
    image = (image or "").strip()
    if not image or OPERATOR_IMAGE_RE.search(image):
        return False
    return bool(_CUDA_IMAGE_RE.search(image))


def gpu_env(container):
    """The GPU env vars the container sets to a value that asks for GPUs, as ``{name: value}``."""
    found = {}
    for env in container.get("env") or []:
        name = env.get("name")
        if name in GPU_ENV_VARS:
            value = env.get("value")
            if "valueFrom" in env and value is None:
                found[name] = "(valueFrom)"
            elif value is not None and value.strip() not in NO_GPU_ENV_VALUES:
                found[name] = value
    return found


def gpu_limits(container):
    """The container's GPU limits (``nvidia.com/gpu`` and ``nvidia.com/mig-*``) as ``{resource: quantity}``."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {name: str(value) for name, value in limits.items()
            if (name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)) and str(value) not in ("0", "")}


def _claims(pod):
    spec = pod.get("spec") or {}
    return bool(spec.get("resourceClaims")) or any(
        (c.get("resources") or {}).get("claims") for c in spec.get("containers") or [])


def _owner(pod):
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return "%s/%s" % (ref.get("kind"), ref.get("name"))
    return None


def pod_finding(pod):
    """The case-2 finding for ``pod``, or None. A pod with a GPU limit on any container, or one with a DRA
    resource claim (the GPU comes through the claim), or one that has finished, is not a finding."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return None
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    if any(gpu_limits(c) for c in containers) or _claims(pod):
        return None
    reasons = []
    for container in containers:
        name = container.get("name")
        if OPERATOR_IMAGE_RE.search(container.get("image") or ""):
            continue  # the GPU stack itself (device plugin, DCGM, ...) sees GPUs by design
        if is_cuda_image(container.get("image")):
            reasons.append({"container": name, "why": "image", "image": container.get("image")})
        for var, value in sorted(gpu_env(container).items()):
            reasons.append({"container": name, "why": "env", "env": var, "value": value})
    if not reasons:
        return None
    namespace, name = meta.get("namespace", "default"), meta.get("name")
    what = "; ".join("%s %s" % (r["container"], "runs %s" % r["image"] if r["why"] == "image"
                                else "sets %s=%s" % (r["env"], r["value"])) for r in reasons)
    node = spec.get("nodeName")
    return {
        "namespace": namespace,
        "pod": name,
        "node": node,
        "phase": phase,
        "owner": _owner(pod),
        "containers": sorted({r["container"] for r in reasons}),
        "reasons": reasons,
        "case": 2,
        "severity": "error" if phase == "Running" and node else "warning",
        "message": "pod %s/%s%s has no nvidia.com/gpu (or nvidia.com/mig-*) limit: %s" % (
            namespace, name, " on %s" % node if node else "", what),
        "remedy": ("set resources.limits[\"nvidia.com/gpu\"] (or a nvidia.com/mig-* resource) on the container%s%s; "
                   "without it the scheduler does not count the GPU and the runtime may expose all GPUs of the node "
                   "or none" % ("s" if len(reasons) > 1 else "",
                                " in the pod template of %s" % _owner(pod) if _owner(pod) else "")),
    }


def cuda_pods_without_gpu_limit(pods, namespaces=None):
    """Every case-2 finding among ``pods`` (optionally only in ``namespaces``), Running on a node first."""
    findings = []
    for pod in pods:
        if namespaces and (pod.get("metadata") or {}).get("namespace") not in namespaces:
            continue
        finding = pod_finding(pod)
        if finding:
            findings.append(finding)
    return sorted(findings, key=lambda f: (f["severity"] != "error", f["namespace"], f["pod"]))


def _dra_devices(resource_slices):
    per_node = {}
    for rs in resource_slices:
        spec = rs.get("spec") or {}
        if spec.get("driver") != DRA_DRIVER or not spec.get("nodeName"):
            continue
        per_node[spec["nodeName"]] = per_node.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
    return per_node


def double_served_nodes(nodes, resource_slices):
    """Nodes where the device plugin and the DRA driver both serve GPUs, by name."""
    dra = _dra_devices(resource_slices)
    findings = []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        plugin = str(allocatable.get(GPU_RESOURCE, "0"))
        if name in dra and plugin not in ("0", ""):
            findings.append({
                "node": name,
                "device_plugin_gpus": plugin,
                "dra_devices": dra[name],
                "case": 2,
                "severity": "error",
                "message": "%s: the device plugin advertises nvidia.com/gpu=%s and the DRA driver %s publishes %d "
                           "devices: one GPU can be handed out twice" % (name, plugin, DRA_DRIVER, dra[name]),
                "remedy": ("serve GPUs on this node through one of them: disable the device plugin on DRA nodes "
                           "(GPU Operator: devicePlugin.enabled=false, or the node label "
                           "nvidia.com/gpu.deploy.device-plugin=false) or remove the DRA driver's kubelet plugin "
                           "from the node"),
            })
    return sorted(findings, key=lambda f: f["node"])
