"""Case 3, the device plugin crash-loops, repaired by its cause by the diagnose runbook over the twin (real
ansible-playbook, SSH to the nodes, HTTPS to the API twin, `kubectl logs` through the API).

Four nodes, one cause each, injected on the node's side where the cause lives:
- gpu-node-01 `driver-skew` (kernel module and userspace differ until the next boot) and a plugin restart: NVML
  fails with "Driver/library version mismatch"; a training pod holds one of its GPUs;
- gpu-node-02 `plugin-socket-stale`: a dead socket at /var/lib/kubelet/device-plugins/nvidia-gpu.sock (bind: address
  already in use);
- gpu-node-03 `kubelet-socket-dead`: the kubelet's registration socket refuses until the kubelet restarts;
- gpu-node-04 `device-plugin-mig-mismatch`: the plugin refuses the MIG layout under its strategy.
Diagnose names case 3 and the cause on each and changes nothing; the dry run (`--check`) changes nothing; the
confirmed repair deletes the socket and restarts the plugin (02), restarts the kubelet then the plugin (03), reports
the configuration to fix (04), and on 01 stops at cordon + annotation while the GPU is in use; once the pod is
gone the repair reboots 01 (gpuops_device_plugin_skew_reload=false: the site chose the reboot over the module
reload, test_runbook_repair_skew_reload.py). Every repaired node ends with its 8 GPUs allocatable; the audit trail
names the actions.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab
from gpulab.testkit.modules import gpu_allocatable, read_node, wait_allocatable

ansible_runner = pytest.importorskip("ansible_runner")

PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "diagnose.yml")
SHOW_TASK = "Show the node summary, the failing layer, the cases and their fix"
CAUSE_TASK = "Case 3: the cause of the device plugin's crash loop and its repair"
MIG_TASK = "MIG strategy mismatch: name the configuration to fix (no change)"
DRIVER = "550.54.15"
SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
CAUSES = {"gpu-node-01": "version_skew", "gpu-node-02": "stale_socket", "gpu-node-03": "kubelet_not_registering",
          "gpu-node-04": "mig_strategy_mismatch"}


def kubectl(lab, *args):
    return subprocess.run(["kubectl", "--kubeconfig", lab.info["kube"]["kubeconfig"]] + list(args),
                          capture_output=True, text=True, timeout=60)


def plugin_pod(lab, node):
    pods = json.loads(kubectl(lab, "get", "pods", "-n", "kube-system", "-o", "json",
                              "--field-selector", "spec.nodeName=" + node).stdout)["items"]
    return next(pod for pod in pods if pod["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-"))


def wait_crash_loop(lab, node, timeout_s=90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pod = plugin_pod(lab, node)
        waiting = [status.get("state", {}).get("waiting", {}).get("reason")
                   for status in pod.get("status", {}).get("containerStatuses") or []]
        if "CrashLoopBackOff" in waiting:
            return pod
        time.sleep(0.3)
    raise AssertionError("%s: the device plugin did not crash-loop: %s" % (node, pod.get("status")))


def start_gpu_pod(lab, node):
    """A pod holding one GPU on ``node`` (bound to it, as the scheduler would), Running."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-job", "namespace": "default"},
           "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{
               "name": "train", "image": "registry.k8s.io/pause:3.10",
               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    done = subprocess.run(["kubectl", "--kubeconfig", lab.info["kube"]["kubeconfig"], "apply", "-f", "-"],
                          input=json.dumps(pod), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        phase = json.loads(kubectl(lab, "get", "pod", "-n", "default", "gpu-job", "-o", "json").stdout)["status"].get(
            "phase")
        if phase == "Running":
            return
        time.sleep(0.3)
    raise AssertionError("gpu-job not Running: %s" % phase)


def run_diagnose(lab, tmp_path, check=False, hosts=None, messages=None, **extravars):
    """(rc, shown per host, cause per host, changed tasks per host, failed (host, task, msg), audit lines); with
    ``messages`` (a dict), also what the task it names said, per host: ``{task: {host: msg}}``."""
    os.makedirs(str(tmp_path), exist_ok=True)
    audit = os.path.join(str(tmp_path), "audit.jsonl")
    if hosts:
        extravars["gpuops_diagnose_hosts"] = hosts
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=PLAYBOOK, inventory=os.path.join(lab.state_dir, "inventory.yml"),
        extravars=extravars, quiet=True, cmdline="--check" if check else None,
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path() or "", "ANSIBLE_CALLBACKS_ENABLED": "gpuops.nvidia.audit",
                 "GPUOPS_AUDIT_LOG": audit,
                 "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    shown, causes, changed, failed = {}, {}, {}, []
    for event in result.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok":
            if data.get("task") == SHOW_TASK:
                shown[data["host"]] = data["res"]["msg"]
            if data.get("task") == CAUSE_TASK:
                causes[data["host"]] = data["res"]["msg"]
            if messages is not None and data.get("task") in messages:
                messages[data["task"]][data["host"]] = data["res"].get("msg")
            if data["res"].get("changed"):
                changed.setdefault(data["host"], []).append(data.get("task"))
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            failed.append((data.get("host"), data.get("task"), data.get("res", {}).get("msg")))
    lines = []
    if os.path.exists(audit):
        with open(audit, encoding="utf-8") as stream:
            lines = [json.loads(line) for line in stream if line.strip()]
    return result.rc, shown, causes, changed, failed, lines


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("repair-device-plugin") / "state")
    lab = start_lab(state_dir, "--nodes", "4", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        for node in lab.node_names:
            assert wait_allocatable(lab, node, "8", timeout_s=90) == "8"
        yield lab
    finally:
        stop_lab(lab)
        shutil.rmtree(state_dir, ignore_errors=True)


def test_each_crash_cause_is_named_then_repaired(fleet, tmp_path):
    lab = fleet
    # a training job holds a GPU of gpu-node-01 (started while its plugin was healthy)
    start_gpu_pod(lab, "gpu-node-01")
    # the causes, each where it lives
    lab.gpulab("fault", "gpu-node-01", "driver-skew")
    kubectl(lab, "delete", "pod", "-n", "kube-system", plugin_pod(lab, "gpu-node-01")["metadata"]["name"],
            "--wait=false")          # a plugin restart after the half-done upgrade
    lab.gpulab("fault", "gpu-node-02", "plugin-socket-stale")
    lab.gpulab("fault", "gpu-node-03", "kubelet-socket-dead")
    lab.gpulab("fault", "gpu-node-04", "device-plugin-mig-mismatch")
    for node in CAUSES:
        pod = wait_crash_loop(lab, node)
        assert wait_allocatable(lab, node, "0", timeout_s=90) == "0"
        # kubectl logs returns the plugin's own lines
        log = kubectl(lab, "logs", "-n", "kube-system", pod["metadata"]["name"]).stdout
        assert {"gpu-node-01": "Driver/library version mismatch", "gpu-node-02": "bind: address already in use",
                "gpu-node-03": "kubelet.sock: connect: connection refused",
                "gpu-node-04": "invalid MIG configuration"}[node] in log, log
    boot_01 = lab.node_status("gpu-node-01")["boot_id"]

    # diagnose names case 3 and the cause, and changes nothing
    rc, shown, causes, changed, failed, _audit = run_diagnose(lab, tmp_path / "read-only")
    assert rc == 0 and not failed, failed
    assert not changed, changed
    for node, cause in CAUSES.items():
        assert 3 in [case["case"] for case in shown[node]["cases"]], shown[node]
        assert causes[node]["cause"] == cause, causes[node]
    assert causes["gpu-node-01"]["gpu_pods"] == ["default/gpu-job"]

    # the dry run reports and changes nothing
    confirm = {"gpuops_remediate": True}
    rc, _shown, causes, _changed, failed, _audit = run_diagnose(lab, tmp_path / "dry-run", check=True, **confirm)
    assert rc == 0 and not failed, failed
    assert causes["gpu-node-02"]["dry_run"] is True
    assert lab.node_status("gpu-node-01")["boot_id"] == boot_01
    assert lab.ssh("gpu-node-02", "test -S " + SOCKET, check=False).returncode == 0
    for node in CAUSES:
        assert gpu_allocatable(lab, node) == "0"
        assert not read_node(lab, node)["spec"].get("unschedulable")

    # the confirmed repair
    said = {MIG_TASK: {}}
    rc, _shown, causes, changed, failed, audit = run_diagnose(lab, tmp_path / "repair", messages=said, **confirm)
    assert rc == 0 and not failed, failed
    assert gpu_allocatable(lab, "gpu-node-02") == "8"
    assert lab.ssh("gpu-node-02", "test -e " + SOCKET, check=False).returncode != 0
    assert gpu_allocatable(lab, "gpu-node-03") == "8"
    # MIG strategy mismatch: reported with the configuration to fix, nothing changed
    assert gpu_allocatable(lab, "gpu-node-04") == "0" and "gpu-node-04" not in changed
    assert list(said[MIG_TASK]) == ["gpu-node-04"], said
    mig_fix = said[MIG_TASK]["gpu-node-04"]
    for named in ("runs with MIG strategy single",                   # the strategy the plugin runs with
                  "invalid MIG configuration",                        # its own words
                  "migStrategy", "DaemonSet nvidia-device-plugin-daemonset", "ClusterPolicy spec.mig.strategy",
                  "no GPU in MIG mode",                               # the node's layout, from its facts
                  "nvidia.com/mig.config", "nothing was changed"):
        assert named in mig_fix, (named, mig_fix)
    # version skew while a process holds the GPU: cordoned with the reason, no reboot
    node01 = read_node(lab, "gpu-node-01")
    assert node01["spec"].get("unschedulable") is True
    assert "GPU is in use" in node01["metadata"]["annotations"]["gpuops.nvidia/device-plugin-repair"]
    assert "default/gpu-job" in node01["metadata"]["annotations"]["gpuops.nvidia/device-plugin-repair"]
    assert lab.node_status("gpu-node-01")["boot_id"] == boot_01
    steps = {(line.get("host"), line.get("step")) for line in audit if line.get("event") == "task"
             and line.get("status") == "changed"}
    assert {("gpu-node-02", "stale_socket_delete"), ("gpu-node-02", "device_plugin_restart"),
            ("gpu-node-03", "kubelet_restart"), ("gpu-node-03", "device_plugin_restart")} <= steps, steps
    assert not [step for step in steps if step[0] in ("gpu-node-01", "gpu-node-04") and step[1]], steps

    # the GPU is free now: the repair reboots the node, its GPUs come back, the node is given back
    assert kubectl(lab, "delete", "pod", "-n", "default", "gpu-job", "--wait=true").returncode == 0
    rc, _shown, causes, changed, failed, audit = run_diagnose(lab, tmp_path / "reboot", hosts="gpu-node-01",
                                                              gpuops_device_plugin_skew_reload=False, **confirm)
    assert rc == 0 and not failed, failed
    assert causes["gpu-node-01"]["cause"] == "version_skew"
    assert lab.node_status("gpu-node-01")["boot_id"] != boot_01
    assert gpu_allocatable(lab, "gpu-node-01") == "8"
    node01 = read_node(lab, "gpu-node-01")
    assert not node01["spec"].get("unschedulable")
    assert "gpuops.nvidia/device-plugin-repair" not in (node01["metadata"].get("annotations") or {})
    assert ("gpu-node-01", "reboot") in {(line.get("host"), line.get("step")) for line in audit
                                         if line.get("event") == "task" and line.get("status") == "changed"}
    lab.gpulab("clear", "gpu-node-04", "device-plugin-mig-mismatch", check=False)


def start_gpu_deployment(lab, node, name="gpu-train"):
    """A Deployment of one pod holding one GPU on ``node`` (a workload a drain may evict), its pod Running."""
    labels = {"app": name}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": name, "namespace": "default", "labels": labels},
                  "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels}, "spec": {
                               "nodeSelector": {"kubernetes.io/hostname": node},
                               "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                                               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    done = subprocess.run(["kubectl", "--kubeconfig", lab.info["kube"]["kubeconfig"], "apply", "-f", "-"],
                          input=json.dumps(deployment), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = [pod for pod in json.loads(kubectl(lab, "get", "pods", "-n", "default", "-l", "app=" + name,
                                                  "-o", "json").stdout)["items"]
                if pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName") == node]
        if pods:
            return pods[0]
        time.sleep(0.3)
    raise AssertionError("%s: no Running pod on %s" % (name, node))


def test_version_skew_on_a_node_whose_gpu_is_in_use_reboots_only_with_the_forced_step(fleet, tmp_path):
    """gpu-node-02 (repaired above): a Deployment's pod holds one of its GPUs, then the driver-skew and a plugin
    restart. Without gpuops_device_plugin_force_reboot the repair only cordons and annotates; with it (the
    documented forced step) the node is drained (the pod evicted), rebooted, verified and given back, and the audit
    trail names the forced drain and the reboot."""
    lab, node = fleet, "gpu-node-02"
    assert wait_allocatable(lab, node, "8", timeout_s=90) == "8"
    holder = start_gpu_deployment(lab, node)
    held = "%s/%s" % (holder["metadata"]["namespace"], holder["metadata"]["name"])
    lab.gpulab("fault", node, "driver-skew")
    kubectl(lab, "delete", "pod", "-n", "kube-system", plugin_pod(lab, node)["metadata"]["name"], "--wait=false")
    wait_crash_loop(lab, node)
    assert wait_allocatable(lab, node, "0", timeout_s=90) == "0"
    boot = lab.node_status(node)["boot_id"]
    confirm = {"gpuops_remediate": True}
    try:
        # without the flag: cordoned, annotated with the pod, no reboot, nothing else changed on the node
        rc, _shown, causes, _changed, failed, audit = run_diagnose(lab, tmp_path / "unforced", hosts=node, **confirm)
        assert rc == 0 and not failed, failed
        assert causes[node]["cause"] == "version_skew" and causes[node]["gpu_pods"] == [held], causes[node]
        stopped = read_node(lab, node)
        assert stopped["spec"].get("unschedulable") is True
        why = stopped["metadata"]["annotations"]["gpuops.nvidia/device-plugin-repair"]
        assert "GPU is in use" in why and held in why and "gpuops_device_plugin_force_reboot" in why, why
        assert lab.node_status(node)["boot_id"] == boot
        steps = {(line.get("host"), line.get("step")) for line in audit
                 if line.get("event") == "task" and line.get("status") == "changed"}
        assert not [step for step in steps if step[1] in ("forced_drain", "reboot", "module_reload")], steps

        # with the forced step: drained, rebooted, verified, given back
        rc, _shown, causes, _changed, failed, audit = run_diagnose(lab, tmp_path / "forced", hosts=node,
                                                                  gpuops_device_plugin_force_reboot=True, **confirm)
        assert rc == 0 and not failed, failed
        assert causes[node]["cause"] == "version_skew"
        assert lab.node_status(node)["boot_id"] != boot
        assert gpu_allocatable(lab, node) == "8"
        given_back = read_node(lab, node)
        assert not given_back["spec"].get("unschedulable")
        assert "gpuops.nvidia/device-plugin-repair" not in (given_back["metadata"].get("annotations") or {})
        assert lab.ssh(node, "cat /sys/module/nvidia/version").stdout.strip() == DRIVER
        # the pod that held the GPU was evicted by the drain (its Deployment made another)
        names = [pod["metadata"]["name"] for pod in json.loads(kubectl(
            lab, "get", "pods", "-n", "default", "-l", "app=gpu-train", "-o", "json").stdout)["items"]]
        assert holder["metadata"]["name"] not in names, names
        steps = [line.get("step") for line in audit if line.get("event") == "task" and line.get("host") == node
                 and line.get("status") == "changed" and line.get("step")]
        assert "forced_drain" in steps and "reboot" in steps, steps
        assert steps.index("forced_drain") < steps.index("reboot"), steps
    finally:
        kubectl(lab, "delete", "deployment", "-n", "default", "gpu-train", "--wait=false")
