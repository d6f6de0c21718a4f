"""Rollout history as kubernetes.core.k8s_rollback reads it, in process: a Deployment's ReplicaSets carry
`deployment.kubernetes.io/revision` (the Deployment too); putting an earlier template back (the JSON patch
k8s_rollback sends) makes that template's old ReplicaSet the new one with the next revision and its old number
in `revision-history`; a DaemonSet carries `deprecated.daemonset.template.generation` (one more per template
change), copied onto its ControllerRevisions, and rolls back by the revision's strategic merge patch."""
from __future__ import annotations

import copy
import time

import pytest

from gpulab.kube.api.patch import STRATEGIC_MERGE_PATCH
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for

REVISION = "deployment.kubernetes.io/revision"
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


@pytest.fixture
def cluster(tmp_path):
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(2)) for index in range(2)]
    twin = KubeCluster(str(tmp_path / "lab"), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.2,
                       container_start_s=0.1).start(serve=False)
    yield twin
    twin.stop()


def template(image, app="web"):
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "main", "image": image}]}}


def revisions(store, namespace="default"):
    items, _ = store.list("replicasets", namespace)
    return {rs["spec"]["template"]["spec"]["containers"][0]["image"]: rs["metadata"]["annotations"]
            for rs in items}


def deployment_revision(store, name="web"):
    return (store.get("deployments", name, "default")["metadata"].get("annotations") or {}).get(REVISION)


def test_rollback_of_a_deployment_reuses_the_old_replicaset_with_the_next_revision(cluster):
    store = cluster.store
    store.create("deployments", {"metadata": {"name": "web", "namespace": "default"},
                                 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                                          "template": template("nginx:1.17")}})
    wait_for(lambda: deployment_revision(store) == "1", what="revision 1")
    store.patch("deployments", "web", {"spec": {"template": template("nginx:1.0.234")}}, "application/merge-patch+json",
                "default")
    wait_for(lambda: deployment_revision(store) == "2", what="revision 2")
    # what k8s_rollback does: the template of the ReplicaSet of revision current - 1, and that revision
    previous = next(rs for rs in store.list("replicasets", "default")[0]
                    if rs["metadata"]["annotations"][REVISION] == "1")
    previous_template = copy.deepcopy(previous["spec"]["template"])
    del previous_template["metadata"]["labels"]["pod-template-hash"]
    store.patch("deployments", "web", [{"op": "replace", "path": "/spec/template", "value": previous_template},
                                       {"op": "replace", "path": "/metadata/annotations",
                                        "value": {REVISION: "1"}}], "application/json-patch+json", "default")
    wait_for(lambda: deployment_revision(store) == "3", what="revision 3 after the rollback")
    by_image = revisions(store)
    assert len(by_image) == 2     # no third ReplicaSet: the first one is the new one again
    assert by_image["nginx:1.17"][REVISION] == "3"
    assert by_image["nginx:1.17"]["deployment.kubernetes.io/revision-history"] == "1"
    assert by_image["nginx:1.0.234"][REVISION] == "2"
    wait_for(lambda: store.get("replicasets", previous["metadata"]["name"], "default")["spec"]["replicas"] == 2,
             what="the old ReplicaSet scaled up again")


def test_daemonset_template_generation_follows_template_changes_and_rolls_back(cluster):
    store = cluster.store
    created = store.create("daemonsets", {"metadata": {"name": "agent", "namespace": "default"},
                                          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                                   "template": template("agent:1", "agent")}})
    assert created["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"
    # a change outside the template keeps it
    relabeled = store.patch("daemonsets", "agent", {"metadata": {"labels": {"tier": "x"}}},
                            "application/merge-patch+json", "default")
    assert relabeled["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"

    def revision_annotations():
        items, _ = store.list("controllerrevisions", "default")
        return sorted((item["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION) for item in items)

    wait_for(lambda: revision_annotations() == ["1"], what="the first ControllerRevision")
    changed = store.patch("daemonsets", "agent", {"spec": {"template": template("agent:2", "agent")}},
                          "application/merge-patch+json", "default")
    assert changed["metadata"]["annotations"][TEMPLATE_GENERATION] == "2"
    assert changed["metadata"]["generation"] == 2
    wait_for(lambda: revision_annotations() == ["1", "2"], what="the second ControllerRevision")
    # k8s_rollback: the revision whose annotation is generation - 1, its data as a strategic merge patch
    first = next(item for item in store.list("controllerrevisions", "default")[0]
                 if item["metadata"]["annotations"][TEMPLATE_GENERATION] == "1")
    rolled = store.patch("daemonsets", "agent", first["data"], STRATEGIC_MERGE_PATCH, "default")
    assert rolled["metadata"]["annotations"][TEMPLATE_GENERATION] == "3"
    assert rolled["spec"]["template"]["spec"]["containers"][0]["image"] == "agent:1"


def test_a_paused_deployment_says_so_and_does_not_roll_out_a_changed_template(cluster):
    """The controller's checkPausedConditions: Progressing Unknown, reason DeploymentPaused (what kubernetes.core's
    k8s_waiter waits for); no new ReplicaSet while paused; resumed, it rolls out."""
    store = cluster.store
    store.create("deployments", {"metadata": {"name": "web", "namespace": "default"},
                                 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                                          "template": template("nginx:1.17")}})
    wait_for(lambda: deployment_revision(store) == "1", what="revision 1")
    store.patch("deployments", "web", {"spec": {"paused": True, "template": template("nginx:1.18")}},
                "application/merge-patch+json", "default")

    def progressing():
        conditions = (store.get("deployments", "web", "default").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Progressing"), {})
    condition = wait_for(lambda: progressing().get("reason") == "DeploymentPaused" and progressing(),
                         what="Progressing DeploymentPaused")
    assert condition["status"] == "Unknown" and condition["message"] == "Deployment is paused"
    time.sleep(0.5)
    assert list(revisions(store)) == ["nginx:1.17"]
    store.patch("deployments", "web", {"spec": {"paused": False}}, "application/merge-patch+json", "default")
    wait_for(lambda: deployment_revision(store) == "2" and progressing().get("status") == "True",
             what="resumed: the new template rolled out")
