"""What the API server's defaulting does to objects at create and update (pod spec, workloads, namespaces,
PodDisruptionBudgets, Secrets) and the pod QoS class (kube's GetPodQOS)."""
from __future__ import annotations

import base64
from typing import Optional


def _default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        image = container.get("image", "")
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})


def _default_template(obj: dict) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        _default_pod_spec(template.setdefault("spec", {}))


def _default_rolling_update(strategy: dict, rolling_update_defaults: dict) -> None:
    """Strategy type RollingUpdate by default; its rollingUpdate parameters defaulted only for that type."""
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling_update = strategy.setdefault("rollingUpdate", {})
        for name, value in rolling_update_defaults.items():
            rolling_update.setdefault(name, value)


TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"


def apply_defaults(resource: str, obj: dict, current: Optional[dict] = None) -> None:
    """Defaults of a created object (``current`` None) or of an update of ``current``."""
    metadata = obj["metadata"]
    if resource == "namespaces":
        metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = metadata["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
    elif resource == "pods":
        _default_pod_spec(obj.setdefault("spec", {}))
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", qos_class(obj["spec"]))
    elif resource == "deployments":
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        _default_rolling_update(spec.setdefault("strategy", {}), {"maxUnavailable": "25%", "maxSurge": "25%"})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        _default_template(obj)
        obj.setdefault("status", {})
    elif resource in ("replicasets", "statefulsets"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        if resource == "statefulsets":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
        _default_template(obj)
        obj.setdefault("status", {"replicas": 0})
    elif resource == "jobs":
        _default_job(obj)
    elif resource == "daemonsets":
        spec = obj.setdefault("spec", {})
        _default_rolling_update(spec.setdefault("updateStrategy", {}), {"maxUnavailable": 1, "maxSurge": 0})
        spec.setdefault("revisionHistoryLimit", 10)
        _default_template(obj)
        _set_template_generation(obj, current)
        obj.setdefault("status", {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                  "desiredNumberScheduled": 0, "numberReady": 0})
    elif resource == "secrets":
        _default_secret(obj)
    elif resource == "poddisruptionbudgets":
        obj.setdefault("spec", {})
        obj.setdefault("status", {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                  "expectedPods": 0})


def _set_template_generation(daemonset: dict, current: Optional[dict]) -> None:
    """A DaemonSet's ``spec.templateGeneration`` as apps/v1 shows it (the annotation
    ``deprecated.daemonset.template.generation``): 1 at create, one more at each update that changes the pod
    template (what ``kubernetes.core.k8s_rollback`` reads beside the ControllerRevisions)."""
    generation = 1
    if current is not None:
        before = (current["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
        generation = int(before) if (before or "").isdigit() else 1
        if (daemonset.get("spec") or {}).get("template") != (current.get("spec") or {}).get("template"):
            generation += 1
    daemonset["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION_ANNOTATION] = str(generation)


def _default_secret(obj: dict) -> None:
    """Type ``Opaque`` by default; ``stringData`` is write-only: merged into ``data`` (base64), its keys winning,
    as the v1 -> internal Secret conversion does."""
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = obj.get("data") or {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


def _default_job(obj: dict) -> None:
    """batch/v1 Job defaults; without `manualSelector` the selector and template labels carry the job's uid."""
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1          # a work queue (parallelism without completions) keeps completions unset
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    metadata = obj["metadata"]
    if not spec.get("manualSelector") and metadata.get("uid"):
        labels = {"batch.kubernetes.io/controller-uid": metadata["uid"], "controller-uid": metadata["uid"],
                  "batch.kubernetes.io/job-name": metadata["name"], "job-name": metadata["name"]}
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": metadata["uid"]}})
        template = spec.setdefault("template", {})
        template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    _default_template(obj)
    obj.setdefault("status", {})


_QOS_RESOURCES = ("cpu", "memory")


def qos_class(pod_spec: dict) -> str:
    """kube's GetPodQOS: only cpu and memory count (a pod asking for nothing but ``nvidia.com/gpu`` is
    BestEffort), init containers included; Guaranteed needs cpu and memory limits in every container with
    requests (when given) equal to them."""
    containers = (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or [])
    requests_and_limits = [(_qos_amounts(container, "requests"), _qos_amounts(container, "limits"))
                           for container in containers]
    if not any(requests or limits for requests, limits in requests_and_limits):
        return "BestEffort"
    guaranteed = all(set(limits) == set(_QOS_RESOURCES) and
                     all(requests.get(name, limit) == limit for name, limit in limits.items())
                     for requests, limits in requests_and_limits)
    return "Guaranteed" if guaranteed else "Burstable"


def _qos_amounts(container: dict, kind: str) -> dict:
    amounts = (container.get("resources") or {}).get(kind) or {}
    return {name: amount for name, amount in amounts.items() if name in _QOS_RESOURCES}
