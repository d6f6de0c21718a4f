# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Pod/PDB/Node JSON below has the shape the API server serves (policy/v1, v1); only the fields the filters
# read are kept.

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import drain as _drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import selectors as _label_selector


def pod(name, namespace="default", owner=None, phase="Running", emptydir=False, mirror=False, labels=None,
        ready=True, uid=None, terminating=False):
    metadata = {"name": name, "namespace": namespace, "uid": uid or "uid-" + name, "labels": labels or {}}
    if owner:
        kind, owner_name = owner
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                        "uid": "uid-" + owner_name, "controller": True, "blockOwnerDeletion": True}]
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "3f2a", "kubernetes.io/config.source": "file"}
    if terminating:
        metadata["deletionTimestamp"] = "2026-12-03T03:00:00Z"
    volumes = [{"name": "kube-api-access-x", "projected": {"sources": []}}]
    if emptydir:
        volumes.append({"name": "scratch", "emptyDir": {}})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": "gpu-1", "volumes": volumes, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pdb(name, allowed, match_labels, namespace="default", policy=None):
    spec = {"selector": {"matchLabels": match_labels}, "minAvailable": 1}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec, "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 2,
                                     "expectedPods": 3, "observedGeneration": 1}}


def node(unschedulable=False, annotations=None):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "annotations": annotations or {}},
            "spec": {"unschedulable": True} if unschedulable else {}}


def keys(entries):
    return sorted(entry if isinstance(entry, str) else entry.get("pod") or _drain.pod_key(entry)
                  for entry in entries)


# --- filters, as kubectl drain ----------------------------------------------------------------------------------

def test_daemonset_pods_are_ignored_by_default_and_refused_without_ignore_daemonsets():
    pods = [pod("plugin", "kube-system", owner=("DaemonSet", "nvidia-device-plugin-daemonset"))]
    assert keys(_drain.classify_pods(pods)["ignored"]) == ["kube-system/plugin"]
    refused = _drain.classify_pods(pods, ignore_daemonsets=False)["refused"]
    assert refused == [{"pod": "kube-system/plugin", "reason": _drain.REFUSED_DAEMONSET}]


def test_daemonset_pod_with_emptydir_is_ignored_not_refused():
    # kubernetes.core before 6.5.0 checked emptyDir first and refused such pods (its PR #1095); kubectl does not.
    pods = [pod("fluentd", "kube-system", owner=("DaemonSet", "fluentd"), emptydir=True)]
    plan = _drain.classify_pods(pods)
    assert keys(plan["ignored"]) == ["kube-system/fluentd"] and not plan["refused"]


def test_pod_of_a_deleted_daemonset_needs_force_and_is_then_evicted():
    pods = [pod("orphan", owner=("DaemonSet", "gone"))]
    missing = {("default", "gone")}
    assert "no longer exists" in _drain.classify_pods(pods, missing_daemonsets=missing)["refused"][0]["reason"]
    assert keys(_drain.classify_pods(pods, force=True, missing_daemonsets=missing)["evict"]) == ["default/orphan"]


def test_mirror_pods_are_skipped_even_with_force():
    pods = [pod("kube-apiserver-gpu-1", "kube-system", mirror=True)]
    plan = _drain.classify_pods(pods, force=True)
    assert plan["ignored"] == [{"pod": "kube-system/kube-apiserver-gpu-1", "reason": _drain.IGNORED_MIRROR}]
    assert not plan["evict"] and not plan["refused"]


def test_emptydir_needs_delete_emptydir_data():
    pods = [pod("cache", owner=("ReplicaSet", "cache-7d9f"), emptydir=True)]
    assert _drain.classify_pods(pods)["refused"][0]["reason"] == _drain.REFUSED_EMPTYDIR
    assert keys(_drain.classify_pods(pods, delete_emptydir_data=True)["evict"]) == ["default/cache"]


def test_unreplicated_needs_force():
    pods = [pod("bare")]
    assert _drain.classify_pods(pods)["refused"][0]["reason"] == _drain.REFUSED_UNREPLICATED
    assert keys(_drain.classify_pods(pods, force=True)["evict"]) == ["default/bare"]


def test_unreplicated_emptydir_pod_needs_both_options_as_in_kubectl():
    pods = [pod("bare-scratch", emptydir=True)]
    assert _drain.classify_pods(pods, delete_emptydir_data=True)["refused"][0]["reason"] == \
        _drain.REFUSED_UNREPLICATED
    assert _drain.classify_pods(pods, force=True)["refused"][0]["reason"] == _drain.REFUSED_EMPTYDIR
    assert keys(_drain.classify_pods(pods, force=True, delete_emptydir_data=True)["evict"]) == \
        ["default/bare-scratch"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_pass_every_filter(phase):
    pods = [pod("job-done", phase=phase, emptydir=True), pod("ds-done", owner=("DaemonSet", "x"), phase=phase)]
    plan = _drain.classify_pods(pods, ignore_daemonsets=False)
    assert keys(plan["evict"]) == ["default/ds-done", "default/job-done"] and not plan["refused"]


def test_replicated_pod_is_evicted_and_daemonsets_to_check_lists_unfinished_daemonset_pods_once():
    pods = [pod("web-1", owner=("ReplicaSet", "web-5c6")), pod("a", "kube-system", owner=("DaemonSet", "ds")),
            pod("b", "kube-system", owner=("DaemonSet", "ds")), pod("c", owner=("DaemonSet", "old"), phase="Failed")]
    assert keys(_drain.classify_pods(pods)["evict"]) == ["default/c", "default/web-1"]
    assert _drain.daemonsets_to_check(pods) == {("kube-system", "ds")}


def test_refusal_message_names_every_pod_and_says_nothing_was_evicted():
    plan = _drain.classify_pods([pod("bare"), pod("cache", owner=("ReplicaSet", "r"), emptydir=True)])
    message = _drain.refusal_message("gpu-1", plan["refused"])
    assert "nothing was evicted" in message and "default/bare" in message and "default/cache" in message


# --- PDBs -------------------------------------------------------------------------------------------------------

def test_budget_report_names_the_blocking_pdb_with_its_disruptions_allowed():
    pods = [pod("web-%d" % index, owner=("ReplicaSet", "web-1"), labels={"app": "web"}) for index in range(3)]
    pods.append(pod("db-0", owner=("ReplicaSet", "db-1"), labels={"app": "db"}))
    pdbs = [pdb("web", 1, {"app": "web"}), pdb("db", 1, {"app": "db"}), pdb("other", 0, {"app": "web"}, "prod")]
    report = _drain.budget_report(pods, pdbs)
    by_name = {entry["name"]: entry for entry in report["pdbs"]}
    assert by_name["web"]["would_block"] and by_name["web"]["disruptions_allowed"] == 1
    assert len(by_name["web"]["pods"]) == 3 and not by_name["db"]["would_block"]
    assert "other" not in by_name    # another namespace
    assert keys(report["blocked"]) == ["default/web-1", "default/web-2"]
    assert report["blocked"][0]["pdbs"] == [{"name": "web", "namespace": "default", "disruptions_allowed": 1}]


def test_unhealthy_pod_under_always_allow_and_finished_pods_spend_no_budget():
    pods = [pod("sick", labels={"app": "web"}, ready=False), pod("done", labels={"app": "web"}, phase="Succeeded"),
            pod("dying", labels={"app": "web"}, terminating=True)]
    report = _drain.budget_report(pods, [pdb("web", 0, {"app": "web"}, policy="AlwaysAllow")])
    assert report == {"pdbs": [], "blocked": []}
    assert keys(_drain.budget_report(pods[:1], [pdb("web", 0, {"app": "web"})])["blocked"]) == ["default/sick"]


def test_pod_under_two_pdbs_is_reported_blocked_because_the_eviction_api_answers_500():
    report = _drain.budget_report([pod("web-0", labels={"app": "web", "tier": "x"})],
                                  [pdb("a", 5, {"app": "web"}), pdb("b", 5, {"tier": "x"})])
    assert [entry["message"] for entry in report["blocked"]] == \
        ["matched by 2 disruption budgets: the eviction API refuses such pods"]


def test_timeout_reason_names_pods_pdbs_and_disruptions_allowed():
    pods = [pod("web-0", labels={"app": "web"})]
    blocked = _drain.blocked_pods(pods, [pdb("web", 0, {"app": "web"})],
                                  {"default/web-0": "Cannot evict pod as it would violate the pod's disruption "
                                                    "budget."})
    others = _drain.blocked_pods([pod("web-1", labels={"app": "web"}), pod("web-2", labels={"app": "web"})],
                                 [pdb("web", 0, {"app": "web"})], {}, evicted={"default/web-2"})
    assert [entry["message"] for entry in others] == [_drain.NOT_ASKED, _drain.TERMINATING]
    text = _drain.timeout_reason("gpu-1", 30, blocked)
    assert text.startswith("drain of gpu-1 timed out after 30s with 1 pod(s) left; node left cordoned")
    assert "default/web-0 blocked by PDB default/web (disruptionsAllowed 0)" in text


def test_label_selector_matching_and_query():
    selector = {"matchLabels": {"app": "web"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "debug", "operator": "DoesNotExist"},
        {"key": "zone", "operator": "NotIn", "values": ["z1"]}, {"key": "team", "operator": "Exists"}]}
    assert _label_selector.matches(selector, {"app": "web", "tier": "a", "team": "ml"})
    assert not _label_selector.matches(selector, {"app": "web", "tier": "a", "team": "ml", "debug": "1"})
    assert not _label_selector.matches(selector, {"app": "web", "tier": "a", "team": "ml", "zone": "z1"})
    assert _label_selector.matches({}, {"x": "y"}) and not _label_selector.matches(None, {"x": "y"})
    assert _label_selector.to_query(selector) == "app=web,tier in (a,b),!debug,zone notin (z1),team"


# --- evictions and "gone" -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("code,reason,outcome", [(201, None, "done"), (200, None, "done"), (404, "NotFound", "gone"),
                                                 (429, "TooManyRequests", "retry"),
                                                 (403, "NamespaceTerminating", "retry"), (403, "Forbidden", "error"),
                                                 (500, "InternalError", "error")])
def test_eviction_outcome(code, reason, outcome):
    assert _drain.eviction_outcome(code, reason) == outcome


def test_retry_delay_backs_off_to_five_seconds():
    assert [_drain.retry_delay(attempt) for attempt in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]


def test_pod_is_gone_when_deleted_or_recreated_under_its_name_with_a_new_uid():
    pending = {"default/web-0": "uid-1", "default/db-0": "uid-2"}
    assert _drain.gone_after_event("DELETED", pod("web-0", uid="uid-1"), pending) == {"default/web-0"}
    assert _drain.gone_after_event("MODIFIED", pod("web-0", uid="uid-1", terminating=True), pending) == set()
    assert _drain.gone_after_event("ADDED", pod("db-0", uid="uid-9"), pending) == {"default/db-0"}
    assert _drain.gone_after_event("DELETED", pod("other", uid="uid-7"), pending) == set()
    assert _drain.gone_after_list([pod("db-0", uid="uid-9")], pending) == {"default/web-0", "default/db-0"}
    assert _drain.gone_after_list([pod("db-0", uid="uid-2"), pod("web-0", uid="uid-1")], pending) == set()


# --- cordon bookkeeping -------------------------------------------------------------------------------------------

def test_cordon_records_that_the_node_was_schedulable_and_why():
    patch = _drain.cordon_patch(node(), "2026-12-03T03:00:00Z", "driver upgrade")
    assert patch["spec"] == {"unschedulable": True}
    record = json.loads(patch["metadata"]["annotations"][_drain.CORDON_ANNOTATION])
    assert record == {"by": _drain.CORDONED_BY, "at": "2026-12-03T03:00:00Z", "was_unschedulable": False}
    assert patch["metadata"]["annotations"][_drain.REASON_ANNOTATION] == "driver upgrade"


def test_cordon_of_a_node_we_already_cordoned_is_a_no_op_and_keeps_the_first_record():
    first = _drain.cordon_patch(node(), "T1", "r")
    cordoned = node(True, dict(first["metadata"]["annotations"]))
    assert _drain.cordon_patch(cordoned, "T2", "r") is None
    assert _drain.cordon_patch(cordoned, "T2", "other reason") == {
        "metadata": {"annotations": {_drain.REASON_ANNOTATION: "other reason"}}}


def test_uncordon_undoes_only_our_cordon_unless_force():
    ours = node(True, _drain.cordon_patch(node(), "T", "r")["metadata"]["annotations"])
    plan = _drain.uncordon_plan(ours)
    assert plan["uncordoned"] and plan["patch"]["spec"] == {"unschedulable": False}
    assert plan["patch"]["metadata"]["annotations"] == {_drain.CORDON_ANNOTATION: None, _drain.REASON_ANNOTATION: None}

    prior = node(True, _drain.cordon_patch(node(True), "T", "r")["metadata"]["annotations"])
    plan = _drain.uncordon_plan(prior)
    assert not plan["uncordoned"] and "already cordoned before" in plan["warning"] and "spec" not in plan["patch"]
    assert _drain.uncordon_plan(prior, force=True)["patch"]["spec"] == {"unschedulable": False}

    foreign = node(True)
    plan = _drain.uncordon_plan(foreign)
    assert plan == {"patch": None, "uncordoned": False, "warning": plan["warning"]} and "not cordoned by" in \
        plan["warning"]
    assert _drain.uncordon_plan(node()) == {"patch": None, "uncordoned": False, "warning": None}


def test_a_foreign_or_broken_record_is_not_ours():
    assert _drain.cordon_record(node(True, {_drain.CORDON_ANNOTATION: "{not json"})) is None
    assert _drain.cordon_record(node(True, {_drain.CORDON_ANNOTATION: json.dumps({"by": "someone"})})) is None


def test_undo_cordon_after_a_refusal_restores_what_this_run_changed():
    cordoned = node(True, _drain.cordon_patch(node(), "T", "r")["metadata"]["annotations"])
    assert _drain.undo_cordon_patch(cordoned, None)["spec"] == {"unschedulable": False}
    prior = node(True, _drain.cordon_patch(node(True), "T", "r")["metadata"]["annotations"])
    assert "spec" not in _drain.undo_cordon_patch(prior, None)
    assert _drain.undo_cordon_patch(cordoned, {"by": _drain.CORDONED_BY}) is None


def test_refusal_text_carries_the_budget_cause_of_the_429_status():
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                       "reason": "TooManyRequests",
                       "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                       "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web "
                                               "needs 2 healthy pods and has 2 currently"}]}})
    assert _drain.refusal_text("Cannot evict pod as it would violate the pod's disruption budget.", 429, body) == (
        "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy "
        "pods and has 2 currently (HTTP 429)")
    assert _drain.refusal_text("connection refused", None, None) == "connection refused"
    assert _drain.refusal_text("Too Many Requests", 429, "<html>") == "Too Many Requests (HTTP 429)"
