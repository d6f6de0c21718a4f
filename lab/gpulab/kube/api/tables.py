"""Server-side printing: `kubectl get` asks for a meta.k8s.io/v1 Table and prints the server's columns.

The column sets follow kube-apiserver's printers for the kinds an operator looks at, NAME/AGE for the rest.
"""

from __future__ import annotations

import time
from typing import List, Optional, Tuple

from .resources import RESOURCES
from .timefmt import parse_rfc3339


def human_duration(seconds: float) -> str:
    """kube's duration.HumanDuration: 45s, 5m3s, 15m, 3h20m, 2d5h, 400d, 3y20d."""
    seconds = int(seconds)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return "%ds" % seconds
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return "%dm" % minutes if rest == 0 else "%dm%ds" % (minutes, rest)
    if minutes < 180:
        return "%dm" % minutes
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return "%dh" % hours if rest == 0 else "%dh%dm" % (hours, rest)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        rest = hours % 24
        return "%dd" % (hours // 24) if rest == 0 else "%dd%dh" % (hours // 24, rest)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if rest == 0 else "%dy%dd" % (hours // 24 // 365, rest)
    return "%dy" % (hours // 24 // 365)


def _age(timestamp: Optional[str]) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = parse_rfc3339(timestamp)
    except ValueError:
        return "<unknown>"
    return human_duration(time.time() - then)


age_of = _age


def _column(name: str, kind: str = "string", priority: int = 0, format_: str = "") -> dict:
    return {"name": name, "type": kind, "format": format_, "description": name, "priority": priority}


def _node_status(node: dict) -> str:
    """As kubectl prints it: Ready / NotReady (False or Unknown) / Unknown (no Ready condition yet)."""
    ready = "Unknown"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = "Ready" if condition.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(node: dict) -> str:
    labels = node["metadata"].get("labels") or {}
    roles = {key.split("/", 1)[1] for key in labels
             if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(roles)) or "<none>"


def _node_address(node: dict, kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return address.get("address", "<none>")
    return "<none>"


def _node_row(node: dict) -> list:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [node["metadata"]["name"], _node_status(node), _node_roles(node), _age(node["metadata"].get("creationTimestamp")),
            info.get("kubeletVersion", ""), _node_address(node, "InternalIP"), _node_address(node, "ExternalIP"),
            info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def _pod_status_reason(pod: dict) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    running = False
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            terminated = state["terminated"]
            reason = terminated.get("reason") or ("Signal:%s" % terminated["signal"] if terminated.get("signal")
                                                  else "ExitCode:%s" % terminated.get("exitCode", 0))
        elif state.get("running") and container.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_restarts(pod: dict) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(container.get("restartCount") or 0) for container in statuses)
    finished = [((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
                for container in statuses]
    finished = sorted(value for value in finished if value)
    if restarts and finished:
        return "%d (%s ago)" % (restarts, _age(finished[-1]))
    return str(restarts)


def _pod_row(pod: dict) -> list:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = sum(1 for container in status.get("containerStatuses") or [] if container.get("ready"))
    return [pod["metadata"]["name"], "%d/%d" % (ready, total), _pod_status_reason(pod), _pod_restarts(pod),
            _age(pod["metadata"].get("creationTimestamp")), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", "<none>"]


def _containers_and_images(obj: dict) -> Tuple[str, str]:
    containers = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _selector_text(obj: dict) -> str:
    selector = (obj.get("spec") or {}).get("selector") or {}
    parts = ["%s=%s" % item for item in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        parts.append("%s %s (%s)" % (expression.get("key"), expression.get("operator", "").lower(),
                                     ",".join(expression.get("values") or [])))
    return ",".join(parts) or "<none>"


def _deployment_row(obj: dict) -> list:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers, images = _containers_and_images(obj)
    return [obj["metadata"]["name"], "%d/%d" % (status.get("readyReplicas", 0), spec.get("replicas", 0)),
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0),
            _age(obj["metadata"].get("creationTimestamp")), containers, images, _selector_text(obj)]


def _daemonset_row(obj: dict) -> list:
    status = obj.get("status") or {}
    node_selector = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector")) or {}
    containers, images = _containers_and_images(obj)
    return [obj["metadata"]["name"], status.get("desiredNumberScheduled", 0), status.get("currentNumberScheduled", 0),
            status.get("numberReady", 0), status.get("updatedNumberScheduled", 0), status.get("numberAvailable", 0),
            ",".join("%s=%s" % item for item in sorted(node_selector.items())) or "<none>",
            _age(obj["metadata"].get("creationTimestamp")), containers, images, _selector_text(obj)]


def _replicaset_row(obj: dict) -> list:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers, images = _containers_and_images(obj)
    return [obj["metadata"]["name"], spec.get("replicas", 0), status.get("replicas", 0), status.get("readyReplicas", 0),
            _age(obj["metadata"].get("creationTimestamp")), containers, images, _selector_text(obj)]


def _pdb_row(obj: dict) -> list:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    return [obj["metadata"]["name"], "N/A" if min_available is None else str(min_available),
            "N/A" if max_unavailable is None else str(max_unavailable), status.get("disruptionsAllowed", 0),
            _age(obj["metadata"].get("creationTimestamp"))]


def _event_row(event: dict) -> list:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    last_seen = event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
        "creationTimestamp")
    return [_age(last_seen), event.get("type", ""), event.get("reason", ""),
            "%s/%s" % ((involved.get("kind") or "").lower(), involved.get("name", "")),
            event.get("message") or event.get("note") or ""]


def _lease_row(lease: dict) -> list:
    return [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity", ""),
            _age(lease["metadata"].get("creationTimestamp"))]


def _resourceslice_row(obj: dict) -> list:
    spec = obj.get("spec") or {}
    return [obj["metadata"]["name"], spec.get("nodeName", ""), spec.get("driver", ""),
            (spec.get("pool") or {}).get("name", ""), _age(obj["metadata"].get("creationTimestamp"))]


def _default_row(obj: dict) -> list:
    return [obj["metadata"]["name"], _age(obj["metadata"].get("creationTimestamp"))]


_NAME = _column("Name", format_="name")
_AGE = _column("Age")
TABLE_PRINTERS = {
    "nodes": ([_NAME, _column("Status"), _column("Roles"), _AGE, _column("Version"), _column("Internal-IP", priority=1),
               _column("External-IP", priority=1), _column("OS-Image", priority=1),
               _column("Kernel-Version", priority=1), _column("Container-Runtime", priority=1)], _node_row),
    "pods": ([_NAME, _column("Ready"), _column("Status"), _column("Restarts"), _AGE, _column("IP", priority=1),
              _column("Node", priority=1), _column("Nominated Node", priority=1),
              _column("Readiness Gates", priority=1)], _pod_row),
    "deployments": ([_NAME, _column("Ready"), _column("Up-to-date", "integer"), _column("Available", "integer"), _AGE,
                     _column("Containers", priority=1), _column("Images", priority=1),
                     _column("Selector", priority=1)], _deployment_row),
    "daemonsets": ([_NAME, _column("Desired", "integer"), _column("Current", "integer"), _column("Ready", "integer"),
                    _column("Up-to-date", "integer"), _column("Available", "integer"), _column("Node Selector"), _AGE,
                    _column("Containers", priority=1), _column("Images", priority=1),
                    _column("Selector", priority=1)], _daemonset_row),
    "replicasets": ([_NAME, _column("Desired", "integer"), _column("Current", "integer"), _column("Ready", "integer"),
                     _AGE, _column("Containers", priority=1), _column("Images", priority=1),
                     _column("Selector", priority=1)], _replicaset_row),
    "poddisruptionbudgets": ([_NAME, _column("Min Available"), _column("Max Unavailable"),
                              _column("Allowed Disruptions", "integer"), _AGE], _pdb_row),
    "namespaces": ([_NAME, _column("Status"), _AGE],
                   lambda ns: [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""),
                               _age(ns["metadata"].get("creationTimestamp"))]),
    "configmaps": ([_NAME, _column("Data", "integer"), _AGE],
                   lambda cm: [cm["metadata"]["name"], len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
                               _age(cm["metadata"].get("creationTimestamp"))]),
    "events": ([_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"), _column("Message")],
               _event_row),
    "leases": ([_NAME, _column("Holder"), _AGE], _lease_row),
    "resourceslices": ([_NAME, _column("Node"), _column("Driver"), _column("Pool"), _AGE], _resourceslice_row),
}
TABLE_PRINTERS["events.events.k8s.io"] = TABLE_PRINTERS["events"]
TABLE_PRINTERS["customresourcedefinitions"] = ([_NAME, _column("Created At", "date")],
                                               lambda crd: [crd["metadata"]["name"], crd["metadata"]["creationTimestamp"]])


def _partial_metadata(obj: dict) -> dict:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table_for(resource: str, objects: List[dict], include_object: Optional[str] = "PartialObjectMetadata") -> dict:
    columns, row_of = TABLE_PRINTERS.get(resource) or RESOURCES.get(resource, {}).get("printer") or \
        ([_NAME, _AGE], _default_row)
    rows = []
    for obj in objects:
        row = {"cells": row_of(obj)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = _partial_metadata(obj)
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": columns,
            "rows": rows}


def _statefulset_row(obj: dict) -> list:
    containers, images = _containers_and_images(obj)
    return [obj["metadata"]["name"], "%d/%d" % ((obj.get("status") or {}).get("readyReplicas", 0),
                                                (obj.get("spec") or {}).get("replicas", 0)),
            _age(obj["metadata"].get("creationTimestamp")), containers, images]


def _job_status(status: dict) -> str:
    """kube's printJob STATUS: the finished condition, else Suspended, else Running."""
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    for kind, text in (("Complete", "Complete"), ("Failed", "Failed"), ("FailureTarget", "FailureTarget"),
                       ("SuccessCriteriaMet", "SuccessCriteriaMet"), ("Suspended", "Suspended")):
        if conditions.get(kind) == "True":
            return text
    return "Running"


def _job_row(obj: dict) -> list:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("completions") is not None:
        completions = "%d/%d" % (status.get("succeeded", 0), spec["completions"])
    else:
        parallelism = spec.get("parallelism", 0)
        completions = "%d/1 of %d" % (status.get("succeeded", 0), parallelism) if parallelism > 1 else \
            "%d/1" % status.get("succeeded", 0)
    duration = ""
    if status.get("startTime"):
        end = parse_rfc3339(status["completionTime"]) if status.get("completionTime") else time.time()
        duration = human_duration(end - parse_rfc3339(status["startTime"]))
    containers, images = _containers_and_images(obj)
    return [obj["metadata"]["name"], _job_status(status), completions, duration,
            _age(obj["metadata"].get("creationTimestamp")), containers, images, _selector_text(obj)]


TABLE_PRINTERS["statefulsets"] = ([_NAME, _column("Ready"), _AGE, _column("Containers", priority=1),
                                   _column("Images", priority=1)], _statefulset_row)
TABLE_PRINTERS["jobs"] = ([_NAME, _column("Status"), _column("Completions"), _column("Duration"), _AGE,
                           _column("Containers", priority=1), _column("Images", priority=1),
                           _column("Selector", priority=1)], _job_row)
