"""The change kind `kubelet_config` of `gpuops.nvidia.change` over real SSH and HTTPS against the fleet twin.

The twin's kubelet reads its KubeletConfiguration at start and refuses to start where the real kubelet does: a
CPU manager policy other than the one its checkpoint (`/var/lib/kubelet/cpu_manager_state`) names, the static
policy without a CPU reservation, image GC thresholds out of order. A refused kubelet posts nothing, so its Node
goes NotReady; once it starts again its device plugin registers again.
"""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from upgrade_helpers import OLD, Fleet

pytestmark = pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)")

CONFIG = "/var/lib/kubelet/config.yaml"
STATE = "/var/lib/kubelet/cpu_manager_state"


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    """Three H100 nodes: a canary of one, then a batch of two."""
    state_dir = str(tmp_path_factory.mktemp("kubelet-config") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", OLD, "--boot-delay", "0.3")
    yield Fleet(lab, tmp_path_factory.mktemp("kubelet-config-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def ready(node: dict) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return condition["status"]
    return "missing"


def wait_node(fleet, name, predicate, timeout_s=30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        node = fleet.nodes()[name]
        if predicate(node) or time.monotonic() > deadline:
            return node
        time.sleep(0.5)


def test_the_twin_kubelet_refuses_a_cpu_manager_policy_its_checkpoint_does_not_name(fleet):
    """The twin itself, as an operator would find it: a policy change without the checkpoint's removal keeps the
    kubelet down and the Node NotReady; removing the checkpoint while the kubelet is stopped brings both back."""
    lab, name = fleet.lab, "gpu-node-03"
    original = lab.ssh(name, "cat %s" % CONFIG).stdout
    assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "none"
    try:
        lab.ssh(name, "printf 'cpuManagerPolicy: static\\nreservedSystemCPUs: \"0\"\\n' >> %s" % CONFIG)
        refused = lab.ssh(name, "systemctl restart kubelet", check=False)
        assert refused.returncode != 0
        assert lab.ssh(name, "systemctl is-active kubelet", check=False).stdout.strip() == "failed"
        log = lab.ssh(name, "cat /run/gpulab-systemd/kubelet.service.log").stdout
        assert 'configured policy "static" differs from state checkpoint policy "none"' in log
        node = wait_node(fleet, name, lambda node: ready(node) != "True")
        assert ready(node) == "Unknown", node["status"]
        lab.ssh(name, "systemctl stop kubelet && rm %s && systemctl start kubelet" % STATE)
        assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "static"
        node = wait_node(fleet, name, lambda node: ready(node) == "True"
                         and node["status"]["allocatable"].get("nvidia.com/gpu") == "8")
        assert ready(node) == "True" and node["status"]["allocatable"]["nvidia.com/gpu"] == "8", node["status"]
    finally:
        lab.ssh(name, "cat > %s <<'EOF'\n%sEOF\nsystemctl stop kubelet; rm -f %s; systemctl start kubelet"
                % (CONFIG, original, STATE), check=False)
    assert json.loads(lab.ssh(name, "cat %s" % STATE).stdout)["policyName"] == "none"
    assert ready(wait_node(fleet, name, lambda node: ready(node) == "True")) == "True"
