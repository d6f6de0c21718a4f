"""CustomResourceDefinitions served by the API twin as kube-apiserver serves them, through real kubectl: the
GPU Operator's ClusterPolicy and NVIDIADriver and medik8s' NodeMaintenance are installed from their real
manifests (``fixtures/crds/`` and ``gpulab/kube/sim/gpu_operator_crds/``, see their PROVENANCE.md), then their objects get the schema's defaults, are refused
with the server's field errors, print their ``additionalPrinterColumns`` and keep ``status`` apart."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from test_kube_api_kubectl import KUBECTL, Twin

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

CRDS = os.path.join(os.path.dirname(__file__), "fixtures", "crds")
OPERATOR_CRDS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "gpulab", "kube", "sim", "gpu_operator_crds")
CLUSTER_POLICY_SECTIONS = ("daemonsets", "dcgm", "dcgmExporter", "devicePlugin", "driver", "gfd",
                           "nodeStatusExporter", "operator", "toolkit")
RESERVATION_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gpureservations.lab.gpuops.io"},
    "spec": {"group": "lab.gpuops.io", "scope": "Namespaced",
             "names": {"plural": "gpureservations", "singular": "gpureservation", "kind": "GPUReservation",
                       "shortNames": ["gres"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "additionalPrinterColumns": [
                               {"name": "GPUs", "type": "integer", "jsonPath": ".spec.gpus"},
                               {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["gpus"], "properties": {
                                   "gpus": {"type": "integer"}, "model": {"type": "string", "default": "H100"}}},
                               "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}}


@pytest.fixture
def twin(tmp_path):
    twin = Twin(tmp_path)
    twin.kubectl("apply", "-f", CRDS, "-f", OPERATOR_CRDS)
    yield twin
    twin.server.stop()


def _apply(twin, document, *extra, check=True):
    result = subprocess.run([KUBECTL, "apply", "-f", "-"] + list(extra), input=yaml.safe_dump(document), env=twin.env,
                            capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def _cluster_policy(**spec_overrides):
    spec = {section: {} for section in CLUSTER_POLICY_SECTIONS}
    spec.update(spec_overrides)
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec}


def _rows(output):
    return [line.split() for line in output.strip().splitlines()]


def test_real_crd_manifests_are_established_and_their_resources_discovered(twin):
    twin.kubectl("wait", "--for", "condition=established", "--timeout=10s", "crd/clusterpolicies.nvidia.com",
                 "crd/nvidiadrivers.nvidia.com", "crd/nodemaintenances.nodemaintenance.medik8s.io")
    resources = _rows(twin.kubectl("api-resources", "--api-group=nvidia.com").stdout)
    assert resources[1:] == [["clusterpolicies", "nvidia.com/v1", "false", "ClusterPolicy"],
                             ["nvidiadrivers", "nvd,nvdriver,nvdrivers", "nvidia.com/v1alpha1", "false",
                              "NVIDIADriver"]]
    crd = json.loads(twin.kubectl("get", "crd", "nodemaintenances.nodemaintenance.medik8s.io", "-o", "json").stdout)
    assert crd["status"]["acceptedNames"]["kind"] == "NodeMaintenance"
    assert crd["status"]["storedVersions"] == ["v1beta1"]
    assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"] == ["nodeName"]
    assert "unchanged" in twin.kubectl("apply", "-f", CRDS).stdout


def test_cluster_policy_gets_its_schema_defaults_and_missing_sections_are_refused(twin):
    refused = _apply(twin, {**_cluster_policy(), "spec": {"operator": {}, "daemonsets": {}}}, check=False)
    assert refused.returncode != 0
    assert 'The ClusterPolicy "cluster-policy" is invalid' in refused.stderr
    for section in ("dcgm", "driver", "toolkit"):
        assert "spec.%s: Required value" % section in refused.stderr
    strict = _apply(twin, _cluster_policy(unknownSection={"x": 1}), check=False)
    assert 'strict decoding error: unknown field "spec.unknownSection"' in strict.stderr, \
        "kubectl asks for fieldValidation=Strict by default"
    _apply(twin, _cluster_policy(unknownSection={"x": 1}), "--validate=false")
    policy = json.loads(twin.kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    assert policy["spec"]["driver"]["kernelModuleType"] == "auto"
    assert policy["spec"]["operator"]["runtimeClass"] == "nvidia"
    assert policy["spec"]["daemonsets"]["updateStrategy"] == "RollingUpdate"
    assert "unknownSection" not in policy["spec"], "fields the structural schema does not know are pruned"


def test_status_is_a_subresource_and_printer_columns_show_it(twin):
    _apply(twin, {**_cluster_policy(), "status": {"state": "ready"}})
    assert "status" not in json.loads(twin.kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    twin.kubectl("patch", "clusterpolicy", "cluster-policy", "--subresource=status", "--type=merge",
                 "-p", '{"status":{"state":"ready"}}')
    rows = _rows(twin.kubectl("get", "clusterpolicies").stdout)
    assert rows[0] == ["NAME", "STATUS", "AGE"] and rows[1][:2] == ["cluster-policy", "ready"]
    bad = twin.kubectl("patch", "clusterpolicy", "cluster-policy", "--subresource=status", "--type=merge",
                       "-p", '{"status":{"state":"upgrading"}}', check=False)
    assert 'status.state: Unsupported value: "upgrading": supported values: "ignored", "ready", "notReady"' \
        in bad.stderr
    policy = json.loads(twin.kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    assert policy["metadata"]["generation"] == 1, "status writes do not bump the generation"
    twin.kubectl("patch", "clusterpolicy", "cluster-policy", "--type=merge", "-p",
                 '{"spec":{"driver":{"version":"570.172.08"}},"status":{"state":"notReady"}}')
    policy = json.loads(twin.kubectl("get", "clusterpolicy", "cluster-policy", "-o", "json").stdout)
    assert policy["metadata"]["generation"] == 2 and policy["status"] == {"state": "ready"}

    _apply(twin, {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "default"},
                  "spec": {"driverType": "gpu"}})
    rows = _rows(twin.kubectl("get", "nvd").stdout)
    assert rows[0] == ["NAME", "STATUS", "DEFAULT", "AGE"] and rows[1][:2] == ["default", "false"]


def test_field_errors_are_those_of_the_api_server(twin):
    refused = _apply(twin, {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
                            "metadata": {"name": "gpu-0-upgrade"}, "spec": {"reason": "driver upgrade"}}, check=False)
    assert refused.returncode != 0
    assert 'The NodeMaintenance "gpu-0-upgrade" is invalid: spec.nodeName: Required value' in refused.stderr
    wrong_type = _apply(twin, {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
                               "metadata": {"name": "typo"}, "spec": {"default": "yes"}}, check=False)
    assert 'spec.default: Invalid value: "string": spec.default in body must be of type boolean: "string"' \
        in wrong_type.stderr
    _apply(twin, {"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
                  "metadata": {"name": "gpu-0-upgrade"}, "spec": {"nodeName": "gpu-0", "reason": "driver upgrade"}})
    assert _rows(twin.kubectl("get", "nm").stdout)[1][0] == "gpu-0-upgrade"
    strategic = twin.kubectl("patch", "nm", "gpu-0-upgrade", "-p", '{"spec":{"reason":"x"}}', check=False)
    assert "the body of the request was in an unknown format" in strategic.stderr, \
        "custom resources take no strategic merge patch"


def test_namespaced_crd_objects_live_and_die_with_their_namespace_and_crd(twin):
    _apply(twin, RESERVATION_CRD)
    twin.kubectl("create", "namespace", "training")
    reservation = {"apiVersion": "lab.gpuops.io/v1", "kind": "GPUReservation",
                   "metadata": {"name": "llm", "namespace": "training"}, "spec": {"gpus": 8}}
    _apply(twin, reservation)
    rows = _rows(twin.kubectl("get", "gres", "-A").stdout)
    assert rows[0] == ["NAMESPACE", "NAME", "GPUS", "AGE"] and rows[1][:3] == ["training", "llm", "8"]
    stored = json.loads(twin.kubectl("get", "gres", "llm", "-n", "training", "-o", "json").stdout)
    assert stored["spec"] == {"gpus": 8, "model": "H100"}
    reservation["spec"]["gpus"] = 4
    assert "gpureservation.lab.gpuops.io/llm configured" in _apply(twin, reservation).stdout
    assert "unchanged" in _apply(twin, reservation).stdout
    assert twin.kubectl("get", "gres", "-n", "default", "-o", "name").stdout == ""
    twin.kubectl("delete", "namespace", "training")
    assert twin.store.list("gpureservations.lab.gpuops.io")[0] == []
    twin.kubectl("create", "namespace", "training")
    _apply(twin, reservation)
    twin.kubectl("delete", "crd", "gpureservations.lab.gpuops.io")
    gone = twin.kubectl("get", "gpureservations", "-A", check=False)
    assert gone.returncode != 0, "kubectl's cached discovery asks, and the server answers 404"
    assert "the server could not find the requested resource" in gone.stderr
    assert "lab.gpuops.io" not in twin.kubectl("api-versions").stdout
