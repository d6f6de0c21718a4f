"""The NVIDIA runtime's injection in the twin: a GPU container gets the node's driver from the driver root its
toolkit uses (`/run/nvidia/driver` on a GPU Operator node, `/` for a host-installed driver), a container without
GPUs does not.

- `nvidia/ctrinject.py` on node roots laid out as a driver container and a host install leave them: the driver
  root the Operator's validation would name, the device nodes and the mounts the toolkit's CDI edits list;
- `kube/sim/gpuinject.py`: which pods get GPUs, how a program and PATH/LD_LIBRARY_PATH resolve through the mounts;
- the kubelet end to end (real kubectl against the HTTPS API, FakeNodeViews with `host_processes` whose driver
  root is a temporary directory): a GPU pod runs the driver root's `nvidia-smi`, a pod without GPUs finds none.
The same on a real node twin (`gpulab up --gpu-operator`) is in test_lab_gpu_operator.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from gpulab.kube.sim import gpuinject
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus
from gpulab.nvidia import ctrinject, installer, profiles
from test_kube_cluster_kubectl import kubectl, pytestmark as needs_kubectl  # noqa: F401

DRIVER = "595.91.07"
LIB = installer.LIB_DIR


def lay_out_driver(root: str, driver_root: str) -> None:
    """The userspace files a driver install leaves under ``driver_root`` of the node under ``root``."""
    base = os.path.join(root, driver_root.lstrip("/"))
    lib_dir = os.path.join(base, LIB.lstrip("/"))
    os.makedirs(lib_dir, exist_ok=True)
    for library in ("libnvidia-ml", "libcuda"):
        with open(os.path.join(lib_dir, "%s.so.%s" % (library, DRIVER)), "w") as stream:
            stream.write("stub\n")
        os.symlink("%s.so.%s" % (library, DRIVER), os.path.join(lib_dir, "%s.so.1" % library))
    os.makedirs(os.path.join(base, "usr/bin"), exist_ok=True)
    with open(os.path.join(base, "usr/bin/nvidia-smi"), "w") as stream:
        stream.write("stub\n")


@pytest.fixture()
def node_root(tmp_path):
    """A node with its GPUs' device nodes and no driver on its own disk (a GPU Operator node before its driver pod)."""
    root = tmp_path / "node"
    (root / "run/gpulab").mkdir(parents=True)
    (root / "run/gpulab/hw.json").write_text(json.dumps(profiles.make_hw("gpu-node-01", "h100-sxm-80gb-x8")))
    (root / "dev").mkdir()
    for device in ["nvidiactl", "nvidia-uvm"] + ["nvidia%d" % index for index in (0, 1, 10, 2)]:
        (root / "dev" / device).write_text("")
    return str(root)


def test_an_operator_node_injects_the_driver_containers_root(node_root):
    lay_out_driver(node_root, "/run/nvidia/driver")
    edits = ctrinject.container_edits(node_root)
    assert (edits["driverRoot"], edits["driverVersion"]) == ("/run/nvidia/driver", DRIVER)
    assert [node["path"] for node in edits["deviceNodes"]] == [
        "/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia10"]
    assert [(mount["hostPath"], mount["containerPath"]) for mount in edits["mounts"]] == [
        ("/run/nvidia/driver%s/libcuda.so.%s" % (LIB, DRIVER), "%s/libcuda.so.%s" % (LIB, DRIVER)),
        ("/run/nvidia/driver%s/libnvidia-ml.so.%s" % (LIB, DRIVER), "%s/libnvidia-ml.so.%s" % (LIB, DRIVER)),
        ("/run/nvidia/driver/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi")]
    assert all("ro" in mount["options"] for mount in edits["mounts"])


def test_a_host_installed_driver_comes_first_and_mounts_in_place(node_root):
    lay_out_driver(node_root, "/")
    lay_out_driver(node_root, "/run/nvidia/driver")
    edits = ctrinject.container_edits(node_root)
    assert edits["driverRoot"] == "/"
    assert all(mount["hostPath"] == mount["containerPath"] for mount in edits["mounts"])
    assert "/usr/bin/nvidia-smi" in [mount["containerPath"] for mount in edits["mounts"]]


def test_the_validations_driver_ready_file_names_the_root_and_no_driver_injects_nothing(node_root):
    assert ctrinject.container_edits(node_root) is None
    lay_out_driver(node_root, "/")
    lay_out_driver(node_root, "/run/nvidia/driver")
    os.makedirs(os.path.join(node_root, "run/nvidia/validations"))
    with open(os.path.join(node_root, "run/nvidia/validations/driver-ready"), "w") as stream:
        stream.write("IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nDRIVER_ROOT_CTR_PATH=/driver-root\n"
                     "NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n")
    assert ctrinject.driver_root(node_root) == "/run/nvidia/driver"
    assert ctrinject.validation_driver_root("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n") == "/"
    assert ctrinject.validation_driver_root("IS_HOST_DRIVER=true\n") is None


def gpu_pod(name: str, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": dict({"containers": [{"name": "c", "image": "cuda"}]}, **spec)}


def test_only_pods_asking_for_gpus_or_the_nvidia_runtime_class_get_them():
    assert gpuinject.gets_gpus(gpu_pod("a", containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]))
    assert gpuinject.gets_gpus(gpu_pod("b", containers=[{"name": "c", "resources": {
        "requests": {"nvidia.com/mig-1g.10gb": "2"}}}]))
    assert gpuinject.gets_gpus(gpu_pod("c", runtimeClassName="nvidia"))
    assert not gpuinject.gets_gpus(gpu_pod("d"))
    assert not gpuinject.gets_gpus(gpu_pod("e", containers=[{"name": "c", "resources": {"limits": {"cpu": "1"}}}]))
    assert not gpuinject.gets_gpus(gpu_pod("f", runtimeClassName="runc",
                                           containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 0}}}]))


OPERATOR_EDITS = {"driverRoot": "/run/nvidia/driver", "mounts": [
    {"hostPath": "/run/nvidia/driver%s/libnvidia-ml.so.%s" % (LIB, DRIVER),
     "containerPath": "%s/libnvidia-ml.so.%s" % (LIB, DRIVER)},
    {"hostPath": "/run/nvidia/driver/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}]}


def test_a_program_and_the_search_paths_resolve_through_the_mounts():
    argv, env = gpuinject.injected(["nvidia-smi", "-L"], {"A": "1"}, OPERATOR_EDITS)
    assert argv == ["/run/nvidia/driver/usr/bin/nvidia-smi", "-L"]
    assert env == {"A": "1", "PATH": gpuinject.CONTAINER_PATH + ":/run/nvidia/driver/usr/bin",
                   "LD_LIBRARY_PATH": "/run/nvidia/driver" + LIB}
    argv, _env = gpuinject.injected(["/usr/bin/nvidia-smi"], {}, OPERATOR_EDITS)
    assert argv == ["/run/nvidia/driver/usr/bin/nvidia-smi"]
    # a shell finds it on its PATH; a program the mounts do not provide stays the node's
    argv, env = gpuinject.injected(["sh", "-c", "nvidia-smi; true"], {"PATH": "/usr/bin:/bin"}, OPERATOR_EDITS)
    assert argv[0] == "sh" and env["PATH"] == "/usr/bin:/bin:/run/nvidia/driver/usr/bin"
    # nvidia-smi on a PATH without /usr/bin is not the mount's
    assert gpuinject.resolve_program("nvidia-smi", OPERATOR_EDITS, "/opt/bin") == "nvidia-smi"


def test_a_host_installed_driver_or_none_changes_nothing():
    host = {"driverRoot": "/", "mounts": [{"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}]}
    for edits in (host, None):
        assert gpuinject.injected(["nvidia-smi", "-L"], {"A": "1"}, edits) == (["nvidia-smi", "-L"], {"A": "1"})


class InjectingNodeView(FakeNodeView):
    """A FakeNodeView whose NVIDIA runtime injects ``edits`` (host paths: this fake node's root is the host's)."""

    def __init__(self, name, edits, **kwargs):
        super().__init__(name, **kwargs)
        self.edits = edits

    def gpu_container_edits(self):
        return self.edits

    def run(self, argv, timeout: float = 30):
        """A program given by its path runs as a host process (the FakeNodeView answers only `nvidia-smi`)."""
        if argv[0].startswith("/") and self.is_up():
            self.commands_run.append(list(argv))
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
            return done.returncode, done.stdout, done.stderr
        return super().run(argv, timeout)


@pytest.fixture
def twin(tmp_path):
    driver_bin = tmp_path / "run/nvidia/driver/usr/bin"
    driver_bin.mkdir(parents=True)
    smi = driver_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho \"GPU 0: from the driver root $0 $*\"\n")
    smi.chmod(0o755)
    edits = {"driverRoot": str(tmp_path / "run/nvidia/driver"),
             "mounts": [{"hostPath": str(smi), "containerPath": "/usr/bin/nvidia-smi"}]}
    view = InjectingNodeView("gpu-0", edits, gpus=make_gpus(8), host_processes=True)
    cluster = KubeCluster(str(tmp_path / "state"), [view], heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.4,
                          container_start_s=0.3).start()
    cluster.view, cluster.smi = view, str(smi)
    yield cluster
    cluster.stop()


def finished(twin, name: str, timeout_s: float = 30.0) -> tuple:
    """(phase, log) once the pod has finished."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pod = json.loads(kubectl(twin, "get", "pod", name, "-o", "json").stdout)
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            return pod["status"]["phase"], kubectl(twin, "logs", name).stdout
        time.sleep(0.2)
    raise AssertionError("pod %s did not finish" % name)


def start(twin, name: str, command: list, gpus: int) -> None:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": "gpu-0", "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "cuda", "command": command, "resources": resources}]}}
    kubectl(twin, "apply", "-f", "-", stdin=json.dumps(pod))


def test_a_gpu_pod_runs_the_driver_roots_nvidia_smi_and_a_pod_without_gpus_finds_none(twin):
    start(twin, "smoke", ["nvidia-smi", "-L"], 1)                                     # through NodeView.run
    start(twin, "shell", ["sh", "-c", "nvidia-smi -q; echo rc=$?"], 1)                # a process on its PATH
    start(twin, "plain", ["sh", "-c", "command -v nvidia-smi || echo none"], 0)
    start(twin, "plain-smoke", ["nvidia-smi", "-L"], 0)
    phase, log = finished(twin, "smoke")
    assert (phase, log) == ("Succeeded", "GPU 0: from the driver root %s -L\n" % twin.smi)
    assert [twin.smi, "-L"] in twin.view.commands_run
    phase, log = finished(twin, "shell")
    assert phase == "Succeeded" and log == "GPU 0: from the driver root %s -q\nrc=0\n" % twin.smi
    phase, log = finished(twin, "plain")
    assert log == "none\n"
    finished(twin, "plain-smoke")       # the FakeNodeView answers nvidia-smi itself: the argv is what counts
    assert ["nvidia-smi", "-L"] in twin.view.commands_run
