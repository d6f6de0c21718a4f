"""The GPU Operator's driver and validator pods as a kubelet runs them (GPU Operator mode, `operator.py`).

- Driver pod (`app=nvidia-driver-daemonset` in `gpu-operator`): its container is the driver container starting
  on the node twin (`NodeView.start_driver_container`: unload what is loaded, build, install into
  `/run/nvidia/driver`, load). Running but not Ready while it works; Ready once the modules are loaded. A start
  that fails (the old modules are held by GPU pods: "driver is in use"; a build failure under the fault
  `operator-driver-fail`) exits 1: CrashLoopBackOff with the kubelet's back-off, `restartCount` growing. Its
  log is the pod log. Deleting the pod stops the container (SIGTERM): the modules are unloaded unless in use.
  Before a new driver pod's container starts, its k8s-driver-manager init container deletes the node's GPU pods
  (ENABLE_GPU_POD_EVICTION=true) unless the node is annotated `nvidia.com/gpu-driver-upgrade-enabled=true`.
- Validator pod (`app=nvidia-operator-validator`): Ready while the node's driver is loaded and the device
  plugin advertises GPUs (what its driver/toolkit/cuda/plugin validations establish), not Ready otherwise.

A pod "holds the driver" while it is on the node, not finished, and asks for `nvidia.com/gpu` or
`nvidia.com/mig-*` or runs with `runtimeClassName: nvidia` (GPU Operator #2570: such pods hold the module too).
"""
from __future__ import annotations

from ..api.eviction import pod_is_ready, pod_is_terminal
from .objects import meta
from .scheduler import pod_requests
from .upgrade_eviction import is_gpu_pod

NAMESPACE = "gpu-operator"
DRIVER_APP = "nvidia-driver-daemonset"
VALIDATOR_APP = "nvidia-operator-validator"
DRIVER_CONTAINER = "nvidia-driver-ctr"
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
UPGRADE_ENABLED_ANNOTATION = "nvidia.com/gpu-driver-upgrade-enabled"


def _app(pod: dict):
    return meta(pod).get("namespace") == NAMESPACE and (meta(pod).get("labels") or {}).get("app")


def is_driver_pod(pod: dict) -> bool:
    return _app(pod) == DRIVER_APP


def is_validator_pod(pod: dict) -> bool:
    return _app(pod) == VALIDATOR_APP


def driver_version(pod: dict):
    """The version the driver container installs: its image tag `<version>-<os>` (nvcr.io/nvidia/driver)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == DRIVER_CONTAINER and ":" in (container.get("image") or ""):
            return container["image"].rsplit(":", 1)[1].split("-", 1)[0]
    return None


def holds_driver(pod: dict) -> bool:
    if pod_is_terminal(pod) or meta(pod).get("namespace") == NAMESPACE:
        return False
    if (pod.get("spec") or {}).get("runtimeClassName") == "nvidia":
        return True
    return any(name.startswith(GPU_RESOURCE_PREFIXES) and amount > 0 for name, amount in pod_requests(pod).items())


class OperatorPods:
    """Driver and validator pods of one kubelet (its runtime table, status writers, executor and view)."""

    def __init__(self, kubelet):
        self.kubelet = kubelet
        self._jobs = {}          # pod uid -> Future of (ok, log) of a driver container start
        self._stopped = set()    # driver pod uids whose container got its SIGTERM

    def handles(self, pod: dict) -> bool:
        """GPU Operator mode only: elsewhere such pods are plain pods."""
        return self.kubelet.config.operator_labels and (is_driver_pod(pod) or is_validator_pod(pod))

    def sync(self, pod: dict, pods: list, now: float) -> None:
        if is_driver_pod(pod):
            self._sync_driver(pod, pods, now)
        else:
            self._sync_validator(pod, now)

    # --- driver pods ------------------------------------------------------------------------------
    def _sync_driver(self, pod: dict, pods: list, now: float) -> None:
        kubelet = self.kubelet
        uid = meta(pod).get("uid")
        runtime = kubelet._runtime.get(uid)
        job = self._jobs.get(uid)
        if job is not None:
            if not job.done():
                return
            del self._jobs[uid]
            ok, log = job.result()
            kubelet.logs.append(meta(pod).get("namespace"), meta(pod)["name"], log)
            if ok:
                runtime["state"] = "running"
                kubelet._write_running(pod, runtime, now, ready=True)
            else:
                kubelet._write_crash_loop(pod, runtime, 1, now)
            return
        due = runtime is None or runtime.get("needs_restart") or (
            runtime.get("state") == "crashed" and now >= runtime["next_attempt"])
        if not due:
            return
        if runtime is None and self._manager_evicting(pod, pods, now):
            return
        runtime = kubelet._start_container(pod, now)
        runtime["state"] = "starting"
        kubelet._write_running(pod, runtime, now, ready=False)
        in_use = any(holds_driver(other) for other in pods)
        self._jobs[uid] = kubelet.executor.submit(self._start, driver_version(pod), in_use)

    def _manager_evicting(self, pod: dict, pods: list, now: float) -> bool:
        """The k8s-driver-manager init container (a new pod only): with ENABLE_GPU_POD_EVICTION=true and the
        node not annotated `nvidia.com/gpu-driver-upgrade-enabled=true` (then the upgrade controller owns
        eviction) it deletes the node's GPU pods (those asking for a GPU resource) and waits until they are gone."""
        manager = next((c for c in (pod.get("spec") or {}).get("initContainers") or []
                        if c.get("name") == "k8s-driver-manager"), None)
        env = {item.get("name"): item.get("value") for item in (manager or {}).get("env") or []}
        node = self.kubelet.client.informer.get("nodes", self.kubelet.name) or {}
        if env.get("ENABLE_GPU_POD_EVICTION") != "true" or \
                (meta(node).get("annotations") or {}).get(UPGRADE_ENABLED_ANNOTATION) == "true":
            return False
        gpu_pods = [other for other in pods if is_gpu_pod(other) and meta(other).get("namespace") != NAMESPACE]
        for other in gpu_pods:
            if not meta(other).get("deletionTimestamp"):
                self.kubelet.client.delete("pods", other)
        if gpu_pods and (pod.get("status") or {}).get("phase") != "Pending":
            self.kubelet._write_creating(pod, None, now)
        return bool(gpu_pods)

    def _start(self, version, in_use: bool):
        try:
            if not version:
                return False, "no driver version in the container image tag\n"
            return self.kubelet.view.start_driver_container(version, modules_in_use=in_use)
        except Exception as error:   # the node twin went away mid-start
            return False, "%s\n" % error
        finally:
            self.kubelet.client.informer.changed.set()

    def ready_to_finalize(self, pod: dict, pods: list) -> bool:
        """A terminating driver pod: SIGTERM its container once (after a start in flight has ended)."""
        uid = meta(pod).get("uid")
        job = self._jobs.get(uid)
        if job is not None and not job.done():
            return False
        self._jobs.pop(uid, None)
        if uid not in self._stopped and is_driver_pod(pod) and uid in self.kubelet._runtime:
            self._stopped.add(uid)
            in_use = any(holds_driver(other) for other in pods)
            try:
                _ok, log = self.kubelet.view.stop_driver_container(modules_in_use=in_use)
            except Exception as error:
                log = "%s\n" % error
            self.kubelet.logs.append(meta(pod).get("namespace"), meta(pod)["name"], log)
        return True

    def forget(self, uid) -> None:
        self._jobs.pop(uid, None)
        self._stopped.discard(uid)

    # --- validator pods ---------------------------------------------------------------------------
    def _sync_validator(self, pod: dict, now: float) -> None:
        kubelet = self.kubelet
        snapshot = kubelet._snapshot
        advertised = (kubelet._registered or {}).get("nvidia.com/gpu", 0) > 0 or any(
            count > 0 for count in (kubelet._registered or {}).values())
        ready = bool(snapshot and snapshot.driver_version) and advertised
        uid = meta(pod).get("uid")
        runtime = kubelet._runtime.get(uid)
        if runtime is None or runtime.get("needs_restart"):
            runtime = kubelet._start_container(pod, now)
            runtime["state"] = "running"
        elif pod_is_ready(pod) == ready and (pod.get("status") or {}).get("phase") == "Running":
            return
        kubelet._write_running(pod, runtime, now, ready=ready)
