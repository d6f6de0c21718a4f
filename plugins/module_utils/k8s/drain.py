# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Decisions of node_drain on Node/Pod/PodDisruptionBudget JSON (dicts as the API serves them).

- which pods a drain evicts, ignores or refuses: the filters of ``kubectl drain`` (k8s.io/kubectl/pkg/drain),
  in its order: DaemonSet, mirror, local storage (emptyDir), unreplicated;
- which PodDisruptionBudgets block which pods (dry run, timeout report);
- when an evicted pod is gone (deleted, or recreated under its name with a new UID);
- the cordon bookkeeping kept on the node in annotations, so that uncordon undoes only our own cordon.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import pods as _pods
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.pods import is_finished, pod_key
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import selectors as _label_selector

CORDON_ANNOTATION = "gpuops.nvidia/cordon"
REASON_ANNOTATION = "gpuops.nvidia/cordon-reason"
CORDONED_BY = "gpuops.nvidia.node_drain"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
REFUSED_DAEMONSET = "DaemonSet-managed pod (ignore_daemonsets: true to ignore it)"
REFUSED_EMPTYDIR = "pod with local storage (emptyDir; delete_emptydir_data: true to evict it and lose the data)"
REFUSED_UNREPLICATED = "pod without a controller, it will not be recreated (force: true to evict it)"
REFUSED_DAEMONSET_GONE = "pod of DaemonSet %s that no longer exists (force: true to evict it)"
IGNORED_DAEMONSET = "DaemonSet-managed"
IGNORED_MIRROR = "mirror pod (static pod of the kubelet)"


def _meta(obj):
    return obj.get("metadata") or {}


def controller_of(pod):
    """The ownerReference with ``controller: true``, or None."""
    for owner in _meta(pod).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner
    return None


def has_emptydir(pod):
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def daemonset_controller(pod):
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return owner
    return None


def daemonsets_to_check(pods):
    """``(namespace, name)`` of the DaemonSets controlling unfinished pods: kubectl evicts a pod whose DaemonSet
    is gone only with force, so the module reads each of these once."""
    found = set()
    for pod in pods:
        owner = daemonset_controller(pod)
        if owner is not None and not is_finished(pod):
            found.add((_meta(pod).get("namespace"), owner.get("name")))
    return found


def classify_pods(pods, ignore_daemonsets=True, delete_emptydir_data=False, force=False,
                  missing_daemonsets=frozenset()):
    """Split the pods of a node as ``kubectl drain`` does.

    Returns ``{"evict": [pod, ...], "ignored": [{"pod", "reason"}], "refused": [{"pod", "reason"}]}``.
    ``missing_daemonsets``: ``(namespace, name)`` of controlling DaemonSets that do not exist. Finished pods
    (Succeeded/Failed) pass every filter, as in kubectl: evicting them never waits on a budget.
    """
    plan = {"evict": [], "ignored": [], "refused": []}
    for pod in pods:
        key = pod_key(pod)
        finished = is_finished(pod)
        daemonset = daemonset_controller(pod)
        if daemonset is not None and not finished:
            if (_meta(pod).get("namespace"), daemonset.get("name")) in missing_daemonsets:
                if not force:
                    plan["refused"].append({"pod": key, "reason": REFUSED_DAEMONSET_GONE % daemonset.get("name")})
                    continue
            elif not ignore_daemonsets:
                plan["refused"].append({"pod": key, "reason": REFUSED_DAEMONSET})
                continue
            else:
                plan["ignored"].append({"pod": key, "reason": IGNORED_DAEMONSET})
                continue
        if MIRROR_ANNOTATION in (_meta(pod).get("annotations") or {}):
            plan["ignored"].append({"pod": key, "reason": IGNORED_MIRROR})
            continue
        if has_emptydir(pod) and not finished and not delete_emptydir_data:
            plan["refused"].append({"pod": key, "reason": REFUSED_EMPTYDIR})
            continue
        if controller_of(pod) is None and not finished and not force:
            plan["refused"].append({"pod": key, "reason": REFUSED_UNREPLICATED})
            continue
        plan["evict"].append(pod)
    return plan


def refusal_message(node_name, refused):
    """The failure message for pods a drain may not evict (nothing has been evicted yet)."""
    lines = ["%s (%s)" % (entry["pod"], entry["reason"]) for entry in refused]
    return "cannot drain node %s, nothing was evicted: %d pod(s) refused: %s" % (
        node_name, len(refused), "; ".join(lines))


# --- PodDisruptionBudgets -------------------------------------------------------------------------------------

def pdb_key(pdb):
    return "%s/%s" % (_meta(pdb).get("namespace"), _meta(pdb).get("name"))


def pdbs_of_pod(pod, pdbs):
    """The PDBs of the pod's namespace whose selector matches its labels."""
    namespace = _meta(pod).get("namespace")
    labels = _meta(pod).get("labels") or {}
    return [pdb for pdb in pdbs if _meta(pdb).get("namespace") == namespace
            and _label_selector.matches((pdb.get("spec") or {}).get("selector"), labels)]


def disruptions_allowed(pdb):
    return int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)


def needs_budget(pod, pdb):
    """Whether evicting the pod spends one of the PDB's disruptions (the eviction API's rules)."""
    if not _pods.is_alive(pod):
        return False
    if not _pods.is_ready(pod) and (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return False
    return True


def _pdb_ref(pdb):
    return {"name": _meta(pdb).get("name"), "namespace": _meta(pdb).get("namespace"),
            "disruptions_allowed": disruptions_allowed(pdb)}


def budget_report(pods, pdbs):
    """Which PDBs a drain of ``pods`` meets, and which pods they would hold back now.

    Returns ``{"pdbs": [...], "blocked": [...]}``: per PDB its ``disruptions_allowed`` (status), the pods of
    this drain it covers and ``would_block`` (more such pods than allowed disruptions); per held-back pod the
    PDBs in the way. A pod matched by several PDBs is always blocked: the eviction API answers 500 for it.
    """
    covered = {}
    multiple = []
    for pod in pods:
        matching = pdbs_of_pod(pod, pdbs)
        if len(matching) > 1:
            multiple.append((pod, matching))
        for pdb in matching:
            if needs_budget(pod, pdb):
                covered.setdefault(pdb_key(pdb), (pdb, []))[1].append(pod)
    report = {"pdbs": [], "blocked": []}
    for key in sorted(covered):
        pdb, its_pods = covered[key]
        allowed = disruptions_allowed(pdb)
        entry = dict(_pdb_ref(pdb), pods=[pod_key(pod) for pod in its_pods], would_block=len(its_pods) > allowed)
        report["pdbs"].append(entry)
        for pod in its_pods[allowed:]:
            report["blocked"].append({"pod": pod_key(pod), "pdbs": [_pdb_ref(pdb)],
                                      "message": "the disruption budget %s allows %d disruption(s) now and covers %d "
                                                 "pod(s) of this node" % (key, allowed, len(its_pods))})
    for pod, matching in multiple:
        report["blocked"].append({"pod": pod_key(pod), "pdbs": [_pdb_ref(pdb) for pdb in matching],
                                  "message": "matched by %d disruption budgets: the eviction API refuses such pods"
                                             % len(matching)})
    return report


NOT_ASKED = "not evicted: its disruption budget allowed no disruption while the drain waited"
TERMINATING = "evicted, still terminating"


def blocked_pods(pending, pdbs, last_errors, evicted=()):
    """The pods still on the node when a drain gives up, each with its PDBs and why it is there.

    ``pending``: pods not gone; ``last_errors``: pod key -> last API message for it; ``evicted``: keys of pods whose
    eviction was admitted (they are terminating).
    """
    blocked = []
    for pod in pending:
        key = pod_key(pod)
        message = last_errors.get(key) or (TERMINATING if key in evicted else NOT_ASKED)
        blocked.append({"pod": key, "pdbs": [_pdb_ref(pdb) for pdb in pdbs_of_pod(pod, pdbs)], "message": message})
    return blocked


def timeout_reason(node_name, timeout, blocked):
    """The text of the failure and of the node's reason annotation when a drain times out."""
    parts = []
    for entry in blocked:
        budgets = ", ".join("%s/%s (disruptionsAllowed %d)" % (pdb["namespace"], pdb["name"], pdb["disruptions_allowed"])
                            for pdb in entry["pdbs"])
        parts.append("%s%s: %s" % (entry["pod"], " blocked by PDB " + budgets if budgets else "", entry["message"]))
    return ("drain of %s timed out after %ss with %d pod(s) left; node left cordoned: %s"
            % (node_name, timeout, len(blocked), "; ".join(parts)))


# --- evictions ------------------------------------------------------------------------------------------------

def eviction_outcome(status_code, reason=None):
    """What to do after an eviction (or delete) answer: ``done``, ``gone``, ``retry`` or ``error``.

    429: a PDB says not now (retried until the timeout). 404: the pod is already gone. 403 with reason
    NamespaceTerminating (kubectl retries: the namespace controller deletes the pod anyway). 500 with several
    PDBs and anything else: an error for that pod.
    """
    if status_code in (200, 201):
        return "done"
    if status_code == 404:
        return "gone"
    if status_code == 429:
        return "retry"
    if status_code == 403 and reason == "NamespaceTerminating":
        return "retry"
    return "error"


def refusal_text(message, code, body):
    """One line for a refused eviction: the Status message, the cause a PodDisruptionBudget gives (``The disruption
    budget web needs 2 healthy pods and has 2 currently``) when the body carries one, and the HTTP code."""
    causes = []
    try:
        status = json.loads(body) if body else {}
        causes = [cause.get("message") for cause in ((status.get("details") or {}).get("causes") or [])
                  if cause.get("reason") == "DisruptionBudget" and cause.get("message")]
    except (ValueError, AttributeError, TypeError):
        pass
    text = message if not causes else "%s %s" % (message, "; ".join(causes))
    return text if code is None else "%s (HTTP %s)" % (text, code)


def retry_delay(attempt, cap=5.0):
    """Seconds to wait before eviction attempt ``attempt`` (1 = first retry): 0.5, 1, 2, 4, 5, 5 ...

    A PDB change wakes the waiters earlier (see node_drain), so the delay only bounds a missed event.
    """
    return min(cap, 0.5 * (2 ** max(0, attempt - 1)))


def gone_after_event(event_type, pod, pending):
    """The pending pod keys a watch event shows gone: a DELETED pod whose UID we evicted, or a pod under an
    evicted pod's name with another UID (a StatefulSet recreating it). ``pending``: key -> uid."""
    key = pod_key(pod)
    uid = _meta(pod).get("uid")
    if key not in pending:
        return set()
    if event_type == "DELETED" and uid == pending[key]:
        return {key}
    if event_type in ("ADDED", "MODIFIED") and uid != pending[key]:
        return {key}
    return set()


def gone_after_list(pods, pending):
    """The pending pod keys absent from a fresh list of the node's pods, or present under a new UID."""
    current = {pod_key(pod): _meta(pod).get("uid") for pod in pods}
    return {key for key, uid in pending.items() if current.get(key) != uid}


# --- cordon bookkeeping ---------------------------------------------------------------------------------------

def is_unschedulable(node):
    return bool((node.get("spec") or {}).get("unschedulable"))


def cordon_record(node):
    """Our cordon record on the node (``{"by", "at", "was_unschedulable"}``), or None when we did not cordon it.
    A record that is not ours or not JSON counts as absent."""
    text = (_meta(node).get("annotations") or {}).get(CORDON_ANNOTATION)
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("by") != CORDONED_BY:
        return None
    return record


def cordon_patch(node, now, reason):
    """The merge patch that cordons the node and records why and whether it was unschedulable before (None: the
    node is already cordoned by us for this reason). A record of an earlier cordon of ours is kept as it is."""
    annotations = _meta(node).get("annotations") or {}
    patch_annotations = {}
    if cordon_record(node) is None:
        record = {"by": CORDONED_BY, "at": now, "was_unschedulable": is_unschedulable(node)}
        patch_annotations[CORDON_ANNOTATION] = json.dumps(record, sort_keys=True)
    if reason and annotations.get(REASON_ANNOTATION) != reason:
        patch_annotations[REASON_ANNOTATION] = reason
    patch = {}
    if patch_annotations:
        patch["metadata"] = {"annotations": patch_annotations}
    if not is_unschedulable(node):
        patch["spec"] = {"unschedulable": True}
    return patch or None


def reason_patch(reason):
    """The merge patch that (re)writes only the reason annotation."""
    return {"metadata": {"annotations": {REASON_ANNOTATION: reason}}}


def undo_cordon_patch(node, record_before):
    """The merge patch that undoes a cordon made by this run (``record_before``: our record before it, None when
    the run wrote it): back to schedulable unless the node was unschedulable before, annotations as they were."""
    if record_before is not None:
        return None
    record = cordon_record(node)
    if record is None:
        return None
    patch = {"metadata": {"annotations": {CORDON_ANNOTATION: None, REASON_ANNOTATION: None}}}
    if not record.get("was_unschedulable"):
        patch["spec"] = {"unschedulable": False}
    return patch


def uncordon_plan(node, force=False):
    """What ``state: uncordon`` does: ``{"patch": dict|None, "uncordoned": bool, "warning": str|None}``.

    Our cordon of a node that was schedulable before is undone. A node that was already unschedulable before we
    cordoned it, or that someone else cordoned, stays cordoned unless ``force``. Our annotations go in every case.
    """
    name = _meta(node).get("name")
    record = cordon_record(node)
    annotations = _meta(node).get("annotations") or {}
    ours = {key: None for key in (CORDON_ANNOTATION, REASON_ANNOTATION) if key in annotations}
    patch = {"metadata": {"annotations": ours}} if ours else {}
    warning = None
    if not is_unschedulable(node):
        uncordon = False
    elif force:
        uncordon = True
    elif record is None:
        uncordon = False
        warning = ("node %s was not cordoned by %s: left cordoned (force: true uncordons it)" % (name, CORDONED_BY))
    elif record.get("was_unschedulable"):
        uncordon = False
        warning = ("node %s was already cordoned before %s cordoned it at %s: left cordoned (force: true uncordons "
                   "it)" % (name, CORDONED_BY, record.get("at")))
    else:
        uncordon = True
    if uncordon:
        patch["spec"] = {"unschedulable": False}
    return {"patch": patch or None, "uncordoned": uncordon, "warning": warning}
