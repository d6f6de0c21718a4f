"""ValidatingAdmissionPolicy as kube-apiserver evaluates it, its CEL run by a real CEL engine (cel-python): the
shipped case-2 policy (deploy/admission/) applied with real kubectl warns first (the pod is admitted, kubectl
prints ``Warning: ...``, the request carries the audit annotation), then, with its binding switched to Deny as
docs/diagnose.md says, refuses a labelled CUDA pod without a GPU limit and admits the one with it. The store-level
tests pin the matching rules (selectors, matchConditions, variables, UPDATE, failurePolicy) on the twin's store."""
from __future__ import annotations

import copy
import json
import os
import re

import pytest
import yaml

from gpulab.kube.api import admission_policy
from gpulab.kube.api.errors import ApiError
from gpulab.kube.api.recorder import read_records
from gpulab.kube.api.store import Store
from test_kube_cluster_kubectl import KUBECTL, kubectl, lab  # noqa: F401 - lab is a fixture

ADMISSION = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "admission")
POLICY_NAME = "gpuops-require-gpu-limit"
LABELS = {"gpuops.nvidia/cuda-workload": "true"}
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def _pod(name, limits=None, labels=LABELS, namespace="default"):
    container = {"name": "cuda", "image": CUDA_IMAGE, "command": ["sleep", "3600"]}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"containers": [container]}}


def _message(name, containers="cuda"):
    return ("pod %s is labelled gpuops.nvidia/cuda-workload=true but container(s) %s set no nvidia.com/gpu or "
            "nvidia.com/mig-* limit: the scheduler will not count the GPU" % (name, containers))


def _shipped():
    documents = []
    for name in sorted(os.listdir(ADMISSION)):
        with open(os.path.join(ADMISSION, name)) as stream:
            documents.extend(doc for doc in yaml.safe_load_all(stream) if doc)
    return documents


# ------------------------------------------------------------------ through kubectl

@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_shipped_policy_warns_first_then_denies_a_cuda_pod_without_a_gpu_limit(lab):
    applied = kubectl(lab, "apply", "-f", ADMISSION)
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/%s created" % POLICY_NAME in applied.stdout
    assert "validatingadmissionpolicybinding.admissionregistration.k8s.io/%s created" % POLICY_NAME in applied.stdout
    assert kubectl(lab, "get", "validatingadmissionpolicybindings", "-o", "name").stdout.split() == \
        ["validatingadmissionpolicybinding.admissionregistration.k8s.io/" + POLICY_NAME]

    # Warn + Audit: admitted, the warning printed, the audit annotation on the request's record
    warned = kubectl(lab, "apply", "-f", "-", stdin=json.dumps(_pod("train-nolimit")))
    assert "pod/train-nolimit created" in warned.stdout
    assert ("Warning: Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s"
            % (POLICY_NAME, POLICY_NAME, _message("train-nolimit"))) in warned.stderr
    assert kubectl(lab, "get", "pod", "train-nolimit", "-o", "name").stdout.strip() == "pod/train-nolimit"
    audited = [record["annotations"][admission_policy.AUDIT_ANNOTATION] for record in read_records(lab.records_path)
               if record["record"] == "request" and record.get("annotations")]
    (failure,) = json.loads(audited[-1])
    assert failure == {"message": _message("train-nolimit"), "policy": POLICY_NAME, "binding": POLICY_NAME,
                       "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}
    with_limit = kubectl(lab, "apply", "-f", "-", stdin=json.dumps(_pod("train-gpu", {"nvidia.com/gpu": "1"})))
    assert "pod/train-gpu created" in with_limit.stdout and "Warning" not in with_limit.stderr
    unlabelled = kubectl(lab, "apply", "-f", "-", stdin=json.dumps(_pod("plain", labels=None)))
    assert "Warning" not in unlabelled.stderr

    # Deny, as docs/diagnose.md switches it
    kubectl(lab, "patch", "validatingadmissionpolicybinding", POLICY_NAME, "--type", "merge", "-p",
            '{"spec":{"validationActions":["Deny"]}}')
    refused = kubectl(lab, "apply", "-f", "-", stdin=json.dumps(_pod("serve-nolimit")), check=False)
    assert refused.returncode != 0
    assert ('The pods "serve-nolimit" is invalid: : ValidatingAdmissionPolicy \'%s\' with binding \'%s\' denied '
            'request: %s' % (POLICY_NAME, POLICY_NAME, _message("serve-nolimit"))) in refused.stderr
    assert kubectl(lab, "get", "pod", "serve-nolimit", "--ignore-not-found", "-o", "name").stdout.strip() == ""
    admitted = kubectl(lab, "apply", "-f", "-",
                       stdin=json.dumps(_pod("serve-mig", {"nvidia.com/mig-1g.10gb": "1"})))
    assert "pod/serve-mig created" in admitted.stdout and "Warning" not in admitted.stderr


# ------------------------------------------------------------------ the store's rules

def _store_with(policy, actions=("Deny",), match_resources=None):
    store = Store()
    store.create("validatingadmissionpolicies", policy)
    binding = {"metadata": {"name": "b"}, "spec": {"policyName": policy["metadata"]["name"],
                                                   "validationActions": list(actions)}}
    if match_resources is not None:
        binding["spec"]["matchResources"] = match_resources
    store.create("validatingadmissionpolicybindings", binding)
    return store


def _shipped_store(actions=("Deny",), match_resources=None):
    policy = next(doc for doc in _shipped() if doc["kind"] == "ValidatingAdmissionPolicy")
    return _store_with(policy, actions, match_resources)


def test_every_container_needs_the_limit_and_a_dra_claim_is_enough():
    store = _shipped_store()
    pod = _pod("two", {"nvidia.com/gpu": "1"})
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    with pytest.raises(ApiError) as refused:
        store.create("pods", pod, "default")
    assert refused.value.code == 422 and refused.value.reason == "Invalid"
    assert refused.value.message.endswith(_message("two", "sidecar"))
    pod["metadata"]["name"] = "claimed"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    assert store.create("pods", pod, "default")["metadata"]["name"] == "claimed"


def test_an_update_that_labels_a_pod_without_a_limit_is_denied_and_nothing_is_stored():
    store = _shipped_store()
    store.create("pods", _pod("later", labels=None), "default")   # not labelled: the policy does not match
    labelled = copy.deepcopy(store.get("pods", "later", "default"))
    labelled["metadata"]["labels"] = dict(LABELS)
    with pytest.raises(ApiError, match=re.escape("denied request: " + _message("later"))):
        store.update("pods", labelled, "default")
    with pytest.raises(ApiError, match="denied request"):
        store.patch("pods", "later", {"metadata": {"labels": LABELS}}, "application/merge-patch+json", "default")
    assert not store.get("pods", "later", "default")["metadata"].get("labels")


def test_binding_namespace_selector_limits_the_policy_to_labelled_namespaces():
    store = _shipped_store(match_resources={"namespaceSelector": {"matchLabels": {"gpu": "enforced"}}})
    store.create("namespaces", {"metadata": {"name": "research"}})
    store.create("namespaces", {"metadata": {"name": "prod", "labels": {"gpu": "enforced"}}})
    store.create("pods", _pod("free", namespace="research"), "research")
    with pytest.raises(ApiError, match='pods "held" is forbidden'):
        store.create("pods", _pod("held", namespace="prod"), "prod")


def test_match_conditions_variables_and_request_are_evaluated_by_cel():
    policy = {"metadata": {"name": "images"},
              "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "matchConditions": [{"name": "not-kube-system",
                                            "expression": "request.namespace != 'kube-system'"}],
                       "variables": [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                                     {"name": "untagged",
                                      "expression": "variables.images.filter(i, !i.contains(':'))"}],
                       "validations": [{"expression": "size(variables.untagged) == 0",
                                        "messageExpression": "'untagged: ' + variables.untagged.join(', ')",
                                        "reason": "Forbidden"}]}}
    store = _store_with(policy)
    untagged = _pod("untagged", labels=None)
    untagged["spec"]["containers"][0]["image"] = "busybox"
    with pytest.raises(ApiError) as refused:
        store.create("pods", untagged, "default")
    assert refused.value.code == 403 and refused.value.message.endswith("denied request: untagged: busybox")
    store.create("pods", dict(untagged, metadata={"name": "system"}), "kube-system")   # the condition skips it
    store.create("pods", _pod("tagged", labels=None), "default")


def test_failure_policy_decides_what_an_expression_error_does_and_bad_cel_is_refused_on_write():
    policy = {"metadata": {"name": "broken"},
              "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "validations": [{"expression": "object.spec.nodeName == 'gpu-0'",
                                        "message": "pinned to gpu-0"}]}}
    with pytest.raises(ApiError, match="denied request: expression evaluation failed"):
        _store_with(policy).create("pods", _pod("unpinned", labels=None), "default")
    ignored = copy.deepcopy(policy)
    ignored["spec"]["failurePolicy"] = "Ignore"
    _store_with(ignored).create("pods", _pod("unpinned", labels=None), "default")
    bad = copy.deepcopy(policy)
    bad["spec"]["validations"][0]["expression"] = "object.spec.("
    with pytest.raises(ApiError) as refused:
        Store().create("validatingadmissionpolicies", bad)
    assert refused.value.code == 422 and "spec.validations[0].expression: Invalid value" in refused.value.message


def test_warn_and_audit_are_collected_for_the_request_and_admit_it():
    store = _shipped_store(actions=("Warn", "Audit"))
    with admission_policy.request_scope() as outcome:
        store.create("pods", _pod("warned"), "default")
    assert outcome["warnings"] == ["Validation failed for ValidatingAdmissionPolicy '%s' with binding 'b': %s"
                                   % (POLICY_NAME, _message("warned"))]
    assert json.loads(admission_policy.audit_annotations(outcome)[admission_policy.AUDIT_ANNOTATION])[0]["binding"] \
        == "b"
    assert store.get("pods", "warned", "default")["metadata"]["name"] == "warned"
