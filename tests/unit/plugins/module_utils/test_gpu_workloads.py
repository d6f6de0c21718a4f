# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# Pods from tests/unit/fixtures/k8s/pods_cuda_workloads_CONSTRUCTED.yaml, the node and the ResourceSlice from the
# fixtures beside it (PROVENANCE.md there); the admission policy from deploy/admission/.

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import gpu_workloads as gw

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "..", "fixtures", "k8s")
ADMISSION = os.path.join(HERE, "..", "..", "..", "..", "deploy", "admission")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as stream:
        return json.load(stream) if name.endswith(".json") else yaml.safe_load(stream)


PODS = fixture("pods_cuda_workloads_CONSTRUCTED.yaml")


def test_names_the_cuda_pods_without_a_gpu_limit_running_ones_first():
    found = gw.cuda_pods_without_gpu_limit(PODS)
    assert [(f["namespace"], f["pod"], f["severity"]) for f in found] == [
        ("ml", "notebook", "error"), ("ml", "trainer-7f9c8d-abcde", "error"), ("ml", "pending-tf", "warning")]
    trainer = found[1]
    assert trainer["node"] == "gpu-node-02" and trainer["case"] == 2
    assert trainer["reasons"] == [{"container": "pytorch", "why": "image", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]
    assert "ReplicaSet/trainer-7f9c8d" in trainer["remedy"] and "nvidia.com/gpu" in trainer["remedy"]
    assert found[0]["reasons"][0] == {"container": "jupyter", "why": "env", "env": "NVIDIA_VISIBLE_DEVICES",
                                      "value": "all"}


@pytest.mark.parametrize("image, cuda", [
    ("nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04", True),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", True),
    ("docker.io/pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", True),
    ("tensorflow/tensorflow:2.16.1-gpu", True),
    ("tensorflow/tensorflow:2.16.1", False),
    ("registry.example.com/ml/tritonserver:24.05", True),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.1", False),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.6-3.4.2-ubuntu22.04", False),
    ("nvcr.io/nvidia/gpu-operator:v24.3.0", False),
    ("nginx:1.27", False),
    ("", False),
])
def test_cuda_image_patterns(image, cuda):
    assert gw.is_cuda_image(image) is cuda


def test_a_gpu_limit_on_any_container_or_a_claim_or_a_finished_pod_is_no_finding():
    names = {f["pod"] for f in gw.cuda_pods_without_gpu_limit(PODS)}
    assert not names & {"cuda-vectoradd", "triton-0", "dra-pod", "done", "cpu-only"}
    pod = copy.deepcopy(PODS[1])
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0"
    assert gw.pod_finding(pod) is not None  # a zero limit asks for no GPU
    pod["spec"]["containers"].append({"name": "side", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}})
    assert gw.pod_finding(pod) is None


def test_env_values_that_hide_every_gpu_are_not_a_request():
    assert gw.gpu_env({"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "-1"},
                               {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}) == {}
    assert gw.gpu_env({"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]}) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert gw.gpu_env({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {}}}]}) == {
        "NVIDIA_VISIBLE_DEVICES": "(valueFrom)"}


def test_namespaces_filter():
    assert gw.cuda_pods_without_gpu_limit(PODS, namespaces=["serving", "default"]) == []


def test_nodes_served_by_the_device_plugin_and_dra_both():
    node = fixture("node_gpulab-twin_h100x8_ready.json")
    rs = fixture("resourceslice_v1_gpu-nvidia-com_CONSTRUCTED.json")
    assert gw.double_served_nodes([node], [rs]) == []  # the slice is on another node
    both = copy.deepcopy(node)
    both["metadata"]["name"] = rs["spec"]["nodeName"]
    found = gw.double_served_nodes([both, node], [rs])
    assert [(f["node"], f["device_plugin_gpus"], f["dra_devices"]) for f in found] == [
        (rs["spec"]["nodeName"], "8", len(rs["spec"]["devices"]))]
    assert "devicePlugin.enabled=false" in found[0]["remedy"]
    both["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    assert gw.double_served_nodes([both], [rs]) == []
    other = copy.deepcopy(rs)
    other["spec"]["driver"] = "tpu.example.com"
    both["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    assert gw.double_served_nodes([both], [other]) == []


def test_admission_policy_warns_first_and_requires_a_gpu_limit_on_labelled_pods():
    with open(os.path.join(ADMISSION, "10-require-gpu-limit-policy.yaml")) as stream:
        policy = yaml.safe_load(stream)
    with open(os.path.join(ADMISSION, "20-require-gpu-limit-binding.yaml")) as stream:
        binding = yaml.safe_load(stream)
    assert policy["kind"] == "ValidatingAdmissionPolicy" and binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    spec = policy["spec"]
    assert spec["matchConstraints"]["objectSelector"] == {"matchLabels": {"gpuops.nvidia/cuda-workload": "true"}}
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["pods"]
    (validation,) = spec["validations"]
    expression = validation["expression"]
    for needle in ("object.spec.containers.all(", "'nvidia.com/gpu'", "startsWith('nvidia.com/mig-')",
                   "object.spec.resourceClaims"):
        assert needle in expression
    assert expression.count("(") == expression.count(")")
    assert "nvidia.com/gpu" in validation["messageExpression"]
