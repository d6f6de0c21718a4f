"""The twin's MIG Manager (`gpulab.kube.sim.migmanager`): what a mig-parted layout turns into on a node's GPUs,
and the Node's `nvidia.com/mig.config.state` as it applies one (in process: the real Store and controller manager,
a node view that records the nvidia-smi commands; the commands themselves on a node twin are
test_runbook_upgrade_mig_operator.py's)."""
from __future__ import annotations

import time

from gpulab.kube.api.store import Store
from gpulab.kube.sim.controllers import ControllerManager
from gpulab.kube.sim.driverpod import NAMESPACE
from gpulab.kube.sim.migmanager import (CAPABLE_LABEL, CONFIG_KEY, CONFIG_LABEL, DEFAULT_CONFIGS, DEPLOY_LABEL,
                                        STATE_LABEL, MigManager, config_map_manifest, install, parse_configs,
                                        plan_commands)
from gpulab.kube.testing import FakeNodeView


def gpus(count=2, enabled=(), devices=None):
    devices = devices or {}
    return [{"index": index, "mig_enabled": index in enabled,
             "mig_devices": [{"profile": profile} for profile in devices.get(index, [])]} for index in range(count)]


def test_the_default_config_map_holds_mig_parted_named_layouts():
    configs = parse_configs(config_map_manifest()["data"][CONFIG_KEY])
    assert {"all-disabled", "all-1g.10gb", "all-balanced"} <= set(configs)
    assert configs["all-1g.10gb"] == DEFAULT_CONFIGS["all-1g.10gb"]


def test_a_gpu_out_of_mig_mode_is_switched_reset_and_partitioned():
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "1g.10gb": 2}}]
    assert plan_commands(layout, gpus()) == [
        ["nvidia-smi", "-i", "0", "-mig", "1"], ["nvidia-smi", "-i", "0", "-r"],
        ["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,1g.10gb,1g.10gb", "-C"]]


def test_a_gpu_already_as_the_layout_wants_is_left_alone_and_a_different_one_is_redone():
    layout = [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}}]
    current = gpus(enabled=(0, 1), devices={0: ["3g.40gb", "4g.40gb"], 1: ["7g.80gb"]})
    assert plan_commands(layout, current) == [
        ["nvidia-smi", "mig", "-i", "1", "-dci"], ["nvidia-smi", "mig", "-i", "1", "-dgi"],
        ["nvidia-smi", "mig", "-i", "1", "-cgi", "4g.40gb,3g.40gb", "-C"]]


def test_all_disabled_turns_mig_mode_off_where_it_is_on():
    assert plan_commands(DEFAULT_CONFIGS["all-disabled"], gpus(enabled=(1,), devices={1: ["7g.80gb"]})) == [
        ["nvidia-smi", "-i", "1", "-mig", "0"], ["nvidia-smi", "-i", "1", "-r"]]


class RecordingView(FakeNodeView):
    """A node whose nvidia-smi answers `rc` to every command and keeps the argument lists it got."""

    def __init__(self, name: str, rc: int = 0):
        super().__init__(name)
        self.rc = rc
        self.argvs = []

    def run(self, argv, timeout: float = 30):
        self.argvs.append(list(argv))
        return self.rc, "", "" if self.rc == 0 else "Unable to enable MIG Mode: Unknown Error\n"


class Kubelet:
    def __init__(self, view):
        self.view, self.name = view, view.name


def mig_manager_for(view):
    manager = ControllerManager(Store(), kubelets=[Kubelet(view)])
    manager.informer.start()
    manager.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    install(manager)
    manager.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": view.name, "labels": {
        DEPLOY_LABEL: "true", CAPABLE_LABEL: "true"}}})
    return manager, MigManager(manager)


def settle(manager, mig, until, timeout_s=10.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        mig.sync(time.time())
        node = manager.informer.get("nodes", manager.kubelets[0].name)
        if until(node):
            return node
        time.sleep(0.02)
    raise AssertionError("MIG Manager did not settle: %r" % (node["metadata"].get("labels"),))


def label(manager, value) -> None:
    manager.patch("nodes", manager.informer.get("nodes", manager.kubelets[0].name),
                  {"metadata": {"labels": {CONFIG_LABEL: value}}})


def events(manager) -> list:
    items, _version = manager.store.list("events", namespace="default")
    return [(event["reason"], event["message"])
            for event in sorted(items, key=lambda event: int(event["metadata"]["resourceVersion"]))]


def test_a_labelled_node_gets_its_layout_then_success_and_a_new_label_applies_again():
    view = RecordingView("gpu-1")
    manager, mig = mig_manager_for(view)
    label(manager, "all-7g.80gb")
    node = settle(manager, mig, lambda node: node["metadata"]["labels"].get(STATE_LABEL) == "success")
    assert len(view.argvs) == 8 * 3                       # -mig 1, -r, mig -cgi 7g.80gb -C on each GPU
    assert view.argvs[:3] == [["nvidia-smi", "-i", "0", "-mig", "1"], ["nvidia-smi", "-i", "0", "-r"],
                              ["nvidia-smi", "mig", "-i", "0", "-cgi", "7g.80gb", "-C"]]
    assert [reason for reason, _ in events(manager)] == ["MigConfigApplied"]
    mig.sync(time.time())
    assert len(view.argvs) == 24                          # nothing changed: not applied again
    label(manager, "no-such-layout")
    node = settle(manager, mig, lambda node: node["metadata"]["labels"].get(STATE_LABEL) == "failed")
    assert events(manager)[-1][0] == "MigConfigFailed" and "no-such-layout not found" in events(manager)[-1][1]
    assert node["metadata"]["labels"][CONFIG_LABEL] == "no-such-layout"


def test_a_failing_nvidia_smi_leaves_the_state_failed_with_its_error_in_an_event():
    view = RecordingView("gpu-1", rc=3)
    manager, mig = mig_manager_for(view)
    label(manager, "all-balanced")
    settle(manager, mig, lambda node: node["metadata"]["labels"].get(STATE_LABEL) == "failed")
    assert len(view.argvs) == 1
    reason, message = events(manager)[-1]
    assert reason == "MigConfigFailed" and "Unknown Error" in message and "nvidia-smi -i 0 -mig 1" in message
