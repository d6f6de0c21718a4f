"""kube-controller-manager + kube-scheduler of the twin, on ONE thread.

`ControllerManager` keeps an informer cache fed by `Store.subscribe` (so a pass reads no store lists) and
runs one pass per change or per tick (0.5 s): node lifecycle (cordon and NotReady taints),
kubelets, deployments -> replicasets -> pods, daemonsets, statefulsets (`statefulsets.py`), jobs
(`jobs.py`), scheduling and NoExecute taint eviction.
The default namespaces, PDB status and cascading deletion belong to the store (lab/gpulab/kube/README.md,
"agreed split"); the pure rules are in `workloads.py`, the cache in `informer.py`. Tests drive it synchronously with `run_once()`.
"""

from __future__ import annotations

import copy
import random
import threading
import time
import traceback

from ..api.errors import ApiError
from ..api.eviction import controller_owner, pod_is_ready, pod_is_terminal
from ..api.patch import MERGE_PATCH
from ..api.timefmt import rfc3339
from . import scheduler
from .informer import Informer
from .jobs import JobController
from .objects import meta, owner_reference, pod_counts_for_controller, pod_is_terminating, template_hash
from .statefulsets import StatefulSetController
from .workloads import (DAEMONSET_TOLERATIONS, DEFAULT_POD_TOLERATIONS, daemon_pod_node_name, daemonset_may_continue_on,
                        daemonset_should_run_on, deployment_condition, deployment_status, needs_scheduling,
                        noexecute_deadline_passed, pods_by_owner_uid, pods_to_scale_down, replica_failure_conditions,
                        rollout_targets,
                        status_differs, wanted_node_taints)


REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"


class ControllerManager:
    """Runs every controller, the scheduler and the kubelets' sync on one thread."""

    def __init__(self, store, kubelets=(), tick_s: float = 0.5, clock=time.time, api_only=None,
                 job_backoff_s: float = 10.0):
        self.store = store
        self.informer = Informer(store)
        self.kubelets = list(kubelets)
        self.tick_s = tick_s
        self.clock = clock
        self.api_only = api_only            # apionly.ApiOnlyFleet or None
        self._stop = threading.Event()
        self._thread = None
        self._pass_lock = threading.Lock()
        self._scheduling_messages = {}
        self._rollout_progress = {}         # deployment uid -> (replica counts, when they last changed)
        self.pass_errors = []
        self.statefulsets = StatefulSetController(self)
        self.jobs = JobController(self, backoff_s=job_backoff_s)
        self.addons = []                    # more controllers (GPU Operator mode): each .sync(now), after DaemonSets

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, background: bool = True) -> None:
        self.informer.start()
        if background:
            self.start_thread()

    def start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpulab-kube-controllers", daemon=True)
        self._thread.start()

    def pass_lock(self):
        """Held by every pass; hold it to change kubelet state from another thread."""
        return self._pass_lock

    def wake(self) -> None:
        self.informer.changed.set()

    def stop(self) -> None:
        self._stop.set()
        self.informer.changed.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.informer.changed.wait(self.tick_s)
            self.informer.changed.clear()
            if self._stop.is_set():
                break
            self.run_once()
            # Coalesce bursts of changes (kubectl apply of many objects) into one pass per short interval.
            self._stop.wait(min(self.tick_s, 0.05))

    def run_once(self) -> None:
        """One pass of every control loop; a step that fails is recorded and the others still run."""
        with self._pass_lock:
            now = self.clock()
            for kubelet in self.kubelets:
                self._step(kubelet.sync_node, now)
            if self.api_only is not None:
                self._step(self.api_only.sync, now)
            self._step(self.sync_node_taints, now)
            self._step(self.sync_deployments)
            self._step(self.sync_replicasets)
            self._step(self.sync_daemonsets)
            for addon in self.addons:
                self._step(addon.sync, now)
            self._step(self.statefulsets.sync)
            self._step(self.jobs.sync, now)
            self._step(self.schedule_pending, now)
            pods_by_node = scheduler.pods_by_node_name(self.informer.items("pods"))
            for kubelet in self.kubelets:
                self._step(kubelet.sync_pods, pods_by_node.get(kubelet.name, []), now)
            if self.api_only is not None:
                self._step(self.api_only.sync_pods, pods_by_node, now)
            self._step(self.evict_for_noexecute_taints, now)

    def _step(self, function, *args) -> None:
        try:
            function(*args)
        except Exception:  # one bad object or node view must not stop the whole control plane
            self.pass_errors.append("%s: %s" % (getattr(function, "__qualname__", function), traceback.format_exc()))
            del self.pass_errors[:-20]

    def settle(self, passes: int = 6) -> None:
        """Run passes until controllers converge (tests without the background thread)."""
        for _ in range(passes):
            self.run_once()

    # --- store helpers (every write refreshes the cache at once) --------------------------------
    def create(self, resource: str, obj: dict, namespace=None):
        """The created object, or None when one of that name already exists (left as it is)."""
        try:
            created = self.store.create(resource, obj, namespace=namespace)
        except ApiError as error:
            if error.code == 409:
                return None
            raise
        self.informer.observe(resource, created)
        return created

    def patch(self, resource: str, obj: dict, patch: dict, subresource=None):
        try:
            patched = self.store.patch(resource, meta(obj)["name"], patch, MERGE_PATCH,
                                       namespace=meta(obj).get("namespace"), subresource=subresource)
        except ApiError as error:
            if error.code == 404:
                return None
            raise
        self.informer.observe(resource, patched)
        return patched

    def delete(self, resource: str, obj: dict, grace_period_seconds=None):
        try:
            result = self.store.delete(resource, meta(obj)["name"], namespace=meta(obj).get("namespace"),
                                       grace_period_seconds=grace_period_seconds)
        except ApiError as error:
            if error.code == 404:
                return None
            raise
        # A graceful deletion leaves the object terminating; a final one (grace 0 of a terminating pod also
        # answers with the object) removes it: ask the store which, so the cache keeps no ghost.
        try:
            self.informer.observe(resource, self.store.get(resource, meta(obj)["name"],
                                                           namespace=meta(obj).get("namespace")))
        except ApiError as error:
            if error.code != 404:
                raise
            self.informer.forget(resource, obj)
        return result

    def record_event(self, involved: dict, reason: str, message: str, event_type: str = "Normal",
                     component: str = "default-scheduler") -> None:
        namespace = meta(involved).get("namespace") or "default"
        now = rfc3339(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "%s.%x" % (meta(involved)["name"], random.getrandbits(56)), "namespace": namespace},
            "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                               "name": meta(involved)["name"], "namespace": meta(involved).get("namespace"),
                               "uid": meta(involved).get("uid")},
            "reason": reason, "message": message, "type": event_type, "count": 1,
            "source": {"component": component}, "firstTimestamp": now, "lastTimestamp": now,
            "reportingComponent": component, "reportingInstance": "",
        }
        try:
            self.store.create("events", event, namespace=namespace)
        except ApiError:
            pass

    # --- node lifecycle -------------------------------------------------------------------------
    def sync_node_taints(self, now: float) -> None:
        for node in self.informer.items("nodes"):
            wanted = wanted_node_taints(node, now)
            if wanted != ((node.get("spec") or {}).get("taints") or []):
                self.patch("nodes", node, {"spec": {"taints": wanted or None}})

    def evict_for_noexecute_taints(self, now: float) -> None:
        """The taint manager: delete pods that do not tolerate a node's NoExecute taint (in time)."""
        nodes = {meta(node)["name"]: node for node in self.informer.items("nodes")}
        for pod in self.informer.items("pods"):
            node = nodes.get((pod.get("spec") or {}).get("nodeName"))
            if node is None or pod_is_terminating(pod) or pod_is_terminal(pod):
                continue
            if noexecute_deadline_passed(pod, node, now):
                self.delete("pods", pod)
                self.record_event(pod, "TaintManagerEviction", "Marking for deletion Pod %s/%s" % (
                    meta(pod).get("namespace"), meta(pod)["name"]), component="taint-eviction-controller")

    # --- deployments ----------------------------------------------------------------------------
    def sync_deployments(self) -> None:
        replicasets = self.informer.items("replicasets")
        for deployment in self.informer.items("deployments"):
            if meta(deployment).get("deletionTimestamp"):
                continue
            owned = [rs for rs in replicasets if (controller_owner(rs) or {}).get("uid") == meta(deployment).get("uid")]
            self._sync_deployment(deployment, owned)

    def _sync_deployment(self, deployment: dict, owned: list) -> None:
        spec = deployment.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        pod_hash = template_hash(spec.get("template") or {})
        new_rs = next((rs for rs in owned if meta(rs).get("labels", {}).get("pod-template-hash") == pod_hash), None)
        old_sets = [rs for rs in owned if rs is not new_rs]
        paused = bool(spec.get("paused"))
        if new_rs is None and paused and old_sets:
            # a paused Deployment rolls out no changed template: its status reads the ReplicaSets it has
            new_rs = max(old_sets, key=lambda rs: int(meta(rs).get("annotations", {}).get(
                "deployment.kubernetes.io/revision", "0") or 0))
            old_sets = [rs for rs in old_sets if rs is not new_rs]
        elif new_rs is None:
            new_rs = self._create_replicaset(deployment, pod_hash, old_sets)
            if new_rs is None:
                return
        else:
            new_rs = self._renumber_replicaset(new_rs, old_sets) or new_rs
        asked = {meta(rs).get("uid"): int((rs.get("spec") or {}).get("replicas", 0)) for rs in [new_rs] + old_sets}
        for rs, replicas in [] if paused else rollout_targets(spec, desired, new_rs, old_sets):
            asked[meta(rs).get("uid")] = replicas
            if int((rs.get("spec") or {}).get("replicas", 0)) != replicas:
                self.patch("replicasets", rs, {"spec": {"replicas": replicas}})
        # the status below reads the ReplicaSets as just scaled (copies: the informer's objects stay as they are)
        def as_scaled(rs):
            return dict(rs, spec=dict(rs.get("spec") or {}, replicas=asked.get(meta(rs).get("uid"), 0)))
        new_rs, old_sets = as_scaled(new_rs), [as_scaled(rs) for rs in old_sets]
        revision = meta(new_rs).get("annotations", {}).get("deployment.kubernetes.io/revision")
        if revision and meta(deployment).get("annotations", {}).get("deployment.kubernetes.io/revision") != revision:
            self.patch("deployments", deployment, {"metadata": {"annotations": {
                "deployment.kubernetes.io/revision": revision}}})
        now = self.clock()
        status = deployment_status(deployment, new_rs, old_sets, desired, rfc3339(now))
        if self._progress_deadline_exceeded(deployment, new_rs, status, now):
            status["conditions"][1] = deployment_condition(
                {c["type"]: c for c in (deployment.get("status") or {}).get("conditions") or []}, "Progressing",
                False, "ProgressDeadlineExceeded", 'ReplicaSet "%s" has timed out progressing.' % meta(new_rs)["name"],
                rfc3339(now))
        if status_differs(deployment.get("status") or {}, status):
            self.patch("deployments", deployment, {"status": status}, subresource="status")

    def _progress_deadline_exceeded(self, deployment: dict, new_rs: dict, status: dict, now: float) -> bool:
        """True when an unfinished rollout made no progress (replica counts unchanged) for
        spec.progressDeadlineSeconds, which makes `kubectl rollout status` fail as upstream."""
        progressing = status["conditions"][1]
        uid = meta(deployment).get("uid")
        if progressing["reason"] in ("NewReplicaSetAvailable", "DeploymentPaused"):   # no deadline while paused
            self._rollout_progress.pop(uid, None)
            return False
        counts = (meta(new_rs).get("name"), status["replicas"], status["updatedReplicas"], status["readyReplicas"],
                  status["availableReplicas"])
        last = self._rollout_progress.get(uid)
        if last is None or last[0] != counts:
            self._rollout_progress[uid] = (counts, now)
            return False
        deadline_s = int((deployment.get("spec") or {}).get("progressDeadlineSeconds", 600))
        return now - last[1] > deadline_s

    def _renumber_replicaset(self, new_rs: dict, old_sets: list):
        """A template seen before (a rollback, `kubectl rollout undo`) makes its old ReplicaSet the new one again:
        its revision becomes the highest plus one and the one it had goes to `revision-history`, as the
        Deployment controller's SetNewReplicaSetAnnotations does."""
        annotations = meta(new_rs).get("annotations") or {}
        revision = int(annotations.get(REVISION_ANNOTATION) or 0)
        newest = max([int(meta(rs).get("annotations", {}).get(REVISION_ANNOTATION, "0") or 0) for rs in old_sets]
                     + [0])
        if revision > newest:
            return None
        history = [entry for entry in (annotations.get(REVISION_HISTORY_ANNOTATION) or "").split(",") if entry]
        if revision:
            history.append(str(revision))
        return self.patch("replicasets", new_rs, {"metadata": {"annotations": {
            REVISION_ANNOTATION: str(newest + 1), REVISION_HISTORY_ANNOTATION: ",".join(history)}}})

    def _create_replicaset(self, deployment: dict, pod_hash: str, old_sets: list):
        spec = deployment["spec"]
        template = copy.deepcopy(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = pod_hash
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        revisions = [int(meta(rs).get("annotations", {}).get("deployment.kubernetes.io/revision", "0") or 0)
                     for rs in old_sets]
        replicaset = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "%s-%s" % (meta(deployment)["name"], pod_hash),
                         "namespace": meta(deployment).get("namespace"),
                         "labels": dict(template["metadata"]["labels"]),
                         "annotations": {"deployment.kubernetes.io/revision": str(max(revisions + [0]) + 1),
                                         "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1))},
                         "ownerReferences": [owner_reference(deployment)]},
            "spec": {"replicas": 0, "selector": selector, "template": template},
        }
        return self.create("replicasets", replicaset, namespace=meta(deployment).get("namespace"))

    # --- replicasets ----------------------------------------------------------------------------
    def sync_replicasets(self) -> None:
        pods_by_owner = pods_by_owner_uid(self.informer.items("pods"))
        for replicaset in self.informer.items("replicasets"):
            if meta(replicaset).get("deletionTimestamp"):
                continue
            owned = pods_by_owner.get(meta(replicaset).get("uid"), [])
            active = [pod for pod in owned if pod_counts_for_controller(pod)]
            desired = int((replicaset.get("spec") or {}).get("replicas", 1))
            create_error = None
            for _ in range(desired - len(active)):
                try:
                    self._create_pod_from_template(replicaset, replicaset["spec"].get("template") or {})
                except ApiError as error:   # e.g. refused by admission: the ReplicaFailure condition says why
                    create_error = error.message
                    break
            for pod in pods_to_scale_down(active, len(active) - desired):
                self.delete("pods", pod)
            self._write_replicaset_status(replicaset, create_error)

    def _write_replicaset_status(self, replicaset: dict, create_error=None) -> None:
        pods = [pod for pod in pods_by_owner_uid(self.informer.items("pods")).get(meta(replicaset).get("uid"), [])
                if pod_counts_for_controller(pod)]
        ready = sum(1 for pod in pods if pod_is_ready(pod))
        previous = (replicaset.get("status") or {}).get("conditions") or []
        conditions = replica_failure_conditions(previous, create_error, rfc3339(self.clock()))
        if create_error and conditions != previous:
            self.record_event(replicaset, "FailedCreate", "Error creating: " + create_error, "Warning",
                              "replicaset-controller")
        status = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": meta(replicaset).get("generation", 1),
                  "conditions": conditions or None}
        if status_differs(replicaset.get("status") or {}, status):
            self.patch("replicasets", replicaset, {"status": status}, subresource="status")

    def _create_pod_from_template(self, owner: dict, template: dict, node_name=None, extra_labels=None,
                                  tolerations=None, name=None):
        namespace = meta(owner).get("namespace")
        pod_spec = copy.deepcopy(template.get("spec") or {})   # the store applies the pod spec defaults
        merged_tolerations = list(pod_spec.get("tolerations") or [])
        for toleration in tolerations if tolerations is not None else DEFAULT_POD_TOLERATIONS:
            if not any(t.get("key") == toleration["key"] and t.get("effect") == toleration["effect"]
                       for t in merged_tolerations):
                merged_tolerations.append(dict(toleration))
        pod_spec["tolerations"] = merged_tolerations
        if node_name:
            pod_spec["affinity"] = dict(pod_spec.get("affinity") or {}, nodeAffinity={
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}})
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(extra_labels or {})
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace,
                         "labels": labels,
                         "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                         "ownerReferences": [owner_reference(owner)]},
            "spec": pod_spec,   # the store sets status.phase Pending and the qosClass of these resources
        }
        if name:
            pod["metadata"]["name"] = name
        else:   # the API server names it (after admission, whose refusals name the generateName, as upstream)
            pod["metadata"]["generateName"] = "%s-" % meta(owner)["name"]
        return self.create("pods", pod, namespace=namespace)

    def create_pod(self, owner: dict, template: dict, name=None, extra_labels=None):
        """A pod of `owner` from `template` (generated name unless `name`); None when one of that name exists.
        For the controllers in modules of their own (statefulsets, jobs); ApiError when the API refuses it."""
        return self._create_pod_from_template(owner, template, extra_labels=extra_labels, name=name)

    # --- daemonsets -----------------------------------------------------------------------------
    def sync_daemonsets(self) -> None:
        nodes = self.informer.items("nodes")
        pods_by_owner = pods_by_owner_uid(self.informer.items("pods"))
        for daemonset in self.informer.items("daemonsets"):
            if meta(daemonset).get("deletionTimestamp"):
                continue
            self._sync_daemonset(daemonset, nodes, pods_by_owner.get(meta(daemonset).get("uid"), []))

    def _sync_daemonset(self, daemonset: dict, nodes: list, owned: list) -> None:
        template = (daemonset.get("spec") or {}).get("template") or {}
        revision = template_hash(template)
        probe = {"spec": dict(template.get("spec") or {})}
        probe["spec"]["tolerations"] = list(probe["spec"].get("tolerations") or []) + DAEMONSET_TOLERATIONS
        # Upstream: a NoSchedule taint (e.g. unreachable) keeps new daemon pods off a node, but only
        # NoExecute taints and selector changes stop the ones already there.
        should_run = {meta(node)["name"] for node in nodes if daemonset_should_run_on(probe, node)}
        may_continue = {meta(node)["name"] for node in nodes if daemonset_may_continue_on(probe, node)}
        pods_on_node = {}
        for pod in owned:
            if pod_counts_for_controller(pod) or (pod_is_terminal(pod) and not pod_is_terminating(pod)):
                pods_on_node.setdefault(daemon_pod_node_name(pod), []).append(pod)
        for node_name, pods in pods_on_node.items():
            if node_name not in may_continue:
                for pod in pods:
                    self.delete("pods", pod)
        eligible = should_run | {name for name in may_continue if pods_on_node.get(name)}
        for node_name in sorted(eligible):
            pods = pods_on_node.get(node_name, [])
            failed = [pod for pod in pods if pod_is_terminal(pod)]
            for pod in failed:
                self.delete("pods", pod)
            running = [pod for pod in pods if pod not in failed]
            for extra in running[1:]:
                self.delete("pods", extra)
            if not running and node_name in should_run:
                self._create_pod_from_template(daemonset, template, node_name=node_name,
                                               extra_labels={"controller-revision-hash": revision},
                                               tolerations=DAEMONSET_TOLERATIONS)
        self._ensure_daemonset_revision(daemonset, template, revision)
        self._roll_daemonset(daemonset, revision, pods_on_node, eligible)
        self._write_daemonset_status(daemonset, revision, eligible)

    def _ensure_daemonset_revision(self, daemonset: dict, template: dict, revision: str) -> None:
        """One ControllerRevision `NAME-HASH` per template, as the DaemonSet controller keeps them: the current
        template's has the highest `revision` (a template seen before gets its old revision renumbered)."""
        uid = meta(daemonset).get("uid")
        owned = [rev for rev in self.informer.items("controllerrevisions", meta(daemonset).get("namespace"))
                 if (controller_owner(rev) or {}).get("uid") == uid]
        name = "%s-%s" % (meta(daemonset)["name"], revision)
        newest = max([int(rev.get("revision") or 0) for rev in owned] + [0])
        current = next((rev for rev in owned if meta(rev).get("name") == name), None)
        if current is None:
            selector_labels = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            self.create("controllerrevisions", {
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": name, "namespace": meta(daemonset).get("namespace"),
                             "labels": dict(selector_labels, **{"controller-revision-hash": revision}),
                             "annotations": dict(meta(daemonset).get("annotations") or {}),
                             "ownerReferences": [owner_reference(daemonset)]},
                "data": {"spec": {"template": dict(copy.deepcopy(template), **{"$patch": "replace"})}},
                "revision": newest + 1}, namespace=meta(daemonset).get("namespace"))
        elif int(current.get("revision") or 0) < newest:
            self.patch("controllerrevisions", current, {"revision": newest + 1})

    def _roll_daemonset(self, daemonset: dict, revision: str, pods_on_node: dict, eligible: set) -> None:
        strategy = (daemonset.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type") == "OnDelete":
            return
        max_unavailable = int((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1) or 1)
        current = [pods[0] for name, pods in pods_on_node.items() if name in eligible and pods]
        unavailable = len(eligible) - sum(1 for pod in current if pod_is_ready(pod) and not pod_is_terminating(pod))
        outdated = [pod for pod in current if meta(pod).get("labels", {}).get("controller-revision-hash") != revision
                    and not pod_is_terminating(pod)]
        # Unready outdated pods go first: replacing them costs no availability.
        outdated.sort(key=pod_is_ready)
        budget = max_unavailable - unavailable
        for pod in outdated:
            if pod_is_ready(pod):
                if budget <= 0:
                    break
                budget -= 1
            self.delete("pods", pod)

    def _write_daemonset_status(self, daemonset: dict, revision: str, eligible: set) -> None:
        pods = [pod for pod in pods_by_owner_uid(self.informer.items("pods")).get(meta(daemonset).get("uid"), [])
                if pod_counts_for_controller(pod)]
        scheduled = {daemon_pod_node_name(pod) for pod in pods if (pod.get("spec") or {}).get("nodeName")}
        ready = [pod for pod in pods if pod_is_ready(pod) and daemon_pod_node_name(pod) in eligible]
        updated = [pod for pod in pods if meta(pod).get("labels", {}).get("controller-revision-hash") == revision
                   and daemon_pod_node_name(pod) in eligible]
        status = {"desiredNumberScheduled": len(eligible), "currentNumberScheduled": len(scheduled & eligible),
                  "numberMisscheduled": len(scheduled - eligible), "numberReady": len(ready),
                  "numberAvailable": len(ready), "updatedNumberScheduled": len(updated),
                  "observedGeneration": meta(daemonset).get("generation", 1)}
        if len(eligible) > len(ready):
            status["numberUnavailable"] = len(eligible) - len(ready)
        if status_differs(daemonset.get("status") or {}, status):
            self.patch("daemonsets", daemonset, {"status": status}, subresource="status")

    # --- scheduler ------------------------------------------------------------------------------
    def schedule_pending(self, now: float) -> None:
        pending = [pod for pod in self.informer.items("pods") if needs_scheduling(pod)]
        if not pending:
            return
        placement = scheduler.Placement(self.informer.items("nodes"), self.informer.items("pods"))
        pending.sort(key=lambda pod: meta(pod).get("creationTimestamp") or "")
        for pod in pending:
            node_name, message = placement.pick(pod)
            if node_name:
                if self._bind(pod, node_name, now) is not None:
                    placement.assign(pod, node_name)
            else:
                self._mark_unschedulable(pod, message, now)

    def _bind(self, pod: dict, node_name: str, now: float):
        try:
            bound = self.store.bind(meta(pod).get("namespace"), meta(pod)["name"], node_name)
        except ApiError as error:
            if error.code in (404, 409):
                return None
            raise
        self.informer.observe("pods", bound)
        condition = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                     "lastTransitionTime": rfc3339(now)}
        bound = self.patch("pods", bound, {"status": {"conditions": [condition]}}, subresource="status") or bound
        self._scheduling_messages.pop(meta(pod).get("uid"), None)
        self.record_event(bound, "Scheduled", "Successfully assigned %s/%s to %s" % (
            meta(pod).get("namespace"), meta(pod)["name"], node_name))
        return bound

    def _mark_unschedulable(self, pod: dict, message: str, now: float) -> None:
        uid = meta(pod).get("uid")
        if self._scheduling_messages.get(uid) == message:
            return
        self._scheduling_messages[uid] = message
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}
        self.patch("pods", pod, {"status": {"conditions": [condition]}}, subresource="status")
        self.record_event(pod, "FailedScheduling", message, event_type="Warning")
