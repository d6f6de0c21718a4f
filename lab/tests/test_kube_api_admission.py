"""ServiceAccount admission as kube-apiserver's plugin does it, seen through real kubectl: a pod naming a
ServiceAccount its namespace lacks is refused (403), every namespace has its ``default`` ServiceAccount, and a
Deployment whose pods are refused shows ``ReplicaFailure`` on its ReplicaSet while its rollout never ends."""
from __future__ import annotations

import json

import pytest
import yaml

from test_kube_cluster_kubectl import KUBECTL, eventually, kubectl, lab  # noqa: F401 - lab is a fixture

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smi", "namespace": "default"},
       "spec": {"serviceAccountName": "gpu-operator", "containers": [{"name": "smi", "image": "cuda:12"}]}}


def test_pod_with_a_missing_service_account_is_forbidden(lab):
    refused = kubectl(lab, "apply", "-f", "-", stdin=json.dumps(POD), check=False)
    assert refused.returncode != 0
    assert ('pods "smi" is forbidden: error looking up service account default/gpu-operator: '
            'serviceaccount "gpu-operator" not found') in refused.stderr
    kubectl(lab, "create", "serviceaccount", "gpu-operator")
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(POD))
    pod = json.loads(kubectl(lab, "get", "pod", "smi", "-o", "json").stdout)
    assert pod["spec"]["serviceAccountName"] == pod["spec"]["serviceAccount"] == "gpu-operator"


def test_every_namespace_has_a_default_service_account_that_pods_get(lab):
    kubectl(lab, "create", "namespace", "training")
    accounts = kubectl(lab, "get", "serviceaccounts", "-n", "training", "-o", "name").stdout.split()
    assert accounts == ["serviceaccount/default"]
    kubectl(lab, "delete", "serviceaccount", "default", "-n", "training")
    assert kubectl(lab, "get", "serviceaccount", "default", "-n", "training", "-o", "name").stdout.strip() == \
        "serviceaccount/default", "the controller-manager recreates it"
    kubectl(lab, "run", "probe", "-n", "training", "--image=busybox", "--restart=Never")
    assert kubectl(lab, "get", "pod", "probe", "-n", "training", "-o",
                   "jsonpath={.spec.serviceAccountName}").stdout == "default"


def test_deployment_whose_pods_are_refused_reports_replica_failure_and_its_rollout_times_out(lab):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "default"},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "infer"}},
                           "template": {"metadata": {"labels": {"app": "infer"}},
                                        "spec": {"serviceAccountName": "missing",
                                                 "containers": [{"name": "infer", "image": "triton:24.08"}]}}}}
    kubectl(lab, "apply", "-f", "-", stdin=yaml.safe_dump(deployment))
    rollout = kubectl(lab, "rollout", "status", "deployment/infer", "--timeout=3s", check=False)
    assert rollout.returncode != 0 and "timed out waiting for the condition" in rollout.stderr

    def replica_failure():
        replica_sets = json.loads(kubectl(lab, "get", "rs", "-l", "app=infer", "-o", "json").stdout)["items"]
        conditions = [(rs.get("status") or {}).get("conditions") or [] for rs in replica_sets]
        return [c for cs in conditions for c in cs if c["type"] == "ReplicaFailure"]
    (condition,) = eventually(replica_failure, what="ReplicaFailure on the ReplicaSet")
    assert condition["status"] == "True" and condition["reason"] == "FailedCreate"
    assert condition["message"].endswith('is forbidden: error looking up service account default/missing: '
                                         'serviceaccount "missing" not found')
    assert kubectl(lab, "get", "pods", "-l", "app=infer", "-o", "name").stdout.strip() == ""
    events = kubectl(lab, "get", "events", "--field-selector", "reason=FailedCreate", "-o", "json").stdout
    assert "Error creating: pods" in events

    kubectl(lab, "create", "serviceaccount", "missing")
    kubectl(lab, "rollout", "status", "deployment/infer", "--timeout=30s")
    assert not replica_failure(), "the condition goes once pods can be created"
