# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU Operator's side of a driver roll-out, as pure functions on the API's JSON (no I/O).

- detection: which custom resource holds the driver version of each node (a ClusterPolicy with the driver
  enabled, or the NVIDIADriver CR that selects it), whether its upgrade controller is on (``autoUpgrade``), and
  whether a Helm release renders it;
- the install method: ``auto`` picks ``operator`` where the Operator owns the driver, refusals otherwise;
- pacing: the upgrade controller's skip label, held by this collection (marked with our annotation) on every
  target until its batch comes;
- the driver pod of a node: in step with its DaemonSet's newest revision, Ready, or failing the way the Operator
  judges it (a container not Ready after more than 10 restarts), and the validator pod;
- what a node's upgrade is waiting for, and when it is done or failed.

Names and semantics are those of NVIDIA/gpu-operator and NVIDIA/k8s-operator-libs ``pkg/upgrade``.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation

CLUSTER_POLICY = {"group": "nvidia.com", "version": "v1", "plural": "clusterpolicies", "kind": "ClusterPolicy"}
NVIDIA_DRIVER = {"group": "nvidia.com", "version": "v1alpha1", "plural": "nvidiadrivers", "kind": "NVIDIADriver"}

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
INITIAL_UNSCHEDULABLE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
# ours: the skip label (and the controller's initial-state annotation) of a node were set by this collection for
# the roll-out to a version; and the version a custom resource had before the roll-out raised it
HOLD_ANNOTATION = "gpuops.nvidia/operator-hold"
PREVIOUS_VERSION_ANNOTATION = "gpuops.nvidia/driver-upgrade-previous"

STATE_DONE = "upgrade-done"
STATE_FAILED = "upgrade-failed"
STATE_REQUIRED = "upgrade-required"
DRIVER_POD_SELECTOR = {"ClusterPolicy": "app=nvidia-driver-daemonset",
                       "NVIDIADriver": "app.kubernetes.io/component=nvidia-driver"}
# isDriverPodFailing: a container (or init container) not Ready with more restarts than this fails the node
FAILING_RESTARTS = 10
REVISION_HASH_LABEL = "controller-revision-hash"
# the values the Operator's deploy label takes on a node whose driver it runs (k8s-driver-manager pauses operands
# with the second one while it swaps the driver)
MANAGED_DEPLOY_VALUES = ("true", "paused-for-driver-upgrade")
HOST_METHODS = ("runfile", "package")
INSTALL_METHODS = ("auto", "operator") + HOST_METHODS


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _labels(obj):
    return _meta(obj).get("labels") or {}


def _annotations(obj):
    return _meta(obj).get("annotations") or {}


# --------------------------------------------------------------------------- detection

def driver_enabled(cluster_policy: dict) -> bool:
    """``spec.driver.enabled``: unset means enabled (the CRD's IsEnabled)."""
    driver = (cluster_policy.get("spec") or {}).get("driver") or {}
    return driver.get("enabled") is not False


def uses_nvidia_driver_crd(cluster_policy: dict) -> bool:
    driver = (cluster_policy.get("spec") or {}).get("driver") or {}
    return bool(driver.get("useNvidiaDriverCRD"))


def auto_upgrade(resource: dict) -> bool:
    """Whether the upgrade controller acts for this resource: ClusterPolicy ``spec.driver.upgradePolicy.autoUpgrade``
    (unset: off, the libs' default), NVIDIADriver ``spec.upgradePolicy.autoUpgrade`` (unset: on, the CRD's
    default)."""
    spec = resource.get("spec") or {}
    if resource.get("kind") == NVIDIA_DRIVER["kind"]:
        policy = spec.get("upgradePolicy")
        return True if not policy or policy.get("autoUpgrade") is None else bool(policy["autoUpgrade"])
    policy = (spec.get("driver") or {}).get("upgradePolicy") or {}
    return bool(policy.get("autoUpgrade"))


def version_field(resource: dict) -> str:
    return "spec.version" if resource.get("kind") == NVIDIA_DRIVER["kind"] else "spec.driver.version"


def resource_version_value(resource: dict):
    spec = resource.get("spec") or {}
    if resource.get("kind") == NVIDIA_DRIVER["kind"]:
        return spec.get("version")
    return (spec.get("driver") or {}).get("version")


def helm_release(resource: dict):
    """``{"release", "namespace"}`` of the Helm release that renders the resource, None when Helm does not manage
    it (Helm 3 marks what it owns with the label ``app.kubernetes.io/managed-by: Helm`` and the annotations
    ``meta.helm.sh/release-name`` and ``meta.helm.sh/release-namespace``)."""
    annotations = _annotations(resource)
    labels = _labels(resource)
    release = annotations.get("meta.helm.sh/release-name") or (
        labels.get("app.kubernetes.io/instance") if labels.get("app.kubernetes.io/managed-by") == "Helm" else None)
    if not release and labels.get("app.kubernetes.io/managed-by") != "Helm":
        return None
    return {"release": release or "gpu-operator",
            "namespace": annotations.get("meta.helm.sh/release-namespace") or "gpu-operator"}


def helm_values_change(resource: dict, target_version: str):
    """The values change a Helm-managed Operator needs so that its next ``helm upgrade`` renders the target version
    instead of reverting it; None when Helm does not manage the resource."""
    release = helm_release(resource)
    if release is None:
        return None
    return dict(release, values={"driver.version": target_version},
                command="helm upgrade %s nvidia/gpu-operator -n %s --reuse-values --set driver.version=%s" % (
                    release["release"], release["namespace"], target_version))


def previous_of(resource: dict, target_version: str):
    """The version recorded before a roll-out to ``target_version`` raised it (our annotation), else None."""
    value = json_annotation(resource, PREVIOUS_VERSION_ANNOTATION)
    if value is not None and value.get("to") == target_version and value.get("version"):
        return value["version"]
    return None


def _selected_by(nvidia_driver: dict, node: dict) -> bool:
    """An NVIDIADriver selects a node by the Operator's owner label, else by its ``spec.nodeSelector``."""
    owner = _labels(node).get(OWNER_LABEL)
    if owner:
        return owner == _meta(nvidia_driver).get("name")
    selector = (nvidia_driver.get("spec") or {}).get("nodeSelector") or {}
    labels = _labels(node)
    return all(labels.get(key) == value for key, value in selector.items()) and _runs_operator_driver(node)


def _runs_operator_driver(node: dict) -> bool:
    return _labels(node).get(DEPLOY_DRIVER_LABEL) in MANAGED_DEPLOY_VALUES


def detect(cluster_policies, nvidia_drivers, nodes, target_version: str) -> dict:
    """Who owns the driver of each node.

    Returns ``sources`` (one per custom resource holding a version: ``kind``, ``name``, ``field``,
    ``version`` now, ``previous_version`` (before this roll-out raised it, else the version now),
    ``auto_upgrade``, ``helm`` (the values change, or None), ``driver_pod_selector`` and ``nodes``, every node its
    version reaches) and ``node_source`` (node name -> source name) for the nodes whose driver the Operator runs.
    ``reason`` says in one line why (or why not) the Operator owns drivers here.
    """
    cluster_policies = [policy for policy in cluster_policies or [] if not _meta(policy).get("deletionTimestamp")]
    nvidia_drivers = [driver for driver in nvidia_drivers or [] if not _meta(driver).get("deletionTimestamp")]
    use_crd = any(uses_nvidia_driver_crd(policy) for policy in cluster_policies)
    resources = []
    if use_crd or (nvidia_drivers and not cluster_policies):
        resources = sorted(nvidia_drivers, key=lambda driver: _meta(driver).get("name"))
        reason = ("NVIDIADriver custom resources own the drivers (%s)" % ", ".join(
            _meta(driver).get("name") for driver in resources)) if resources else (
            "the ClusterPolicy defers to NVIDIADriver custom resources, and there are none")
    else:
        resources = [policy for policy in cluster_policies if driver_enabled(policy)]
        if resources:
            reason = "ClusterPolicy %s runs the driver (spec.driver.enabled)" % _meta(resources[0]).get("name")
        elif cluster_policies:
            reason = "the ClusterPolicy has the driver disabled (spec.driver.enabled: false): drivers are host-installed"
        else:
            reason = "no ClusterPolicy and no NVIDIADriver: the GPU Operator does not manage drivers here"
    sources, node_source = [], {}
    for resource in resources:
        kind = resource.get("kind") or (NVIDIA_DRIVER["kind"] if resource in nvidia_drivers else CLUSTER_POLICY["kind"])
        resource = dict(resource, kind=kind)
        name = _meta(resource).get("name")
        if kind == NVIDIA_DRIVER["kind"]:
            reached = [_meta(node)["name"] for node in nodes if _selected_by(resource, node)]
        else:
            reached = [_meta(node)["name"] for node in nodes if _runs_operator_driver(node)]
        for node_name in reached:
            node_source.setdefault(node_name, name)
        version = resource_version_value(resource)
        sources.append({
            "kind": kind, "name": name, "field": version_field(resource), "version": version,
            "previous_version": previous_of(resource, target_version) or version,
            "auto_upgrade": auto_upgrade(resource), "helm": helm_values_change(resource, target_version),
            "driver_pod_selector": DRIVER_POD_SELECTOR[kind], "nodes": reached})
    return {"sources": sources, "node_source": node_source, "reason": reason}


def resolve_method(requested: str, detection: dict, targets) -> dict:
    """``{"method", "errors"}``: the install method for the targets. ``auto`` is ``operator`` when the Operator
    runs the driver of the targets, else ``runfile``. A host method on an Operator-managed node, ``operator`` on a
    node it does not manage, and a mix under ``auto`` are refused with the reason."""
    targets = list(targets)
    managed = [name for name in targets if name in detection["node_source"]]
    unmanaged = [name for name in targets if name not in detection["node_source"]]
    errors = []
    if requested not in INSTALL_METHODS:
        return {"method": requested, "errors": ["install_method must be one of %s, not %r"
                                                % (", ".join(INSTALL_METHODS), requested)]}
    method = requested
    if requested == "auto":
        method = "operator" if managed else "runfile"
        if managed and unmanaged:
            errors.append("the GPU Operator runs the driver of %s but not of %s: roll them out in separate runs "
                          "(or force install_method)" % (", ".join(managed), ", ".join(unmanaged)))
    elif requested in HOST_METHODS and managed:
        errors.append("%s: the GPU Operator runs the driver of %s (%s); a host-installed driver would fight its "
                      "driver container. Use install_method operator (or auto)" % (
                          requested, ", ".join(managed), detection["reason"]))
    elif requested == "operator" and unmanaged:
        errors.append("operator: the GPU Operator does not run the driver of %s (%s)" % (
            ", ".join(unmanaged), detection["reason"]))
    return {"method": method, "errors": errors}


def operator_blockers(detection: dict, nodes, targets, target_version: str) -> list:
    """What keeps an Operator-mode roll-out from starting: a version that would reach nodes outside the roll-out
    (every node of the resource's driver DaemonSet takes it at its next pod restart), and skip labels set by
    someone else (the node is held on purpose; releasing it is not ours to do)."""
    targets = set(targets)
    blockers = []
    for source in detection["sources"]:
        if not targets & set(source["nodes"]):
            continue
        outside = [name for name in source["nodes"] if name not in targets]
        if outside:
            blockers.append({"node": ", ".join(outside), "reason": (
                "%s %s sets the driver of these nodes too and they are not targets: its new version would reach "
                "them unpaced at their next driver pod restart (add them to gpu_nodes)" % (source["kind"],
                                                                                           source["name"]))})
    for node in nodes:
        name = _meta(node).get("name")
        if name in targets and _labels(node).get(SKIP_LABEL) == "true" and hold_of(node, target_version) is None:
            blockers.append({"node": name, "reason": "%s=true was set by someone else (not this roll-out): the node "
                                                     "is held back on purpose" % SKIP_LABEL})
    return blockers


# --------------------------------------------------------------------------- pacing: the skip label we hold

def hold_of(node: dict, target_version: str):
    """Our hold of a node for the roll-out to ``target_version`` (``{"to", "run_id", "initial_unschedulable"}``),
    None when we do not hold it for that version."""
    value = json_annotation(node, HOLD_ANNOTATION)
    return value if value is not None and value.get("to") == target_version else None


def ours_in_progress(node: dict, target_version: str) -> bool:
    """The Operator's upgrade on this node was started by a roll-out of ours to the same version (a resume)."""
    return hold_of(node, target_version) is not None


def hold_patch(node: dict, target_version: str, run_id: str):
    """The label patch that holds a node back (skip label + our mark); {} when it is held by us already."""
    if _labels(node).get(SKIP_LABEL) == "true" and hold_of(node, target_version) is not None:
        return {}
    previous = hold_of(node, target_version) or {}
    mark = dict(previous, to=target_version, run_id=previous.get("run_id") or run_id)
    return {"metadata": {"labels": {SKIP_LABEL: "true"},
                         "annotations": {HOLD_ANNOTATION: json.dumps(mark, sort_keys=True, separators=(",", ":"))}}}


def release_patch(node: dict, target_version: str, keep_cordoned: bool):
    """The patch that lets the upgrade controller take a node we hold: the skip label goes, our mark stays (it
    says the node's upgrade is ours). ``keep_cordoned``: also set the controller's initial-state annotation, so
    that it leaves the node cordoned at the end (our gates decide when it is given back). None when we do not
    hold the node (someone else's skip label stays)."""
    hold = hold_of(node, target_version)
    if hold is None:
        return None
    labels, annotations = _labels(node), _annotations(node)
    patch = {}
    if SKIP_LABEL in labels:
        patch.setdefault("metadata", {})["labels"] = {SKIP_LABEL: None}
    if keep_cordoned and annotations.get(INITIAL_UNSCHEDULABLE_ANNOTATION) != "true":
        mark = dict(hold, initial_unschedulable=True)
        patch.setdefault("metadata", {})["annotations"] = {
            INITIAL_UNSCHEDULABLE_ANNOTATION: "true",
            HOLD_ANNOTATION: json.dumps(mark, sort_keys=True, separators=(",", ":"))}
    return patch


def clear_patch(node: dict, target_version: str):
    """The patch that removes everything our hold set (skip label, our mark, the initial-state annotation when we
    set it); {} when there is nothing of ours."""
    hold = hold_of(node, target_version)
    if hold is None:
        return {}
    labels, annotations = _labels(node), _annotations(node)
    patch = {"metadata": {"annotations": {HOLD_ANNOTATION: None}}}
    if SKIP_LABEL in labels:
        patch["metadata"]["labels"] = {SKIP_LABEL: None}
    if hold.get("initial_unschedulable") and INITIAL_UNSCHEDULABLE_ANNOTATION in annotations:
        patch["metadata"]["annotations"][INITIAL_UNSCHEDULABLE_ANNOTATION] = None
    return patch


# --------------------------------------------------------------------------- the version where the Operator reads it

def version_patch(resource: dict, target_version: str, run_id: str):
    """The merge patch that raises the resource's driver version, keeping the version it had in our annotation
    (kept as it is on a resume: the first raise recorded it); {} when it is at the target already and recorded."""
    current = resource_version_value(resource)
    recorded = previous_of(resource, target_version)
    patch = {}
    if recorded is None and current != target_version:
        mark = {"version": current, "to": target_version, "run_id": run_id}
        patch["metadata"] = {"annotations": {PREVIOUS_VERSION_ANNOTATION: json.dumps(
            mark, sort_keys=True, separators=(",", ":"))}}
    if current != target_version:
        if resource.get("kind") == NVIDIA_DRIVER["kind"]:
            patch["spec"] = {"version": target_version}
        else:
            patch["spec"] = {"driver": {"version": target_version}}
    return patch


def finish_patch(resource: dict):
    """Removes our record of the previous version once the roll-out completed; {} when there is none."""
    if PREVIOUS_VERSION_ANNOTATION in _annotations(resource):
        return {"metadata": {"annotations": {PREVIOUS_VERSION_ANNOTATION: None}}}
    return {}


# --------------------------------------------------------------------------- the driver pod of a node

def newest_revision_hash(daemonset: dict, revisions):
    """The hash of the DaemonSet's newest ControllerRevision (the one the Operator compares pods with), None when
    the DaemonSet has no revisions in ``revisions``."""
    uid = _meta(daemonset).get("uid")
    owned = [revision for revision in revisions or []
             if any(ref.get("uid") == uid for ref in _meta(revision).get("ownerReferences") or [])]
    if not owned:
        return None
    newest = max(owned, key=lambda revision: int(revision.get("revision") or 0))
    name_prefix = _meta(daemonset).get("name", "") + "-"
    name = _meta(newest).get("name", "")
    return _labels(newest).get(REVISION_HASH_LABEL) or (name[len(name_prefix):] if name.startswith(name_prefix)
                                                        else name)


def _images(pod_spec: dict) -> dict:
    spec = pod_spec or {}
    return dict((container.get("name"), container.get("image"))
                for container in (spec.get("containers") or []) + (spec.get("initContainers") or []))


def pod_in_sync(pod: dict, daemonset: dict, revisions) -> bool:
    """The pod runs the DaemonSet's current template: its revision hash label is the newest revision's; where the
    API keeps no ControllerRevisions for the DaemonSet, its container images are the template's."""
    newest = newest_revision_hash(daemonset, revisions)
    if newest is not None:
        return _labels(pod).get(REVISION_HASH_LABEL) == newest
    template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return _images(pod.get("spec")) == _images(template)


def _statuses(pod: dict) -> list:
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def pod_ready(pod: dict) -> bool:
    """Running and every container Ready (the Operator's test), not terminating."""
    status = pod.get("status") or {}
    if _meta(pod).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(container.get("ready") for container in containers)


def pod_failing(pod: dict) -> bool:
    """isDriverPodFailing: not Ready, and a container or init container not Ready restarted more than 10 times."""
    if pod_ready(pod):
        return False
    return any(not container.get("ready") and int(container.get("restartCount") or 0) > FAILING_RESTARTS
               for container in _statuses(pod))


def pod_problem(pod: dict) -> str:
    """The pod's trouble in one line: the waiting reason and the last termination message of its containers."""
    parts = []
    for container in _statuses(pod):
        if container.get("ready"):
            continue
        state = container.get("state") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        message = (last.get("message") or (state.get("terminated") or {}).get("message") or "").strip()
        detail = ", ".join(part for part in (waiting, "%d restarts" % int(container.get("restartCount") or 0),
                                             message.splitlines()[-1] if message else "") if part)
        parts.append("%s: %s" % (container.get("name"), detail))
    if not parts:
        parts.append("phase %s" % ((pod.get("status") or {}).get("phase") or "unknown"))
    return "; ".join(parts)


def owner_daemonset_name(pod: dict):
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet":
            return ref.get("name")
    return None


def driver_pod_view(pods, daemonsets, revisions, version=None) -> dict:
    """The node's driver pod (of ``pods``, already those of the node matching the driver selector): ``pod`` (name
    or None), ``in_sync`` (the DaemonSet's newest revision), ``current`` (in sync, and neither the pod's nor the
    DaemonSet's images name a version other than ``version``: right after a raise the Operator may not have
    rewritten the DaemonSet yet), ``ready``, ``failing``, ``terminating``, ``problem``."""
    live = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if not live:
        return {"pod": None, "namespace": None, "daemonset": None, "in_sync": False, "current": False,
                "daemonset_current": None, "ready": False, "failing": False, "terminating": False,
                "problem": "no driver pod on the node"}
    # the newest live pod first: a replacement may exist while the old one terminates
    live.sort(key=lambda pod: (_meta(pod).get("deletionTimestamp") is None, _meta(pod).get("creationTimestamp") or ""),
              reverse=True)
    pod = live[0]
    by_name = dict((_meta(daemonset).get("name"), daemonset) for daemonset in daemonsets or [])
    daemonset = by_name.get(owner_daemonset_name(pod))
    in_sync = daemonset is not None and pod_in_sync(pod, daemonset, revisions)
    daemonset_current = daemonset_runs_version(daemonset, version) if daemonset is not None and version else None
    pod_current = spec_runs_version(pod.get("spec"), version) if version else None
    return {"pod": _meta(pod).get("name"), "namespace": _meta(pod).get("namespace"),
            "daemonset": owner_daemonset_name(pod), "in_sync": in_sync,
            "current": in_sync and daemonset_current is not False and pod_current is not False,
            "daemonset_current": daemonset_current, "ready": pod_ready(pod), "failing": pod_failing(pod),
            "terminating": bool(_meta(pod).get("deletionTimestamp")), "problem": pod_problem(pod)}


def outdated_pod_to_restart(driver: dict) -> bool:
    """The runbook's own restart (autoUpgrade off): the node's driver pod is not of the DaemonSet's newest revision
    while the DaemonSet already carries the target, so its replacement will."""
    if driver.get("pod") is None or driver.get("terminating"):
        return False
    return not driver.get("in_sync") and driver.get("daemonset_current") is not False


def failing_pod_to_retry(driver: dict) -> bool:
    """A retry: the node's driver pod is of the newest revision but failing (CrashLoopBackOff past the Operator's
    10 restarts): a fresh pod starts its restarts anew."""
    if driver.get("pod") is None or driver.get("terminating"):
        return False
    return bool(driver.get("in_sync") and driver.get("failing"))


def node_progress(node: dict, driver: dict, validators, auto_upgrade_on: bool, require_validator: bool) -> dict:
    """Where a node's driver upgrade stands: ``done`` (the driver pod in step and Ready, the validator Ready, and
    with the upgrade controller on, its state upgrade-done), ``failed`` (the reason; upgrade-failed or a failing
    driver pod) or neither, with ``waiting_for``."""
    state = _labels(node).get(STATE_LABEL, "")
    if auto_upgrade_on and state == STATE_FAILED:
        return {"done": False, "failed": "the GPU Operator marked the node %s=%s (driver pod %s: %s)" % (
            STATE_LABEL, STATE_FAILED, driver.get("pod"), driver.get("problem")), "waiting_for": "", "state": state}
    if driver.get("current") and driver.get("failing"):
        return {"done": False, "failed": "driver pod %s fails: %s" % (driver.get("pod"), driver.get("problem")),
                "waiting_for": "", "state": state}
    waiting = []
    if not driver.get("current") or driver.get("terminating"):
        waiting.append("the driver pod of the new revision")
    elif not driver.get("ready"):
        waiting.append("driver pod %s Ready (%s)" % (driver.get("pod"), driver.get("problem")))
    ready_validators = [pod for pod in validators if pod_ready(pod)]
    if require_validator and not ready_validators:
        waiting.append("the operator validator pod Ready")
    if auto_upgrade_on and state != STATE_DONE:
        waiting.append("%s=%s (now %s)" % (STATE_LABEL, STATE_DONE, state or "unset"))
    return {"done": not waiting, "failed": None, "waiting_for": "; ".join(waiting), "state": state}


def retry_failed_patch(node: dict):
    """A node the controller left in upgrade-failed goes back to upgrade-required: the retry a maintainer
    describes (gpu-operator #2549: 'intentionally recoverable'); {} when not failed."""
    if _labels(node).get(STATE_LABEL) != STATE_FAILED:
        return {}
    return {"metadata": {"labels": {STATE_LABEL: STATE_REQUIRED}}}


def image_runs_version(image: str, version: str):
    """Whether a container image reference names the driver ``version`` in its tag (the Operator's driver images
    are tagged ``VERSION`` or ``VERSION-OS``, e.g. ``550.54.15-ubuntu22.04``): True, False, or None when the tag
    names no driver version at all (a digest, ``latest``)."""
    reference = (image or "").split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    head = tag.split("-", 1)[0]
    if not head[:1].isdigit() or "." not in head:
        return None
    return head == version


def spec_runs_version(pod_spec: dict, version: str):
    """The verdict of the spec's container images (see image_runs_version): True when one names ``version``, False
    when some name another version and none this one, None when none names a version."""
    verdicts = [image_runs_version(image, version) for image in _images(pod_spec).values()]
    if any(verdict is True for verdict in verdicts):
        return True
    if any(verdict is False for verdict in verdicts):
        return False
    return None


def daemonset_runs_version(daemonset: dict, version: str):
    return spec_runs_version(((daemonset.get("spec") or {}).get("template") or {}).get("spec"), version)
