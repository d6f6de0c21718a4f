"""Kubernetes protobuf request bodies (what kubectl >= 1.32 sends for built-in kinds) decode to their JSON form,
with field numbers taken from the descriptors embedded in the kubectl binary."""
from __future__ import annotations

import pytest

from gpulab.kube.api import protobuf

pytestmark = pytest.mark.skipif(not protobuf.default_schema().messages,
                                reason="no kubectl binary with protobuf descriptors on this machine")


def _field(number, payload):
    """A length-delimited protobuf field (payloads here are shorter than 128 bytes)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_protobuf_eviction_body_decodes_with_the_descriptors_embedded_in_kubectl():
    object_meta = _field(1, b"train-0") + _field(3, b"default")
    delete_options = bytes([1 << 3 | 0, 0])   # gracePeriodSeconds: 0 (a pointer field: zero is meaningful)
    eviction = _field(1, object_meta) + _field(2, delete_options)
    envelope = protobuf.MAGIC + _field(1, _field(1, b"policy/v1") + _field(2, b"Eviction")) + _field(2, eviction)
    assert protobuf.decode_k8s_protobuf(envelope) == {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 0}}


def test_protobuf_maps_of_quantities_and_int_or_string_decode_to_their_json_form():
    quantity = _field(1, b"1")
    limits_entry = _field(1, b"nvidia.com/gpu") + _field(2, quantity)
    resources = _field(1, limits_entry)                     # ResourceRequirements.limits
    container = _field(1, b"main") + _field(2, b"cuda:12") + _field(8, resources)
    pod_spec = _field(2, container)                          # PodSpec.containers
    pod = _field(1, _field(1, b"smi")) + _field(2, pod_spec)
    envelope = protobuf.MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Pod")) + _field(2, pod)
    decoded = protobuf.decode_k8s_protobuf(envelope)
    assert decoded["spec"]["containers"] == [{"name": "main", "image": "cuda:12",
                                              "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    int_or_string = bytes([1 << 3 | 0, 1]) + _field(3, b"25%")   # IntOrString{type: 1 (string), strVal}
    pdb = _field(1, _field(1, b"train")) + _field(2, _field(3, int_or_string))   # spec.maxUnavailable
    type_meta = _field(1, b"policy/v1") + _field(2, b"PodDisruptionBudget")
    envelope = protobuf.MAGIC + _field(1, type_meta) + _field(2, pdb)
    assert protobuf.decode_k8s_protobuf(envelope)["spec"] == {"maxUnavailable": "25%"}


def test_descriptors_cover_the_kinds_kubectl_creates():
    schema = protobuf.default_schema()
    for api_version, kind in (("apps/v1", "Deployment"), ("policy/v1", "PodDisruptionBudget"),
                              ("policy/v1", "Eviction"), ("v1", "Namespace"), ("v1", "ConfigMap"),
                              ("v1", "Pod"), ("v1", "DeleteOptions")):
        assert schema.message_for(api_version, kind) is not None, kind


def test_body_without_the_magic_prefix_is_rejected():
    with pytest.raises(protobuf.ProtobufError):
        protobuf.decode_k8s_protobuf(b'{"kind": "Pod"}')
