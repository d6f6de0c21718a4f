# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the GPU Operator side of a driver roll-out: detection, method, pacing, the version, the driver pod."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_operator as op
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import plan

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "k8s")
OLD, NEW = "595.91.07", "615.71.09"


def sample_cluster_policy(**driver):
    with open(os.path.join(FIXTURES, "clusterpolicy_gpu-operator-sample_driver.PARTIAL.yaml")) as stream:
        policy = yaml.safe_load(stream)
    policy["spec"]["driver"].update(driver)
    return policy


def node(name, labels=None, annotations=None, cordoned=False):
    base = {"nvidia.com/gpu.present": "true", op.DEPLOY_DRIVER_LABEL: "true"}
    base.update(labels or {})
    return {"metadata": {"name": name, "labels": base, "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def nvidia_driver(name, selector=None, version=OLD, policy=None):
    spec = {"version": version, "nodeSelector": selector or {}}
    if policy is not None:
        spec["upgradePolicy"] = policy
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name}, "spec": spec}


NODES = [node("gpu-node-%02d" % number) for number in range(1, 5)]
TARGETS = [one["metadata"]["name"] for one in NODES]


# --------------------------------------------------------------------------- detection

def test_the_sample_cluster_policy_runs_the_driver_with_the_controller_off():
    detection = op.detect([sample_cluster_policy()], [], NODES, NEW)
    (source,) = detection["sources"]
    assert source["kind"] == "ClusterPolicy" and source["name"] == "gpu-cluster-policy"
    assert source["field"] == "spec.driver.version" and source["version"] == "460.73.01"
    assert source["previous_version"] == "460.73.01"
    assert source["auto_upgrade"] is False          # no upgradePolicy: the libs' default
    assert source["helm"] is None
    assert source["driver_pod_selector"] == "app=nvidia-driver-daemonset"
    assert source["nodes"] == TARGETS
    assert set(detection["node_source"]) == set(TARGETS)
    assert "ClusterPolicy gpu-cluster-policy runs the driver" in detection["reason"]


def test_a_disabled_driver_or_no_operator_is_not_operator_mode():
    detection = op.detect([sample_cluster_policy(enabled=False)], [], NODES, NEW)
    assert detection["sources"] == [] and detection["node_source"] == {}
    assert "spec.driver.enabled: false" in detection["reason"]
    assert "does not manage drivers" in op.detect([], [], NODES, NEW)["reason"]


def test_nodes_without_the_operators_driver_deploy_label_are_not_reached():
    others = [node("cpu-node-01", labels={op.DEPLOY_DRIVER_LABEL: "false"}), node("gpu-node-09", labels={
        op.DEPLOY_DRIVER_LABEL: "paused-for-driver-upgrade"})]
    detection = op.detect([sample_cluster_policy()], [], NODES + others, NEW)
    assert detection["sources"][0]["nodes"] == TARGETS + ["gpu-node-09"]


def test_nvidia_driver_crs_select_their_nodes_by_owner_label_then_node_selector():
    policy = sample_cluster_policy(useNvidiaDriverCRD=True)
    nodes = [node("gpu-node-01", labels={op.OWNER_LABEL: "h100"}),
             node("gpu-node-02", labels={"pool": "a100"}),
             node("gpu-node-03", labels={"pool": "h100"})]
    drivers = [nvidia_driver("h100", {"pool": "h100"}), nvidia_driver("a100", {"pool": "a100"},
                                                                      policy={"autoUpgrade": False})]
    detection = op.detect([policy], drivers, nodes, NEW)
    by_name = dict((source["name"], source) for source in detection["sources"])
    assert by_name["h100"]["nodes"] == ["gpu-node-01", "gpu-node-03"]
    assert by_name["a100"]["nodes"] == ["gpu-node-02"]
    assert by_name["h100"]["field"] == "spec.version"
    assert by_name["h100"]["auto_upgrade"] is True          # the CRD's default
    assert by_name["a100"]["auto_upgrade"] is False
    assert by_name["h100"]["driver_pod_selector"] == "app.kubernetes.io/component=nvidia-driver"
    assert detection["node_source"] == {"gpu-node-01": "h100", "gpu-node-02": "a100", "gpu-node-03": "h100"}


def test_a_helm_rendered_cluster_policy_gets_its_values_change():
    policy = sample_cluster_policy(upgradePolicy={"autoUpgrade": True})
    policy["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    policy["metadata"]["annotations"] = {"meta.helm.sh/release-name": "gpu-op",
                                         "meta.helm.sh/release-namespace": "nvidia"}
    (source,) = op.detect([policy], [], NODES, NEW)["sources"]
    assert source["auto_upgrade"] is True
    assert source["helm"] == {
        "release": "gpu-op", "namespace": "nvidia", "values": {"driver.version": NEW},
        "command": "helm upgrade gpu-op nvidia/gpu-operator -n nvidia --reuse-values --set driver.version=%s" % NEW}


# --------------------------------------------------------------------------- the install method

@pytest.mark.parametrize("requested,method,error", [
    ("auto", "operator", None),
    ("operator", "operator", None),
    ("runfile", "runfile", "runfile: the GPU Operator runs the driver of gpu-node-01"),
    ("package", "package", "a host-installed driver would fight its driver container"),
    ("magic", "magic", "install_method must be one of auto, operator, runfile, package"),
])
def test_the_method_on_operator_managed_nodes(requested, method, error):
    resolved = op.resolve_method(requested, op.detect([sample_cluster_policy()], [], NODES, NEW), TARGETS)
    assert resolved["method"] == method
    assert (error is None) == (resolved["errors"] == [])
    if error:
        assert error in resolved["errors"][0]


def test_the_method_without_an_operator():
    detection = op.detect([], [], NODES, NEW)
    assert op.resolve_method("auto", detection, TARGETS) == {"method": "runfile", "errors": []}
    refused = op.resolve_method("operator", detection, TARGETS)
    assert refused["errors"] == ["operator: the GPU Operator does not run the driver of gpu-node-01, gpu-node-02, "
                                 "gpu-node-03, gpu-node-04 (no ClusterPolicy and no NVIDIADriver: the GPU Operator "
                                 "does not manage drivers here)"]


def test_auto_refuses_a_mix_of_managed_and_host_nodes():
    nodes = NODES[:2] + [node("gpu-node-03", labels={op.DEPLOY_DRIVER_LABEL: "false"})]
    resolved = op.resolve_method("auto", op.detect([sample_cluster_policy()], [], nodes, NEW),
                                 ["gpu-node-01", "gpu-node-02", "gpu-node-03"])
    assert "runs the driver of gpu-node-01, gpu-node-02 but not of gpu-node-03" in resolved["errors"][0]


# --------------------------------------------------------------------------- blockers and pacing

def test_a_version_that_would_reach_nodes_outside_the_roll_out_blocks():
    detection = op.detect([sample_cluster_policy()], [], NODES, NEW)
    blockers = op.operator_blockers(detection, NODES, TARGETS[:2], NEW)
    assert blockers == [{"node": "gpu-node-03, gpu-node-04", "reason": (
        "ClusterPolicy gpu-cluster-policy sets the driver of these nodes too and they are not targets: its new "
        "version would reach them unpaced at their next driver pod restart (add them to gpu_nodes)")}]
    assert op.operator_blockers(detection, NODES, TARGETS, NEW) == []


def test_a_skip_label_set_by_someone_else_blocks_and_ours_does_not():
    held_by_other = node("gpu-node-02", labels={op.SKIP_LABEL: "true"})
    ours = node("gpu-node-03", labels={op.SKIP_LABEL: "true"},
                annotations={op.HOLD_ANNOTATION: json.dumps({"to": NEW, "run_id": "r1"})})
    nodes = [NODES[0], held_by_other, ours, NODES[3]]
    detection = op.detect([sample_cluster_policy()], [], nodes, NEW)
    blockers = op.operator_blockers(detection, nodes, TARGETS, NEW)
    assert [blocker["node"] for blocker in blockers] == ["gpu-node-02"]
    assert "set by someone else" in blockers[0]["reason"]


def test_hold_release_and_clear_touch_only_what_we_set():
    fresh = node("gpu-node-01")
    held = op.hold_patch(fresh, NEW, "r1")
    assert held["metadata"]["labels"] == {op.SKIP_LABEL: "true"}
    assert json.loads(held["metadata"]["annotations"][op.HOLD_ANNOTATION]) == {"to": NEW, "run_id": "r1"}
    now_held = node("gpu-node-01", labels=held["metadata"]["labels"], annotations=held["metadata"]["annotations"])
    assert op.hold_patch(now_held, NEW, "r2") == {}                 # a resume keeps the first run's mark
    released = op.release_patch(now_held, NEW, keep_cordoned=True)
    assert released["metadata"]["labels"] == {op.SKIP_LABEL: None}
    assert released["metadata"]["annotations"][op.INITIAL_UNSCHEDULABLE_ANNOTATION] == "true"
    mark = json.loads(released["metadata"]["annotations"][op.HOLD_ANNOTATION])
    assert mark == {"to": NEW, "run_id": "r1", "initial_unschedulable": True}
    after = node("gpu-node-01", annotations={op.HOLD_ANNOTATION: json.dumps(mark),
                                             op.INITIAL_UNSCHEDULABLE_ANNOTATION: "true"})
    assert op.clear_patch(after, NEW) == {"metadata": {"annotations": {
        op.HOLD_ANNOTATION: None, op.INITIAL_UNSCHEDULABLE_ANNOTATION: None}}}
    # someone else's skip label is never released, and a hold for another version is not ours
    other = node("gpu-node-02", labels={op.SKIP_LABEL: "true"})
    assert op.release_patch(other, NEW, keep_cordoned=False) is None
    assert op.clear_patch(other, NEW) == {}
    assert op.hold_of(now_held, "620.1.2") is None


def test_the_initial_state_annotation_is_not_ours_to_remove_when_the_controller_set_it():
    mark = {"to": NEW, "run_id": "r1"}
    before = node("gpu-node-01", labels={op.SKIP_LABEL: "true"},
                  annotations={op.HOLD_ANNOTATION: json.dumps(mark), op.INITIAL_UNSCHEDULABLE_ANNOTATION: "true"})
    assert op.clear_patch(before, NEW) == {"metadata": {"labels": {op.SKIP_LABEL: None},
                                                        "annotations": {op.HOLD_ANNOTATION: None}}}


# --------------------------------------------------------------------------- the version

def test_the_version_is_raised_once_and_the_previous_one_kept():
    policy = sample_cluster_policy(version=OLD)
    patch = op.version_patch(policy, NEW, "r1")
    assert patch["spec"] == {"driver": {"version": NEW}}
    assert json.loads(patch["metadata"]["annotations"][op.PREVIOUS_VERSION_ANNOTATION]) == {
        "version": OLD, "to": NEW, "run_id": "r1"}
    raised = copy.deepcopy(policy)
    raised["spec"]["driver"]["version"] = NEW
    raised["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert op.version_patch(raised, NEW, "r2") == {}                 # a resume: at the target and recorded
    assert op.detect([raised], [], NODES, NEW)["sources"][0]["previous_version"] == OLD
    assert op.finish_patch(raised) == {"metadata": {"annotations": {op.PREVIOUS_VERSION_ANNOTATION: None}}}
    assert op.finish_patch(policy) == {}


def test_an_nvidia_driver_version_lives_in_spec_version():
    patch = op.version_patch(nvidia_driver("h100"), NEW, "r1")
    assert patch["spec"] == {"version": NEW}


def test_a_resource_raised_by_someone_else_is_not_re_recorded():
    assert op.version_patch(sample_cluster_policy(version=NEW), NEW, "r1") == {}


# --------------------------------------------------------------------------- the driver pod

def daemonset(name="nvidia-driver-daemonset", image="nvcr.io/nvidia/driver:%s-ubuntu22.04" % NEW):
    return {"metadata": {"name": name, "namespace": "gpu-operator", "uid": "ds-uid"},
            "spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr", "image": image}]}}}}


def revision(hash_, number):
    return {"metadata": {"name": "nvidia-driver-daemonset-" + hash_, "labels": {"controller-revision-hash": hash_},
                         "ownerReferences": [{"kind": "DaemonSet", "uid": "ds-uid"}]}, "revision": number}


def driver_pod(hash_="new", version=NEW, ready=True, restarts=0, deleting=False, created="2026-12-03T03:00:00Z",
               message=""):
    status = {"phase": "Running", "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": ready,
                                                         "restartCount": restarts}]}
    if not ready:
        status["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        status["containerStatuses"][0]["lastState"] = {"terminated": {"message": message}}
    metadata = {"name": "nvidia-driver-daemonset-" + hash_, "namespace": "gpu-operator",
                "labels": {"controller-revision-hash": hash_, "app": "nvidia-driver-daemonset"},
                "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-driver-daemonset"}],
                "creationTimestamp": created}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-03T03:05:00Z"
    return {"metadata": metadata, "status": status,
            "spec": {"containers": [{"name": "nvidia-driver-ctr",
                                     "image": "nvcr.io/nvidia/driver:%s-ubuntu22.04" % version}]}}


REVISIONS = [revision("old", 1), revision("new", 2)]


def test_a_pod_is_in_sync_with_the_newest_controller_revision():
    view = op.driver_pod_view([driver_pod()], [daemonset()], REVISIONS, NEW)
    assert view["in_sync"] and view["current"] and view["ready"] and not view["failing"]
    old = op.driver_pod_view([driver_pod("old", OLD)], [daemonset()], REVISIONS, NEW)
    assert not old["in_sync"] and not old["current"]
    assert op.outdated_pod_to_restart(old) and not op.failing_pod_to_retry(old)


def test_without_revisions_the_images_decide():
    assert op.driver_pod_view([driver_pod(version=NEW)], [daemonset()], [], NEW)["in_sync"]
    assert not op.driver_pod_view([driver_pod(version=OLD)], [daemonset()], [], NEW)["in_sync"]


def test_a_daemonset_not_yet_rewritten_is_not_the_new_driver_and_its_pod_is_not_restarted():
    stale = daemonset(image="nvcr.io/nvidia/driver:%s-ubuntu22.04" % OLD)
    view = op.driver_pod_view([driver_pod("old", OLD)], [stale], [revision("old", 1)], NEW)
    assert view["in_sync"] and not view["current"] and view["daemonset_current"] is False
    assert not op.outdated_pod_to_restart(view)


def test_the_newest_pod_is_the_one_looked_at_while_the_old_one_terminates():
    pods = [driver_pod("old", OLD, deleting=True, created="2026-12-03T02:00:00Z"),
            driver_pod("new", NEW, ready=False, created="2026-12-03T03:06:00Z")]
    view = op.driver_pod_view(pods, [daemonset()], REVISIONS, NEW)
    assert view["pod"] == "nvidia-driver-daemonset-new" and view["current"] and not view["ready"]


def test_a_driver_pod_restarted_more_than_ten_times_fails_with_its_message():
    pod = driver_pod(ready=False, restarts=11, message="Could not unload NVIDIA driver kernel modules, driver is "
                                                       "in use")
    view = op.driver_pod_view([pod], [daemonset()], REVISIONS, NEW)
    assert view["failing"]
    progress = op.node_progress(node("gpu-node-01"), view, [], auto_upgrade_on=False, require_validator=True)
    assert progress["failed"] == ("driver pod nvidia-driver-daemonset-new fails: nvidia-driver-ctr: CrashLoopBackOff, "
                                  "11 restarts, Could not unload NVIDIA driver kernel modules, driver is in use")
    assert op.failing_pod_to_retry(view) and not op.outdated_pod_to_restart(view)
    ten = op.driver_pod_view([driver_pod(ready=False, restarts=10)], [daemonset()], REVISIONS, NEW)
    assert not ten["failing"]


def validator(ready=True):
    return {"metadata": {"name": "nvidia-operator-validator-x"},
            "status": {"phase": "Running", "containerStatuses": [{"name": "nvidia-operator-validator",
                                                                  "ready": ready}]}}


def test_done_needs_the_pod_the_validator_and_with_the_controller_upgrade_done():
    view = op.driver_pod_view([driver_pod()], [daemonset()], REVISIONS, NEW)
    done_node = node("gpu-node-01", labels={op.STATE_LABEL: "upgrade-done"})
    assert op.node_progress(done_node, view, [validator()], True, True)["done"]
    waiting = op.node_progress(node("gpu-node-01", labels={op.STATE_LABEL: "validation-required"}), view,
                               [validator(False)], True, True)
    assert not waiting["done"] and waiting["failed"] is None
    assert waiting["waiting_for"] == ("the operator validator pod Ready; nvidia.com/gpu-driver-upgrade-state="
                                      "upgrade-done (now validation-required)")
    # autoUpgrade off: the controller removed its state labels; the pod and the validator decide
    assert op.node_progress(node("gpu-node-01"), view, [validator()], False, True)["done"]
    assert op.node_progress(node("gpu-node-01"), view, [], False, False)["done"]


def test_upgrade_failed_fails_and_a_retry_puts_it_back():
    view = op.driver_pod_view([driver_pod()], [daemonset()], REVISIONS, NEW)
    failed = node("gpu-node-01", labels={op.STATE_LABEL: "upgrade-failed"})
    progress = op.node_progress(failed, view, [validator()], True, True)
    assert progress["failed"].startswith("the GPU Operator marked the node nvidia.com/gpu-driver-upgrade-state="
                                         "upgrade-failed")
    assert op.retry_failed_patch(failed) == {"metadata": {"labels": {op.STATE_LABEL: "upgrade-required"}}}
    assert op.retry_failed_patch(node("gpu-node-01")) == {}


@pytest.mark.parametrize("image,verdict", [
    ("nvcr.io/nvidia/driver:615.71.09-ubuntu22.04", True),
    ("nvcr.io/nvidia/driver:615.71.09", True),
    ("registry:5000/nvidia/driver:595.91.07-rhel9.4", False),
    ("nvcr.io/nvidia/driver@sha256:0123abcd", None),
    ("nvcr.io/nvidia/driver:latest", None),
    ("localhost:5000/driver", None),
])
def test_image_tags_name_the_driver_version(image, verdict):
    assert op.image_runs_version(image, NEW) is verdict


# --------------------------------------------------------------------------- the planner in Operator mode

def test_the_planner_resumes_our_operator_upgrade_and_retries_a_failed_node():
    mark = json.dumps({"to": NEW, "run_id": "r1"})
    failed_record = json.dumps({"state": "failed", "to": NEW, "from": OLD, "reason": "driver pod fails"})
    nodes = [node("gpu-node-01", labels={op.STATE_LABEL: "upgrade-failed", "nvidia.com/cuda.driver-version.full": OLD},
                  annotations={op.HOLD_ANNOTATION: mark, plan.RECORD_ANNOTATION: failed_record}, cordoned=True),
             node("gpu-node-02", labels={op.STATE_LABEL: "upgrade-required", op.SKIP_LABEL: "true"},
                  annotations={op.HOLD_ANNOTATION: mark})]
    ours = [one["metadata"]["name"] for one in nodes if op.ours_in_progress(one, NEW)]
    planned = plan.build_plan(["gpu-node-01", "gpu-node-02"], nodes, NEW, [1, 1], operator_ours=ours)
    assert planned["blockers"] == []
    assert planned["nodes"]["gpu-node-01"]["action"] == "continue"
    # the host path: the same cluster is blocked
    host = plan.build_plan(["gpu-node-01", "gpu-node-02"], nodes, NEW, [1, 1])
    reasons = " ".join(blocker["reason"] for blocker in host["blockers"])
    assert "a previous run failed this node" in reasons and "upgrade-required" in reasons


def test_the_operators_own_upgrade_still_blocks_in_operator_mode():
    nodes = [node("gpu-node-01", labels={op.STATE_LABEL: "pod-restart-required"})]
    planned = plan.build_plan(["gpu-node-01"], nodes, NEW, [1], operator_ours=[])
    assert planned["blockers"][0]["reason"] == ("the GPU Operator's driver upgrade is in progress "
                                                "(nvidia.com/gpu-driver-upgrade-state=pod-restart-required)")
