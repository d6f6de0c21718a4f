"""Client-side ``kubectl apply`` against the API twin: kubectl computes a three-way strategic merge patch from
``kubectl.kubernetes.io/last-applied-configuration``, the manifest and the live object (with
``$setElementOrder``, ``$retainKeys`` and ``$patch: delete`` directives); the server must apply it so that a
changed or removed field is reported ``configured`` and lands, and an unchanged manifest reports ``unchanged``."""
from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from test_kube_api_kubectl import KUBECTL, Twin

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "triton", "namespace": "default", "labels": {"app": "triton", "tier": "inference"}},
    "spec": {"selector": {"matchLabels": {"app": "triton"}},
             "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
             "template": {"metadata": {"labels": {"app": "triton"}}, "spec": {"containers": [{
                 "name": "triton", "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


@pytest.fixture
def twin(tmp_path):
    twin = Twin(tmp_path)
    yield twin
    twin.server.stop()


def _apply(twin, document, *extra):
    result = subprocess.run([KUBECTL, "apply", "-f", "-"] + list(extra), input=yaml.safe_dump(document),
                            env=twin.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _live(twin):
    return json.loads(twin.kubectl("get", "deployment", "triton", "-o", "json").stdout)


def test_unchanged_manifest_is_unchanged_and_live_only_fields_survive(twin):
    assert _apply(twin, DEPLOYMENT) == "deployment.apps/triton created"
    assert _apply(twin, DEPLOYMENT) == "deployment.apps/triton unchanged"
    twin.kubectl("scale", "deployment", "triton", "--replicas=3")
    assert _apply(twin, DEPLOYMENT) == "deployment.apps/triton unchanged", "replicas is not in the manifest"
    assert _live(twin)["spec"]["replicas"] == 3


def test_changed_and_removed_fields_are_configured_with_the_directives_kubectl_sends(twin):
    _apply(twin, DEPLOYMENT)
    changed = copy.deepcopy(DEPLOYMENT)
    container = changed["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "nvcr.io/nvidia/tritonserver:24.09-py3"
    container["env"] = [{"name": "C", "value": "3"}, {"name": "A", "value": "10"}]   # B removed, order changed
    del changed["metadata"]["labels"]["tier"]
    changed["spec"]["strategy"] = {"type": "Recreate"}   # kubectl sends $retainKeys and rollingUpdate: null
    assert _apply(twin, changed) == "deployment.apps/triton configured"
    live = _live(twin)
    live_container = live["spec"]["template"]["spec"]["containers"][0]
    assert live_container["image"] == "nvcr.io/nvidia/tritonserver:24.09-py3"
    assert live_container["env"] == [{"name": "C", "value": "3"}, {"name": "A", "value": "10"}]
    assert live["metadata"]["labels"] == {"app": "triton"}
    assert live["spec"]["strategy"] == {"type": "Recreate"}
    assert live["metadata"]["generation"] == 2
    twin.kubectl("patch", "deployment", "triton", "-p", '{"spec":{"strategy":{"type":"RollingUpdate"}}}')
    assert _live(twin)["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": "25%", "maxSurge": "25%"}, \
        "the API server defaults rollingUpdate for that type"
    twin.kubectl("patch", "deployment", "triton", "-p", '{"spec":{"strategy":{"$retainKeys":["type"],'
                 '"type":"Recreate","rollingUpdate":null}}}')
    last_applied = json.loads(live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last_applied["spec"]["strategy"] == {"type": "Recreate"}
    assert _apply(twin, changed) == "deployment.apps/triton unchanged"

    back = copy.deepcopy(DEPLOYMENT)
    assert _apply(twin, back) == "deployment.apps/triton configured"
    live = _live(twin)
    assert live["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert [env["name"] for env in live["spec"]["template"]["spec"]["containers"][0]["env"]] == ["A", "B", "C"]
    assert _apply(twin, back) == "deployment.apps/triton unchanged"


def test_a_field_removed_from_the_manifest_is_removed_and_defaulted_again(twin):
    with_replicas = copy.deepcopy(DEPLOYMENT)
    with_replicas["spec"]["replicas"] = 4
    with_replicas["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    _apply(twin, with_replicas)
    assert _live(twin)["spec"]["replicas"] == 4
    assert _apply(twin, DEPLOYMENT) == "deployment.apps/triton configured"
    live = _live(twin)
    assert live["spec"]["replicas"] == 1, "a removed spec.replicas is defaulted again, as the API server does"
    assert "nodeSelector" not in live["spec"]["template"]["spec"]
