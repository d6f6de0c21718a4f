"""The GPU Operator's driver upgrade controller (gpu-operator `controllers/upgrade_controller.go` over
k8s-operator-libs `pkg/upgrade`), as `shared/research/gpu_operator_upgrade.md` describes it.

Each node hosting a driver pod carries its state in the label `nvidia.com/gpu-driver-upgrade-state`:
`upgrade-required` (its driver pod's `controller-revision-hash` is not the DaemonSet's newest ControllerRevision,
or the annotation `nvidia.com/gpu-driver-upgrade-requested=true`) -> `cordon-required` (when a slot is free:
`maxParallelUpgrades` (0 = unlimited) minus nodes in progress, capped by `maxUnavailable` (int or percentage of
the managed nodes, rounded up) minus nodes cordoned or NotReady; nodes labelled
`nvidia.com/gpu-driver-upgrade.skip=true` stay) -> `wait-for-jobs-required` (cordoned; waits while pods matching
`waitForCompletion.podSelector` run on the node, up to `timeoutSeconds`, 0 = forever) -> `pod-deletion-required`
(GPU pods evicted; on failure `drain-required` if `drain.enable`, else `upgrade-failed`) -> `pod-restart-required`
(the out-of-date driver pod is deleted; the OnDelete DaemonSet recreates it at the newest revision) ->
`validation-required` (the driver pod Ready; then every `app=nvidia-operator-validator` pod on the node Ready
within 600 s, else `upgrade-failed`) -> `uncordon-required` -> `upgrade-done`. A driver pod that is in sync, not
Ready and restarted more than 10 times sends its node to `upgrade-failed`, which is left only when the pod becomes
Ready. A node cordoned before its upgrade gets `nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable=true`
and stays cordoned at the end. With `autoUpgrade` false the controller removes every state label and does nothing.

It reconciles, as the real one, when the ClusterPolicy's or the driver DaemonSet's generation or a node's state
or skip label changes, and every 120 s (`plannedRequeueInterval`) — so a driver pod turning Ready is noticed at
the next requeue. Pod deletion and drain run as per-node tasks between reconciles. Every timer is multiplied by
`OperatorConfig.time_scale`. Not modelled: requestor (maintenance-operator) mode, the restart-only fast path,
the safe-driver-load handshake, NVIDIADriver CRs.
"""
from __future__ import annotations

import math
import time

from ..api.eviction import pod_is_ready
from ..api.selectors import parse_label_selector
from .objects import meta, pod_is_terminating
from .operator import NAMESPACE, VALIDATOR_APP, auto_upgrade, cluster_policy, driver_daemonset, driver_pods, \
    newest_revision_hash, pod_in_sync
from .upgrade_eviction import EvictionTask, drain_selects, is_gpu_pod, refusals

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_STATE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
WAIT_START_ANNOTATION = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
VALIDATION_START_ANNOTATION = "nvidia.com/gpu-driver-upgrade-validation-start-time"
REQUESTED_ANNOTATION = "nvidia.com/gpu-driver-upgrade-requested"
SAFE_LOAD_ANNOTATION = "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load"

UNKNOWN = ""
UPGRADE_REQUIRED = "upgrade-required"
CORDON_REQUIRED = "cordon-required"
WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
POD_DELETION_REQUIRED = "pod-deletion-required"
DRAIN_REQUIRED = "drain-required"
POD_RESTART_REQUIRED = "pod-restart-required"
VALIDATION_REQUIRED = "validation-required"
UNCORDON_REQUIRED = "uncordon-required"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"

EVENT_REASON = "GPUDriverUpgrade"
REQUEUE_S = 120.0
VALIDATION_TIMEOUT_S = 600.0
MAX_DRIVER_RESTARTS = 10


def scaled_max_unavailable(value, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true); nil -> total (no limit)."""
    if value is None:
        return total
    if isinstance(value, str) and value.endswith("%"):
        return int(math.ceil(int(value[:-1]) * total / 100.0))
    return int(value)


def upgrades_available(policy: dict, states: dict, unavailable: int, total: int) -> int:
    """`GetUpgradesAvailable` (common_manager.go) for the node states of one reconcile."""
    in_progress = total - sum(len(states.get(state, [])) for state in (UNKNOWN, UPGRADE_DONE, UPGRADE_REQUIRED))
    max_parallel = int(policy.get("maxParallelUpgrades", 1))
    max_unavailable = scaled_max_unavailable(policy.get("maxUnavailable", "25%"), total)
    available = len(states.get(UPGRADE_REQUIRED, [])) if max_parallel == 0 else max_parallel - in_progress
    available = min(available, max_unavailable)
    unavailable += len(states.get(CORDON_REQUIRED, []))
    if unavailable >= max_unavailable:
        return 0
    if max_unavailable < total and unavailable + available > max_unavailable:
        return max_unavailable - unavailable
    return available


def _node_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _cordoned(node: dict) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def driver_pod_failing(pod: dict) -> bool:
    """`isDriverPodFailing`: a container or init container not Ready with more than 10 restarts."""
    status = pod.get("status") or {}
    return any(not container.get("ready") and int(container.get("restartCount") or 0) > MAX_DRIVER_RESTARTS
               for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []))


class DriverUpgradeController:
    """Runs on the controller thread (`ControllerManager.addons`)."""

    def __init__(self, manager, config, clock=time.time):
        self.manager = manager
        self.scale = config.time_scale
        self.clock = clock
        self._last_key = None
        self._last_reconcile = None
        self._tasks = {}              # node name -> (kind, EvictionTask)

    # --- trigger --------------------------------------------------------------------------------------------
    def sync(self, now: float) -> None:
        policy = cluster_policy(self.manager)
        if policy is None:
            return
        upgrade_policy = ((policy.get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}
        self._step_tasks(upgrade_policy, now)
        daemonset = driver_daemonset(self.manager)
        key = (meta(policy).get("generation"), meta(daemonset or {}).get("generation"),
               tuple(sorted((meta(node)["name"], (meta(node).get("labels") or {}).get(STATE_LABEL),
                             (meta(node).get("labels") or {}).get(SKIP_LABEL))
                            for node in self.manager.informer.items("nodes"))))
        due = self._last_reconcile is None or now - self._last_reconcile >= REQUEUE_S * self.scale
        if key == self._last_key and not due:
            return
        self._last_key = key
        self._last_reconcile = now
        self.reconcile(policy, upgrade_policy, daemonset, now)

    # --- one reconcile (ApplyState) ---------------------------------------------------------------------------
    def reconcile(self, policy: dict, upgrade_policy: dict, daemonset, now: float) -> None:
        nodes = {meta(node)["name"]: node for node in self.manager.informer.items("nodes")}
        if not auto_upgrade(policy):
            for node in nodes.values():
                if STATE_LABEL in (meta(node).get("labels") or {}):
                    self.manager.patch("nodes", node, {"metadata": {"labels": {STATE_LABEL: None}}})
            return
        newest = newest_revision_hash(self.manager)
        pods = driver_pods(self.manager)
        desired = int(((daemonset or {}).get("status") or {}).get("desiredNumberScheduled", -1))
        if daemonset is None or newest is None or desired != len(pods):
            return      # BuildState: "driver DaemonSet should not have Unscheduled pods"
        states = {}
        for pod in pods:
            node = nodes.get(pod["spec"]["nodeName"])
            if node is not None:
                states.setdefault((meta(node).get("labels") or {}).get(STATE_LABEL, UNKNOWN), []).append((node, pod))
        total = sum(len(entries) for entries in states.values())
        unavailable = sum(1 for entries in states.values() for node, _pod in entries
                          if _cordoned(node) or not _node_ready(node))
        for node, pod in states.get(UNKNOWN, []) + states.get(UPGRADE_DONE, []):
            self._done_or_unknown(node, pod, newest)
        self._upgrade_required(states.get(UPGRADE_REQUIRED, []),
                               upgrades_available(upgrade_policy, states, unavailable, total))
        for node, _pod in states.get(CORDON_REQUIRED, []):
            self._cordon(node, True)
            self._set_state(node, WAIT_FOR_JOBS_REQUIRED)
        for node, _pod in states.get(WAIT_FOR_JOBS_REQUIRED, []):
            self._wait_for_jobs(node, upgrade_policy, now)
        for node, _pod in states.get(POD_DELETION_REQUIRED, []):
            self._start_task(node, "pod-deletion", upgrade_policy, now)
        for node, _pod in states.get(DRAIN_REQUIRED, []):
            if not (upgrade_policy.get("drain") or {}).get("enable"):
                self._set_state(node, POD_RESTART_REQUIRED)
            else:
                self._start_task(node, "drain", upgrade_policy, now)
        for node, pod in states.get(POD_RESTART_REQUIRED, []):
            self._pod_restart(node, pod, newest)
        for node, pod in states.get(UPGRADE_FAILED, []):
            if pod_in_sync(pod, newest) and pod_is_ready(pod):
                self._finish(node)
        for node, _pod in states.get(VALIDATION_REQUIRED, []):
            self._validate(node, now)
        for node, _pod in states.get(UNCORDON_REQUIRED, []):
            self._cordon(node, False)
            self._set_state(node, UPGRADE_DONE)

    # --- per state --------------------------------------------------------------------------------------------
    def _done_or_unknown(self, node: dict, pod: dict, newest: str) -> None:
        annotations = meta(node).get("annotations") or {}
        out_of_date = (meta(pod).get("labels") or {}).get("controller-revision-hash") != newest
        if out_of_date or SAFE_LOAD_ANNOTATION in annotations or annotations.get(REQUESTED_ANNOTATION) == "true":
            if _cordoned(node):
                node = self._annotate(node, {INITIAL_STATE_ANNOTATION: "true"})
            self._set_state(node, UPGRADE_REQUIRED)
        elif (meta(node).get("labels") or {}).get(STATE_LABEL, UNKNOWN) == UNKNOWN:
            self._set_state(node, UPGRADE_DONE)

    def _upgrade_required(self, entries: list, available: int) -> None:
        for node, _pod in entries:
            if (meta(node).get("annotations") or {}).get(REQUESTED_ANNOTATION) == "true":
                node = self._annotate(node, {REQUESTED_ANNOTATION: None})
            if (meta(node).get("labels") or {}).get(SKIP_LABEL) == "true":
                continue
            if available <= 0:
                if _cordoned(node):     # already unavailable: it costs no slot
                    self._set_state(node, CORDON_REQUIRED)
                continue
            self._set_state(node, CORDON_REQUIRED)
            available -= 1

    def _wait_for_jobs(self, node: dict, upgrade_policy: dict, now: float) -> None:
        wait = upgrade_policy.get("waitForCompletion") or {}
        selector = wait.get("podSelector") or ""
        if selector:
            matcher = parse_label_selector(selector)
            running = [pod for pod in self._pods_on(node) if (pod.get("status") or {}).get("phase") in
                       ("Running", "Pending") and matcher.matches(meta(pod).get("labels") or {})]
            timeout_s = int(wait.get("timeoutSeconds") or 0) * self.scale
            if running:
                if not timeout_s:
                    return
                started = (meta(node).get("annotations") or {}).get(WAIT_START_ANNOTATION)
                if started is None:
                    self._annotate(node, {WAIT_START_ANNOTATION: str(int(now))})
                    return
                if now - float(started) < timeout_s:
                    return
        if WAIT_START_ANNOTATION in (meta(node).get("annotations") or {}):
            node = self._annotate(node, {WAIT_START_ANNOTATION: None})
        self._set_state(node, POD_DELETION_REQUIRED)

    def _start_task(self, node: dict, kind: str, upgrade_policy: dict, now: float) -> None:
        name = meta(node)["name"]
        if name in self._tasks:
            return
        options = upgrade_policy.get("podDeletion" if kind == "pod-deletion" else "drain") or {}
        pods = [pod for pod in self._pods_on(node) if not pod_is_terminating(pod)
                and (meta(pod).get("ownerReferences") or [{}])[0].get("kind") != "DaemonSet"]
        pods = [pod for pod in pods if is_gpu_pod(pod)] if kind == "pod-deletion" else \
            [pod for pod in pods if drain_selects(pod, options.get("podSelector"))]
        task = EvictionTask(self.manager, name, pods, int(options.get("timeoutSeconds", 300)) * self.scale, now)
        errors = refusals(pods, bool(options.get("force")), bool(options.get("deleteEmptyDir")))
        if errors:
            task.error = "; ".join(errors)
            self._task_done(node, kind, task, False, upgrade_policy)
            return
        if kind == "drain":
            self._cordon(node, True)
        self._tasks[name] = (kind, task)
        self._step_tasks(upgrade_policy, now)

    def _step_tasks(self, upgrade_policy: dict, now: float) -> None:
        for name, (kind, task) in list(self._tasks.items()):
            result = task.step(now)
            if result is None:
                continue
            del self._tasks[name]
            node = self.manager.informer.get("nodes", name)
            if node is not None:
                self._task_done(node, kind, task, result, upgrade_policy)

    def _task_done(self, node: dict, kind: str, task: EvictionTask, ok: bool, upgrade_policy: dict) -> None:
        if ok:
            self._set_state(node, POD_RESTART_REQUIRED)
            return
        what = "delete GPU pods on" if kind == "pod-deletion" else "drain"
        self.manager.record_event(node, EVENT_REASON, "Failed to %s the node, %s" % (what, task.error), "Warning",
                                  "gpu-operator")
        enable_drain = bool((upgrade_policy.get("drain") or {}).get("enable"))
        self._set_state(node, DRAIN_REQUIRED if kind == "pod-deletion" and enable_drain else UPGRADE_FAILED)

    def _pod_restart(self, node: dict, pod: dict, newest: str) -> None:
        if not pod_in_sync(pod, newest):
            if not pod_is_terminating(pod):
                self.manager.delete("pods", pod)
            return
        if pod_is_ready(pod) and (pod.get("status") or {}).get("phase") == "Running":
            if SAFE_LOAD_ANNOTATION in (meta(node).get("annotations") or {}):
                node = self._annotate(node, {SAFE_LOAD_ANNOTATION: None})
            self._set_state(node, VALIDATION_REQUIRED)
        elif driver_pod_failing(pod):
            self._set_state(node, UPGRADE_FAILED)

    def _validate(self, node: dict, now: float) -> None:
        validators = [pod for pod in self._pods_on(node)
                      if meta(pod).get("namespace") == NAMESPACE and (meta(pod).get("labels") or {}).get("app")
                      == VALIDATOR_APP and not pod_is_terminating(pod)]
        if not validators:
            return          # no validator pod: "not done", no timer (the node waits)
        if all((pod.get("status") or {}).get("phase") == "Running" and pod_is_ready(pod) for pod in validators):
            if VALIDATION_START_ANNOTATION in (meta(node).get("annotations") or {}):
                node = self._annotate(node, {VALIDATION_START_ANNOTATION: None})
            self._finish(node)
            return
        started = (meta(node).get("annotations") or {}).get(VALIDATION_START_ANNOTATION)
        if started is None:
            self._annotate(node, {VALIDATION_START_ANNOTATION: str(int(now))})
        elif now - float(started) > VALIDATION_TIMEOUT_S * self.scale:
            node = self._annotate(node, {VALIDATION_START_ANNOTATION: None})
            self._set_state(node, UPGRADE_FAILED)

    def _finish(self, node: dict) -> None:
        """uncordon-required, or upgrade-done for a node that was cordoned before its upgrade (it stays so)."""
        if (meta(node).get("annotations") or {}).get(INITIAL_STATE_ANNOTATION) == "true":
            node = self._annotate(node, {INITIAL_STATE_ANNOTATION: None})
            self._set_state(node, UPGRADE_DONE)
        else:
            self._set_state(node, UNCORDON_REQUIRED)

    # --- writes -----------------------------------------------------------------------------------------------
    def _pods_on(self, node: dict) -> list:
        name = meta(node)["name"]
        return [pod for pod in self.manager.informer.items("pods") if (pod.get("spec") or {}).get("nodeName") == name]

    def _set_state(self, node: dict, state: str) -> None:
        updated = self.manager.patch("nodes", node, {"metadata": {"labels": {STATE_LABEL: state}}})
        if updated is not None:
            self.manager.record_event(updated, EVENT_REASON, "Successfully updated node state label to %s" % state,
                                      component="gpu-operator")

    def _annotate(self, node: dict, annotations: dict) -> dict:
        return self.manager.patch("nodes", node, {"metadata": {"annotations": annotations}}) or node

    def _cordon(self, node: dict, unschedulable: bool) -> None:
        if _cordoned(node) != unschedulable:
            self.manager.patch("nodes", node, {"spec": {"unschedulable": unschedulable or None}})



