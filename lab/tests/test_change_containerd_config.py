"""The change kind containerd_config over the twin: the change runbook (`gpuops.nvidia.change`) run with real
ansible-playbook over real SSH on three GPU nodes whose real containerd (Debian's 1.6) is restarted through the
nodes' systemctl, verified with its `config dump` and a GPU pod. A node whose containerd runs creates a pod's
sandbox only as that containerd would (`gpulab.containerdcri`): a default runtime whose binary the node lacks
leaves every new pod in ContainerCreating, which is how a broken drop-in fails the canary.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from gpulab import containerdcri

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
MAIN = "/etc/containerd/config.toml"
RUNTIME = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"


# --- the twin's judgement of a sandbox, on containerd config dump's own layout ----------------------------------
def _dump(default=None, runtimes=None, plugin=CRI):
    table = {"runtimes": runtimes or {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {}}}}
    if default:
        table["default_runtime_name"] = default
    return {"version": 2, "plugins": {plugin: {"containerd": table}}}


def test_a_sandbox_is_refused_only_for_a_missing_runtime_or_its_missing_binary():
    present = {"runc", "/usr/bin/nvidia-container-runtime"}.__contains__
    nvidia = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RUNTIME}}
    runc = {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert containerdcri.sandbox_error(_dump(default="runc"), None, present) is None
    assert containerdcri.sandbox_error(_dump(), None, present) is None, "no default_runtime_name: runc"
    # a default runtime missing from the dump: containerd 1.x runs without its CRI plugin, every sandbox fails
    without_runc = _dump(default="runc", runtimes={"nvidia": nvidia})
    for handler in (None, "nvidia"):
        assert containerdcri.sandbox_error(without_runc, handler, present) == (
            "rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService")
    with_nvidia = _dump(default="nvidia", runtimes={"runc": runc, "nvidia": nvidia})
    assert containerdcri.sandbox_error(with_nvidia, None, present) is None
    assert containerdcri.sandbox_error(with_nvidia, None, "runc".__eq__).endswith(
        'exec: "%s": stat %s: no such file or directory: unknown' % (RUNTIME, RUNTIME))
    assert containerdcri.sandbox_error(_dump(default="runc"), "nvidia", present) == (
        'rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured')
    # containerd 2.x dumps version 3, the CRI runtime under its new plugin name
    v3 = _dump(default="nvidia", runtimes={"nvidia": nvidia}, plugin="io.containerd.cri.v1.runtime")
    assert containerdcri.sandbox_error(v3, None, "runc".__eq__) is not None
    assert containerdcri.judged("containerd.service\nkubelet.service\n")
    assert not containerdcri.judged("kubelet.service\n")


# --- the change kind over three nodes ------------------------------------------------------------------------
# A: nvidia the default runtime (its binary is on the nodes); B, C: the same with a binary the nodes lack (the GPU
# Operator's toolkit path, /opt/nvidia): `config dump` accepts them, every new pod sandbox then fails.
GOOD = {"set_as_default": True}
OPERATOR_PATH = {"set_as_default": True, "runtimes": [
    {"name": "nvidia", "binary": "/usr/local/nvidia/toolkit/nvidia-container-runtime"}]}
MISSING = "/opt/nvidia/bin/nvidia-container-runtime"
NOT_YET_THERE = {"set_as_default": True, "runtimes": [{"name": "nvidia", "binary": MISSING}]}


@pytest.fixture(scope="module")
def fleet(needs_root, tmp_path_factory):
    if collections_path() is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test` (or `make tree`)")
    from change_helpers import ChangeFleet
    state_dir = str(tmp_path_factory.mktemp("change-containerd") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", "550.54.15", "--boot-delay", "0.3")
    try:
        for node in NODES:
            # the toolkit's runtime (a runc shim: the twin's sandboxes only need it there) and a running containerd
            lab.ssh(node, "install -m 0755 /usr/sbin/runc %s && systemctl start containerd" % RUNTIME)
        yield ChangeFleet(lab, tmp_path_factory.mktemp("change-containerd-runs"), "containerd_config")
    finally:
        stop_lab(lab)
        shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


def node_files(fleet) -> dict:
    """node -> (sha256 of the drop-in or None, sha256 of the main config, containerd's PID)."""
    found = {}
    for node in NODES:
        out = fleet.lab.ssh(node, "sha256sum %s 2>/dev/null | cut -c1-64; echo -; sha256sum %s | cut -c1-64; "
                                  "systemctl show containerd | grep ^MainPID=" % (DROP_IN, MAIN)).stdout.split()
        drop_in = out[0] if out[0] != "-" else None
        found[node] = (drop_in, out[-2], out[-1])
    return found


def dump(fleet, node) -> str:
    return fleet.lab.ssh(node, "containerd config dump").stdout


def records(fleet) -> dict:
    return {name: fleet.change_record(node) for name, node in fleet.nodes().items()}


def run(fleet, inputs, **overrides):
    values = {"gpuops_ready_timeout": 30, "gpuops_max_unavailable": 2}
    values.update(overrides)
    return fleet.run(inputs, check=False, **values)


def test_a_dry_run_plans_and_changes_nothing(fleet):
    before = node_files(fleet)
    rc, output = run(fleet, GOOD)
    assert rc == 0, output[-4000:]
    assert "containerd_config" in output and "gpu-node-01" in output
    assert node_files(fleet) == before
    assert all(record is None for record in records(fleet).values())
    assert not any(node["spec"].get("unschedulable") for node in fleet.nodes().values())
    assert before["gpu-node-01"][0] is None, "no drop-in yet"


def test_a_run_killed_while_the_canary_verifies_resumes_it_without_a_second_restart_then_a_batch_of_two(fleet):
    before = node_files(fleet)
    # a slow smoke pod holds the canary in verifying long enough to kill the run there
    slow = {"gpuops_smoke_test_command": ["sh", "-c", "sleep 4; nvidia-smi -L"]}
    process = fleet.run(GOOD, background=True, gpuops_confirm="gpulab", gpuops_run_id="good",
                        gpuops_max_unavailable=2, gpuops_ready_timeout=60, **slow)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            verifying = [name for name, record in records(fleet).items() if record and record["state"] == "verifying"]
            if verifying:
                break
            assert process.poll() is None, process.stdout.read()[-4000:]
            time.sleep(0.3)
        else:
            raise AssertionError("the canary never reached verifying")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    canary = verifying[0]
    interrupted = records(fleet)[canary]
    restarted_once = node_files(fleet)[canary]
    assert restarted_once[2] != before[canary][2], "the canary's containerd was restarted"
    assert fleet.nodes()[canary]["spec"].get("unschedulable") is True
    assert [name for name, record in records(fleet).items() if record] == [canary], "the batch was not started"

    # the same run id resumes: the canary is continued first (nothing to write, no restart owed), then the batch
    rc, output = run(fleet, GOOD, gpuops_confirm="gpulab", gpuops_run_id="good")
    assert rc == 0, output[-6000:]
    after = node_files(fleet)
    found = records(fleet)
    assert all(record["state"] == "done" and record["change"] == interrupted["change"] for record in found.values())
    assert found[canary]["previous"] == interrupted["previous"], "the resumed node keeps its first capture"
    assert found[canary]["steps"]["applying"] == interrupted["steps"]["applying"]
    assert after[canary] == restarted_once, "the resumed canary's containerd is not restarted again"
    for node in NODES:
        assert after[node][0] is not None and after[node][2] != before[node][2], "written and restarted"
        assert 'default_runtime_name = "nvidia"' in dump(fleet, node)
        assert 'BinaryName = "%s"' % RUNTIME in dump(fleet, node)
        # capture: the drop-in did not exist, the main config (which gains the import) as it was
        previous = found[node]["previous"]
        assert previous["service"] == "containerd" and previous["files"][DROP_IN] is None
        assert previous["files"][MAIN] and previous["modes"][MAIN] == "0644"
    assert not any(node["spec"].get("unschedulable") for node in fleet.nodes().values())
    # the canary was given back before the batch of two was taken out, and the two went together
    assert all(found[canary]["steps"]["done"] <= found[node]["steps"]["applying"] for node in NODES if node != canary)
    report = fleet.check_invariants(max_unavailable=2)
    assert report["max_unavailable_gpu_nodes"] == 2, report


def test_a_canary_whose_pods_cannot_start_is_rolled_back_and_stops_the_run(fleet):
    before = node_files(fleet)
    good = records(fleet)
    rc, output = run(fleet, OPERATOR_PATH, gpuops_confirm="gpulab", gpuops_run_id="rollback",
                     gpuops_change_rollback_on_failure=True, gpuops_ready_timeout=10)
    assert rc != 0, output[-6000:]
    after = node_files(fleet)
    found = records(fleet)
    changed = [node for node in NODES if found[node]["change"] != good[node]["change"]]
    assert len(changed) == 1, found
    canary = changed[0]
    assert found[canary]["state"] == "rolled-back", found[canary]
    assert "smoke" in found[canary]["reason"].lower(), found[canary]["reason"]
    assert after[canary][:2] == before[canary][:2], "the drop-in and the main config are back as they were"
    assert after[canary][2] != before[canary][2], "containerd restarted with them"
    assert 'BinaryName = "%s"' % RUNTIME in dump(fleet, canary)
    assert not fleet.nodes()[canary]["spec"].get("unschedulable")
    for node in NODES:
        if node != canary:
            assert after[node] == before[node] and found[node] == good[node], "the batch was never started"


def test_a_failed_canary_stops_the_run_and_stays_cordoned_with_the_reason_in_its_record(fleet):
    before = node_files(fleet)
    good = {name: record for name, record in records(fleet).items() if record["state"] == "done"}
    rc, output = run(fleet, NOT_YET_THERE, gpuops_confirm="gpulab", gpuops_run_id="missing", gpuops_ready_timeout=10)
    assert rc != 0, output[-6000:]
    found = records(fleet)
    canary = next(node for node in NODES if found[node]["change"] != (good.get(node) or {}).get("change"))
    assert found[canary]["state"] == "failed" and "smoke" in found[canary]["reason"].lower(), found[canary]
    # the record says why: the kubelet's sandbox error, naming the binary the node lacks
    assert "FailedCreatePodSandBox" in found[canary]["reason"] and MISSING in found[canary]["reason"], found[canary]
    node = fleet.nodes()[canary]
    assert node["spec"].get("unschedulable") is True
    assert "containerd_config" in node["metadata"]["annotations"]["gpuops.nvidia/cordon-reason"]
    assert 'BinaryName = "%s"' % MISSING in dump(fleet, canary), "left as the change made it, for a person to look"
    assert "FailedCreatePodSandBox" in _kubectl(fleet, "get", "events", "-A", "--field-selector", "type=Warning")
    others = [name for name in NODES if name != canary]
    assert all(node_files(fleet)[name] == before[name] and found[name] == good[name] for name in others)


def _kubectl(fleet, *args) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", fleet.kubeconfig] + list(args), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout
