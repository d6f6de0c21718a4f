"""The StatefulSet controller (apps/v1), as kube-controller-manager runs it.

Pods `NAME-0..N-1`, each labelled with its revision (`controller-revision-hash: NAME-HASH`), its name and
ordinal. `OrderedReady`: a pod is created only once every lower ordinal is Running and Ready, and scale-down
removes the highest ordinal first, one at a time, while the others are Ready; `Parallel` creates and deletes
them all at once. A pod that is gone (deleted, evicted) comes back under the same name with a new UID; a
Failed pod is deleted and recreated. RollingUpdate replaces pods from the highest ordinal down to
`partition`, one at a time, each once the others are Ready; OnDelete only labels new pods. One
ControllerRevision per template (`NAME-HASH`, `revision` counting up), and the status fields the upstream
controller keeps (so `kubectl rollout status sts/NAME` works).
"""
from __future__ import annotations

import copy
import re

from ..api.errors import ApiError
from ..api.eviction import controller_owner, pod_is_ready
from .objects import meta, owner_reference, pod_is_terminating, template_hash
from .workloads import pods_by_owner_uid, status_differs

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def pod_ordinal(statefulset_name: str, pod: dict):
    match = re.fullmatch(re.escape(statefulset_name) + r"-(\d+)", meta(pod).get("name") or "")
    return int(match.group(1)) if match else None


def _running_and_ready(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and pod_is_ready(pod) and not pod_is_terminating(pod)


class StatefulSetController:
    """Runs on the ControllerManager's thread; `manager` gives the informer and the store writes."""

    def __init__(self, manager):
        self.manager = manager

    def sync(self) -> None:
        pods_by_owner = pods_by_owner_uid(self.manager.informer.items("pods"))
        revisions_by_owner = pods_by_owner_uid(self.manager.informer.items("controllerrevisions"))
        for statefulset in self.manager.informer.items("statefulsets"):
            if meta(statefulset).get("deletionTimestamp"):
                continue
            uid = meta(statefulset).get("uid")
            self._sync(statefulset, pods_by_owner.get(uid, []), revisions_by_owner.get(uid, []))

    def _sync(self, statefulset: dict, owned: list, revisions: list) -> None:
        name = meta(statefulset)["name"]
        spec = statefulset.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        update_revision = self._ensure_revision(statefulset, revisions)
        status = statefulset.get("status") or {}
        current_revision = status.get("currentRevision") or update_revision
        pods = {}
        for pod in owned:
            ordinal = pod_ordinal(name, pod)
            if ordinal is not None and (controller_owner(pod) or {}).get("kind") == "StatefulSet":
                pods[ordinal] = pod
        # Create (or replace failed) pods below `replicas`, in order unless Parallel.
        for ordinal in range(replicas):
            pod = pods.get(ordinal)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Failed" \
                    and not pod_is_terminating(pod):
                self.manager.delete("pods", pod)
                pods[ordinal] = pod = None
            if pod is None:
                revision = current_revision if self._keeps_current(spec, ordinal) else update_revision
                pods[ordinal] = self._create_pod(statefulset, ordinal, revision, revisions)
                if not parallel:
                    break
            elif not parallel and not _running_and_ready(pod):
                break
        else:
            self._scale_down(pods, replicas, parallel)
            self._roll(statefulset, pods, replicas, update_revision)
        self._write_status(statefulset, pods, replicas, current_revision, update_revision)

    def _keeps_current(self, spec: dict, ordinal: int) -> bool:
        """A pod re-created below the RollingUpdate partition keeps the current revision (upstream)."""
        strategy = spec.get("updateStrategy") or {}
        partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0) or 0)
        return strategy.get("type", "RollingUpdate") == "RollingUpdate" and ordinal < partition

    def _scale_down(self, pods: dict, replicas: int, parallel: bool) -> None:
        extra = sorted((ordinal for ordinal in pods if ordinal >= replicas and pods[ordinal] is not None),
                       reverse=True)
        if not extra:
            return
        if parallel:
            for ordinal in extra:
                if not pod_is_terminating(pods[ordinal]):
                    self.manager.delete("pods", pods[ordinal])
            return
        if any(pod_is_terminating(pods[ordinal]) for ordinal in extra):
            return          # one at a time: wait for the one going
        if all(_running_and_ready(pod) for ordinal, pod in pods.items() if pod is not None and ordinal < replicas):
            self.manager.delete("pods", pods[extra[0]])

    def _roll(self, statefulset: dict, pods: dict, replicas: int, update_revision: str) -> None:
        strategy = (statefulset.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0) or 0)
        live = [pods.get(ordinal) for ordinal in range(replicas)]
        if any(pod is None or not _running_and_ready(pod) for pod in live):
            return          # wait until every pod is Ready (or being replaced)
        for ordinal in range(replicas - 1, partition - 1, -1):
            if meta(live[ordinal]).get("labels", {}).get(REVISION_LABEL) != update_revision:
                self.manager.delete("pods", live[ordinal])
                return

    def _ensure_revision(self, statefulset: dict, revisions: list) -> str:
        template = (statefulset.get("spec") or {}).get("template") or {}
        revision_name = "%s-%s" % (meta(statefulset)["name"], template_hash(template))
        if not any(meta(revision).get("name") == revision_name for revision in revisions):
            number = max([int(revision.get("revision") or 0) for revision in revisions] + [0]) + 1
            selector_labels = ((statefulset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            self.manager.create("controllerrevisions", {
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": revision_name, "namespace": meta(statefulset).get("namespace"),
                             "labels": dict(selector_labels, **{REVISION_LABEL: revision_name}),
                             "ownerReferences": [owner_reference(statefulset)]},
                "data": {"spec": {"template": copy.deepcopy(template), "$patch": "replace"}},
                "revision": number}, namespace=meta(statefulset).get("namespace"))
        return revision_name

    def _create_pod(self, statefulset: dict, ordinal: int, revision: str, revisions: list):
        name = "%s-%d" % (meta(statefulset)["name"], ordinal)
        template = copy.deepcopy((statefulset.get("spec") or {}).get("template") or {})
        stored = next((r for r in revisions if meta(r).get("name") == revision), None)
        if stored is not None and revision != self._revision_of_template(statefulset):
            template = copy.deepcopy(((stored.get("data") or {}).get("spec") or {}).get("template") or template)
        pod_spec = template.setdefault("spec", {})
        pod_spec.setdefault("hostname", name)
        if (statefulset.get("spec") or {}).get("serviceName"):
            pod_spec.setdefault("subdomain", statefulset["spec"]["serviceName"])
        try:
            return self.manager.create_pod(
                statefulset, template, name=name,
                extra_labels={REVISION_LABEL: revision, POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal)})
        except ApiError as error:   # refused (admission, quota): upstream's FailedCreate event, retried next pass
            self.manager.record_event(statefulset, "FailedCreate", "create Pod %s in StatefulSet %s failed error: %s"
                                      % (name, meta(statefulset)["name"], error.message), "Warning",
                                      "statefulset-controller")
            return None

    def _revision_of_template(self, statefulset: dict) -> str:
        template = (statefulset.get("spec") or {}).get("template") or {}
        return "%s-%s" % (meta(statefulset)["name"], template_hash(template))

    def _write_status(self, statefulset: dict, pods: dict, replicas: int, current_revision: str,
                      update_revision: str) -> None:
        live = [pod for pod in pods.values() if pod is not None and not pod_is_terminating(pod)
                and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        ready = sum(1 for pod in live if pod_is_ready(pod))

        def at(revision):
            return sum(1 for pod in live if meta(pod).get("labels", {}).get(REVISION_LABEL) == revision)

        updated = at(update_revision)
        if updated == replicas and len(live) == replicas and ready == replicas:
            current_revision = update_revision      # the rollout is complete
        status = {"observedGeneration": meta(statefulset).get("generation", 1), "replicas": len(live),
                  "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": at(current_revision),
                  "updatedReplicas": updated, "currentRevision": current_revision,
                  "updateRevision": update_revision, "collisionCount": 0}
        if status_differs(statefulset.get("status") or {}, status):
            self.manager.patch("statefulsets", statefulset, {"status": status}, subresource="status")
