"""One kubelet (with its NVIDIA device plugin registration) per node twin.

The kubelet posts the Node (capacity/allocatable, conditions, nodeInfo with the node twin's bootID),
renews its Lease in kube-node-lease, and runs the pods bound to it. A single container whose `command`/`args`
name a program the node twin has runs as a process in the node's namespaces (`containers.py`): its output is
the pod log, its exit code the container state (Completed/Error, CrashLoopBackOff, phase Succeeded/Failed
by restartPolicy). `nvidia-smi ...` runs through NodeView.run. A GPU container gets the driver the node's NVIDIA
runtime injects (`gpuinject.py`: on a GPU Operator node, `nvidia-smi` from `/run/nvidia/driver`). Containers
without a command, whose program the node lacks, or on a view that starts no processes "run" until deleted.
The device-plugin pod registers the GPUs the node's driver exposes; without NVML it crash-loops with the
plugin's real failure log. A plugin pod that mounts a config ConfigMap (the Helm chart's `config.name`) runs the
config the node's `nvidia.com/device-plugin.config` label picks: its time-slicing replicas multiply the GPUs it
registers (under `nvidia.com/gpu` or the renamed resource) and show in the GFD labels; a label change reloads the
running plugin (the config-manager's SIGHUP); a label naming no config of the ConfigMap crash-loops it with the
config-manager's error.

All methods run on the controller thread, except the `nvidia-smi` commands (a small thread pool).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

from ..api.errors import ApiError
from ..api.eviction import pod_is_ready, pod_is_terminal
from ..api.timefmt import rfc3339
from . import deviceplugin, scheduler
from .nodestatus import (CONTAINER_RUNTIME_VERSION, KUBELET_VERSION, LEASE_NAMESPACE, NODE_ALLOCATABLE, NODE_CAPACITY,
                         OS_IMAGE, conditions_without_times, micro_time, node_lease, ready_conditions,
                         status_unknown_conditions)
from .objects import meta, pod_is_terminating
from .containers import ContainerProcesses, container_argv, container_env
from .driverpod import OperatorPods
from .gpuinject import gets_gpus, injected
from .images import ImagePulls
from .sandboxes import Sandboxes
from .multicontainer import MultiContainerPods
from .pods import (PodLogs, command_argv, container_id, go_duration, plain_amount, pod_status_base,
                   restarts_after_exit)


class KubeletConfig:
    def __init__(self, heartbeat_s: float = 10.0, mig_strategy: str = "single", dra: bool = False,
                 crash_backoff_s: float = 10.0, max_crash_backoff_s: float = 300.0, view_refresh_s: float = 2.0,
                 resourceslice_api_version: str = "resource.k8s.io/v1beta1", container_start_s: float = 1.0,
                 max_processes: int = 64, operator_labels: bool = False, container_pid1_signals: bool = False,
                 plugin_stop_grace_s: float = 300.0):
        self.heartbeat_s = heartbeat_s
        self.mig_strategy = mig_strategy
        self.dra = dra
        self.crash_backoff_s = crash_backoff_s
        self.max_crash_backoff_s = max_crash_backoff_s
        self.view_refresh_s = view_refresh_s
        self.resourceslice_api_version = resourceslice_api_version
        self.container_start_s = container_start_s
        self.max_processes = max_processes      # container processes per node twin; more wait to start
        self.operator_labels = operator_labels  # GPU Operator mode: `nvidia.com/gpu.present` is the Operator's
        self.container_pid1_signals = container_pid1_signals   # containers.py: SIGTERM as a PID 1 gets it
        # the kubelet's endpointStopGracePeriod (5 min): a resource no plugin registers any more (a MIG profile the
        # new layout dropped) stays in capacity with 0 allocatable that long, then leaves the Node's status
        self.plugin_stop_grace_s = plugin_stop_grace_s


class _ViewSnapshot:
    """What the kubelet last read from the node twin (reads may be costly: refreshed on events)."""

    def __init__(self, view):
        self.up = view.is_up()
        self.boot_id = view.boot_id() if self.up else None
        self.driver_version = view.driver_version() if self.up else None
        self.gpus = view.visible_gpus() if self.up else []
        self.mig_capable = bool(view.mig_capable()) if self.up else False
        pci_count = getattr(view, "pci_gpu_count", None)
        self.pci_gpu_count = pci_count() if callable(pci_count) else None
        failed = getattr(view, "kubelet_failed", None)      # the node's kubelet process refused to start
        self.kubelet_failed = bool(failed()) if self.up and callable(failed) else False


class Kubelet:
    """Kubelet + device-plugin registration for one NodeView; `client` is the ControllerManager."""

    def __init__(self, view, client, config: KubeletConfig, logs: PodLogs, executor: ThreadPoolExecutor,
                 node_ip=None):
        self.view = view
        self.name = view.name
        self.client = client
        self.config = config
        self.logs = logs
        self.executor = executor
        self.node_ip = node_ip or getattr(view, "ip", None) or "127.0.0.1"
        self.faults = set()
        self._armed = {}                 # fault kind -> callback(kind): applied at the node's next boot
        self._view_dirty = True
        self._snapshot = None
        self._kubelet_was_failed = False  # the node's kubelet refused to start: it restarts when it serves again
        self._snapshot_at = 0.0
        self._ever_had_gpus = False
        self._boot_id = None
        self._last_status_write = 0.0
        self._last_lease_renew = 0.0
        self._registered = None          # resource name -> count the plugin registered; None = not registered
        self._healthy_uuids = set()      # GPUs the registered plugin last saw healthy
        self._registered_by = None       # uid of the plugin pod that registered
        self._plugin_config = None       # the running plugin's config: {label, name, sharing}; None = none mounted
        self._label_sharing = None       # the sharing GFD labels show (the last config that loaded)
        self._capacity_extended = {}     # kubelet checkpoint: extended resources seen registered
        self._unregistered_since = {}    # resource of the checkpoint the last registration lacked -> since when
        self._stale_plugin_uid = None    # plugin pod that will not re-register (stale-device-plugin)
        self._reregister_after = None    # kubelet-restart: when the running plugin re-registers
        self._runtime = {}               # pod uid -> container runtime state
        self._jobs = {}                  # pod uid -> Future of a nvidia-smi run
        self.processes = ContainerProcesses(view, logs, client.informer.changed.set, config.max_processes,
                                            config.container_pid1_signals)
        self._slice_generation = 0
        self._published_slice = None
        self.operator_pods = OperatorPods(self)
        self.multi_container_pods = MultiContainerPods(self)
        self.image_pulls = ImagePulls(self)
        self.sandboxes = Sandboxes(self)
        view.subscribe(self._on_view_event)

    # --- node twin events -----------------------------------------------------------------------
    def _on_view_event(self, node_name, event_kind) -> None:
        self._view_dirty = True
        self.client.informer.changed.set()

    def _refresh_view(self, now: float) -> _ViewSnapshot:
        if self._snapshot is None or self._view_dirty or now - self._snapshot_at >= self.config.view_refresh_s:
            self._view_dirty = False
            self._snapshot = _ViewSnapshot(self.view)
            self._snapshot_at = now
            if self._snapshot.gpus:
                self._ever_had_gpus = True
        return self._snapshot

    def serving(self) -> bool:
        return bool(self._snapshot and self._snapshot.up) and "kubelet-down" not in self.faults \
            and not self._snapshot.kubelet_failed

    def is_gpu_node(self, snapshot: _ViewSnapshot) -> bool:
        if snapshot.pci_gpu_count is not None:
            return snapshot.pci_gpu_count > 0
        return self._ever_had_gpus

    # --- faults ---------------------------------------------------------------------------------
    def apply_fault(self, kind: str, now: float) -> None:
        if kind == "kubelet-restart":
            self._restart_kubelet(now, plugin_reregisters=True)
            return
        if kind == "stale-device-plugin":
            self._restart_kubelet(now, plugin_reregisters=False)
        self.faults.add(kind)
        self._view_dirty = True

    def arm_fault(self, kind: str, on_applied) -> None:
        """Apply ``kind`` when the kubelet next sees a new bootID (the node's next boot), then call
        ``on_applied(kind)``: e.g. the stale device-plugin ledger a reboot leaves behind."""
        self._armed[kind] = on_applied

    def clear_fault(self, kind: str, now: float) -> None:
        self._armed.pop(kind, None)
        self.faults.discard(kind)
        if kind == "stale-device-plugin" and self._stale_plugin_uid is not None:
            # As if the stale plugin were restarted: it registers again.
            self._stale_plugin_uid = None
            self._reregister_after = now
        self._view_dirty = True

    def _restart_kubelet(self, now: float, plugin_reregisters: bool) -> None:
        """A kubelet restart drops every device-plugin registration; capacity survives in the checkpoint."""
        self._registered = None
        plugin = self._plugin_pod()
        if plugin_reregisters:
            self._reregister_after = now + min(1.0, self.config.heartbeat_s)
        elif plugin is not None:
            self._stale_plugin_uid = meta(plugin).get("uid")
        self._last_status_write = 0.0

    def _plugin_pod(self):
        for pod in self.client.informer.items("pods", deviceplugin.NAMESPACE):
            if (pod.get("spec") or {}).get("nodeName") == self.name and deviceplugin.is_device_plugin_pod(pod) \
                    and not pod_is_terminating(pod) and not pod_is_terminal(pod):
                return pod
        return None

    # --- node object ----------------------------------------------------------------------------
    def sync_node(self, now: float) -> None:
        snapshot = self._refresh_view(now)
        node = self.client.informer.get("nodes", self.name)
        if not self.serving():
            self._kubelet_was_failed = self._kubelet_was_failed or snapshot.kubelet_failed
            self._post_unknown(node, now)
            return
        if self._kubelet_was_failed:
            # the node's kubelet started again after refusing: a new kubelet, whose plugins register again
            self._kubelet_was_failed = False
            if snapshot.boot_id == self._boot_id:
                self._restart_kubelet(now, plugin_reregisters=True)
        if snapshot.boot_id != self._boot_id:
            self._boot(snapshot, now)
        if self._reregister_after is not None and now >= self._reregister_after:
            self._reregister_running_plugin(now)
        self._follow_device_health(snapshot, now)
        if node is None:
            node = self.client.create("nodes", self._node_object(snapshot))
            if node is None:
                return
        self._sync_labels(node, snapshot)
        self._sync_status(node, snapshot, now)
        self._renew_lease(node, now)
        if self.config.dra:
            self._sync_resource_slice(node, snapshot)

    def _boot(self, snapshot: _ViewSnapshot, now: float) -> None:
        """A new bootID: the kubelet started afresh; containers restart; plugins must register again."""
        first_start = self._boot_id is None
        self._boot_id = snapshot.boot_id
        self._registered = None
        self._reregister_after = None
        self._stale_plugin_uid = None
        self._last_status_write = 0.0
        self._last_lease_renew = 0.0
        if not first_start:
            for runtime in self._runtime.values():
                runtime["needs_restart"] = True
            armed, self._armed = self._armed, {}
            for kind, on_applied in armed.items():
                self.apply_fault(kind, now)
                on_applied(kind)

    def _node_object(self, snapshot: _ViewSnapshot) -> dict:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": self._wanted_labels({}, snapshot),
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {}}

    def _wanted_labels(self, current: dict, snapshot: _ViewSnapshot) -> dict:
        labels = dict(current)
        labels.update({"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "beta.kubernetes.io/arch": "amd64"})
        if self.is_gpu_node(snapshot):
            labels[deviceplugin.GPU_NODE_LABEL] = "true"
        gfd = deviceplugin.gfd_labels(snapshot.gpus, snapshot.driver_version, snapshot.mig_capable,
                                      self.config.mig_strategy, self._label_sharing)
        not_owned = (deviceplugin.GFD_LABEL_KEYS[0],) if self.config.operator_labels else ()
        return deviceplugin.apply_gfd_labels(labels, gfd, not_owned)

    def _sync_labels(self, node: dict, snapshot: _ViewSnapshot) -> None:
        current = meta(node).get("labels") or {}
        wanted = self._wanted_labels(current, snapshot)
        if wanted != current:
            patch = {key: value for key, value in wanted.items() if current.get(key) != value}
            patch.update({key: None for key in current if key not in wanted})
            self.client.patch("nodes", node, {"metadata": {"labels": patch}})

    def _follow_registration(self, now: float) -> None:
        """The ledger follows what the plugin registers: a resource of the checkpoint the last registration lacked
        (the MIG profiles of the layout before) keeps its capacity, 0 allocatable, for the stop grace period, then
        is gone from the Node; registered again before that, it is kept."""
        registered = self._registered or {}
        for name in self._capacity_extended:
            if name in registered:
                self._unregistered_since.pop(name, None)
            elif self._registered is not None:
                self._unregistered_since.setdefault(name, now)
        for name, since in list(self._unregistered_since.items()):
            if now - since >= self.config.plugin_stop_grace_s:
                del self._unregistered_since[name]
                self._capacity_extended.pop(name, None)

    def _extended_resources(self):
        capacity = {name: str(count) for name, count in self._capacity_extended.items()}
        allocatable = {name: str((self._registered or {}).get(name, 0)) for name in self._capacity_extended}
        return capacity, allocatable

    def _sync_status(self, node: dict, snapshot: _ViewSnapshot, now: float) -> None:
        self._follow_registration(now)
        capacity_extra, allocatable_extra = self._extended_resources()
        current = node.get("status") or {}
        status = {
            "capacity": dict(NODE_CAPACITY, **capacity_extra),
            "allocatable": dict(NODE_ALLOCATABLE, **allocatable_extra),
            "addresses": [{"type": "InternalIP", "address": self.node_ip}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": self._node_info(snapshot),
        }
        heartbeat_due = now - self._last_status_write >= self.config.heartbeat_s
        conditions = ready_conditions(current.get("conditions") or [], now, heartbeat_due)
        changed = any(current.get(key) != value for key, value in status.items()) or \
            conditions_without_times(current.get("conditions")) != conditions_without_times(conditions)
        if changed or heartbeat_due:
            status["conditions"] = conditions
            for key in ("capacity", "allocatable"):   # a merge patch keeps what it does not name: a resource gone
                status[key].update({name: None for name in current.get(key) or {} if name not in status[key]})
            self.client.patch("nodes", node, {"status": status}, subresource="status")
            self._last_status_write = now

    def _node_info(self, snapshot: _ViewSnapshot) -> dict:
        machine_id = hashlib.md5(self.name.encode()).hexdigest()
        return {"machineID": machine_id, "systemUUID": "%s-%s-%s-%s-%s" % (
                    machine_id[:8], machine_id[8:12], machine_id[12:16], machine_id[16:20], machine_id[20:32]),
                "bootID": snapshot.boot_id or "", "kernelVersion": getattr(self.view, "kernel_release", None)
                or "6.1.0-18-amd64", "osImage": OS_IMAGE, "containerRuntimeVersion": CONTAINER_RUNTIME_VERSION,
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux", "architecture": "amd64"}

    def _post_unknown(self, node, now: float) -> None:
        """What the node lifecycle controller writes when the kubelet stops posting status."""
        if node is None:
            return
        conditions = (node.get("status") or {}).get("conditions") or []
        if conditions and all(c.get("status") == "Unknown" for c in conditions):
            return
        unknown = status_unknown_conditions(conditions or ready_conditions([], now, True), now)
        self.client.patch("nodes", node, {"status": {"conditions": unknown}}, subresource="status")

    def _renew_lease(self, node: dict, now: float) -> None:
        if now - self._last_lease_renew < self.config.heartbeat_s:
            return
        self._last_lease_renew = now
        lease = self.client.informer.get("leases", self.name, LEASE_NAMESPACE)
        if lease is None:
            self.client.create("leases", node_lease(node, now), namespace=LEASE_NAMESPACE)
        else:
            self.client.patch("leases", lease, {"spec": {"renewTime": micro_time(now)}})

    def _sync_resource_slice(self, node: dict, snapshot: _ViewSnapshot) -> None:
        """DRA mode: the plugin publishes (or withdraws) one ResourceSlice for the node's GPUs."""
        wanted_devices = self._registered is not None and snapshot.gpus
        key = (tuple(g["uuid"] for g in snapshot.gpus), snapshot.driver_version) if wanted_devices else None
        if key == self._published_slice:
            return
        name = "%s-%s" % (self.name, deviceplugin.DRA_DRIVER)
        try:
            self.client.store.delete("resourceslices", name)
        except ApiError:
            pass
        if key is not None:
            self._slice_generation += 1
            self.client.create("resourceslices", deviceplugin.resource_slice(
                self.name, meta(node).get("uid"), snapshot.gpus, snapshot.driver_version, self._slice_generation,
                self.config.resourceslice_api_version))
        self._published_slice = key

    # --- pods -----------------------------------------------------------------------------------
    def sync_pods(self, pods: list, now: float) -> None:
        if not self.serving():
            for pod in pods:
                self._mark_not_ready(pod, now)
            return
        self._forget_gone_pods(pods)
        for pod in pods:
            if pod_is_terminating(pod):
                if not self.operator_pods.handles(pod) or self.operator_pods.ready_to_finalize(pod, pods):
                    self._finalize(pod, now)
            elif pod_is_terminal(pod):
                continue
            elif meta(pod).get("uid") not in self._runtime and self._reject_if_resources_missing(pod, pods, now):
                continue
            elif self.operator_pods.handles(pod):
                self.operator_pods.sync(pod, pods, now)
            elif deviceplugin.is_device_plugin_pod(pod):
                self._sync_plugin_pod(pod, now)
            elif self.sandboxes.failing(pod, now) or self.image_pulls.failing(pod, now):
                continue
            elif self.multi_container_pods.handles(pod):
                self.multi_container_pods.sync(pod, now)
            elif command_argv(pod) is not None:
                self._sync_command_pod(pod, now)
            elif self.processes.runs(pod):
                self._sync_process_pod(pod, now)
            else:
                self._sync_long_running_pod(pod, now)

    def _forget_gone_pods(self, pods: list) -> None:
        """Drop runtime state of pods removed without graceful deletion (force delete, namespace delete)."""
        present = {meta(pod).get("uid") for pod in pods}
        self.sandboxes.forget_all_but(present)
        for uid in [uid for uid in self._runtime if uid not in present]:
            del self._runtime[uid]
            self.operator_pods.forget(uid)
            self._jobs.pop(uid, None)
            self.processes.missing_program.discard(uid)
        for key in [key for key in self.processes.uids() if key.split("/", 1)[0] not in present]:
            self.processes.forget(key)      # a pod's process (key UID) or one of its containers' (UID/NAME)

    def _reject_if_resources_missing(self, pod: dict, pods: list, now: float) -> bool:
        """Kubelet admission: a pod bound past the scheduler (spec.nodeName set by its author) that asks for
        more than the node's allocatable fails with OutOf<resource>, as on a real kubelet."""
        node = self.client.informer.get("nodes", self.name)
        if node is None:
            return False
        others = [other for other in pods if other is not pod and meta(other).get("uid") in self._runtime]
        free = scheduler.free_resources(node, others)
        for name, amount in sorted(scheduler.pod_requests(pod).items()):
            if amount > 0 and free.get(name, 0) < amount:
                capacity = ((node.get("status") or {}).get("allocatable") or {}).get(name, "0")
                used = scheduler.parse_quantity(capacity) - free.get(name, 0)
                message = ("Pod was rejected: Node didn't have enough resource: %s, requested: %s, used: %s, "
                           "capacity: %s" % (name, plain_amount(amount), plain_amount(used), capacity))
                self.client.patch("pods", pod, {"status": {"phase": "Failed", "reason": "OutOf%s" % name,
                                                           "message": message, "startTime": rfc3339(now)}},
                                  subresource="status")
                return True
        return False

    def _finalize(self, pod: dict, now: float) -> None:
        uid = meta(pod).get("uid")
        keys = [key for key in self.processes.uids() if key.split("/", 1)[0] == uid]
        if any(self.processes.running(key) for key in keys):
            # SIGTERM now, SIGKILL after the grace period; the pod goes once its processes have exited
            runtime = self._runtime.setdefault(uid, {})
            if "kill_at" not in runtime:
                for key in keys:
                    self.processes.terminate(key)
                runtime["kill_at"] = now + int(meta(pod).get("deletionGracePeriodSeconds") or 0)
            elif now >= runtime["kill_at"]:
                for key in keys:
                    self.processes.kill(key)
            return
        for key in keys + [uid]:
            self.processes.forget(key)
        self.processes.missing_program.discard(uid)
        self._runtime.pop(uid, None)
        self.sandboxes.forget(uid)
        if self._stale_plugin_uid == uid:
            self._stale_plugin_uid = None
        if deviceplugin.is_device_plugin_pod(pod) and self._registered_by == uid:
            self._registered = None
        self.client.delete("pods", pod, grace_period_seconds=0)
        self.logs.drop(meta(pod).get("namespace"), meta(pod)["name"])

    def _mark_not_ready(self, pod: dict, now: float) -> None:
        if pod_is_terminal(pod) or not pod_is_ready(pod):
            return
        conditions = [dict(c, status="False", lastTransitionTime=rfc3339(now))
                      if c.get("type") in ("Ready", "ContainersReady") else c
                      for c in (pod.get("status") or {}).get("conditions") or []]
        self.client.patch("pods", pod, {"status": {"conditions": conditions}}, subresource="status")

    def _start_container(self, pod: dict, now: float) -> dict:
        uid = meta(pod).get("uid")
        runtime = self._runtime.get(uid)
        if runtime is None:
            runtime = self._runtime[uid] = {"attempt": 0, "restart_count": 0, "started_at": now,
                                            "needs_restart": False, "next_attempt": now, "state": None}
        else:
            runtime["attempt"] += 1
            runtime["restart_count"] += 1
            runtime["started_at"] = now
            runtime["needs_restart"] = False
        return runtime

    def _sync_long_running_pod(self, pod: dict, now: float) -> None:
        runtime = self._runtime.get(meta(pod).get("uid"))
        if runtime is None:
            # Image pull + container start: a replacement pod is not Ready at once (this is what makes a
            # drain meet a PDB's 429 before the replicas elsewhere are up).
            runtime = self._start_container(pod, now)
            runtime["state"] = "creating"
            runtime["running_at"] = now + self.config.container_start_s
            if self.config.container_start_s > 0:
                self._write_creating(pod, runtime, now)
        if runtime["state"] == "creating":
            if now < runtime["running_at"]:
                return
            runtime["state"] = "running"
            runtime["started_at"] = now
            self._write_running(pod, runtime, now, ready=True)
        elif runtime["needs_restart"] or (pod.get("status") or {}).get("phase") != "Running":
            runtime = self._start_container(pod, now)
            self._write_running(pod, runtime, now, ready=True)

    def _write_creating(self, pod: dict, runtime: dict, now: float) -> None:
        statuses = [{"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                     "ready": False, "started": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}}
                    for container in (pod.get("spec") or {}).get("containers") or []]
        status = pod_status_base(pod, now, False, self.node_ip)
        status["conditions"][0]["status"] = "False"     # PodReadyToStartContainers: sandbox not up yet
        status.update({"phase": "Pending", "containerStatuses": statuses})
        self.client.patch("pods", pod, {"status": status}, subresource="status")

    def _write_running(self, pod: dict, runtime: dict, now: float, ready: bool, waiting=None, last_state=None):
        containers = (pod.get("spec") or {}).get("containers") or []
        statuses = []
        for container in containers:
            state = {"waiting": waiting} if waiting else {"running": {"startedAt": rfc3339(runtime["started_at"])}}
            statuses.append({"name": container.get("name"), "image": container.get("image", ""),
                             "imageID": "", "containerID": container_id(meta(pod).get("uid"), runtime["attempt"]),
                             "ready": ready, "started": not waiting, "restartCount": runtime["restart_count"],
                             "state": state, "lastState": last_state or runtime.get("last_state") or {}})
        status = pod_status_base(pod, now, ready, self.node_ip)
        status.update({"phase": "Running", "containerStatuses": statuses})
        self.client.patch("pods", pod, {"status": status}, subresource="status")

    # --- nvidia-smi pods ------------------------------------------------------------------------
    def _sync_command_pod(self, pod: dict, now: float) -> None:
        uid = meta(pod).get("uid")
        job = self._jobs.get(uid)
        runtime = self._runtime.get(uid)
        if job is None:
            if runtime is not None and runtime["state"] == "crashed" and now < runtime["next_attempt"]:
                return
            runtime = self._start_container(pod, now)
            runtime["state"] = "running"
            self._jobs[uid] = self.executor.submit(self._run_command, command_argv(pod), gets_gpus(pod))
            self._write_running(pod, runtime, now, ready=True)
            return
        if not job.done():
            return
        del self._jobs[uid]
        exit_code, output = job.result()
        self.logs.set(meta(pod).get("namespace"), meta(pod)["name"], output)
        if restarts_after_exit(pod, exit_code):
            # restartPolicy Always/OnFailure: the kubelet restarts the container with back-off, in place.
            self._write_crash_loop(pod, runtime, exit_code, now)
        else:
            self._write_terminated(pod, runtime, exit_code, now)

    # --- pods whose command runs as a process in the node twin --------------------------------
    def _sync_process_pod(self, pod: dict, now: float) -> None:
        uid = meta(pod).get("uid")
        runtime = self._runtime.get(uid)
        due = runtime is None or runtime["needs_restart"] or (
            runtime["state"] == "crashed" and now >= runtime["next_attempt"])
        if due:
            self.processes.forget(uid)      # a node reboot took the old process with it
            self.logs.set(meta(pod).get("namespace"), meta(pod)["name"], "")
            argv, env = container_argv(pod), container_env(pod)
            if gets_gpus(pod):
                argv, env = injected(argv, env, self._gpu_container_edits())
            started = self.processes.start(uid, meta(pod).get("namespace"), meta(pod)["name"], argv, env)
            if started is False:
                self.processes.missing_program.add(uid)
                self._sync_long_running_pod(pod, now)
            elif started:
                runtime = self._start_container(pod, now)
                runtime["state"] = "running"
                self._write_running(pod, runtime, now, ready=True)
            elif runtime is None and not (pod.get("status") or {}).get("containerStatuses"):
                self._write_creating(pod, None, now)     # at the process bound: waits to start
            return
        exit_code = self.processes.exit_code(uid)
        if runtime["state"] != "running" or exit_code is None:
            return
        self.processes.forget(uid)
        if restarts_after_exit(pod, exit_code):
            self._write_crash_loop(pod, runtime, exit_code, now)
        else:
            runtime["state"] = "terminated"
            self._write_terminated(pod, runtime, exit_code, now)

    def _gpu_container_edits(self):
        """What the node's NVIDIA runtime injects into a GPU container now (None: nothing, or a view without it)."""
        edits = getattr(self.view, "gpu_container_edits", None)
        try:
            return edits() if callable(edits) else None
        except OSError:      # the node went down meanwhile
            return None

    def _run_command(self, argv: list, gpus: bool = False):
        try:
            if gpus:
                argv, _env = injected(argv, {}, self._gpu_container_edits())
            exit_code, stdout, stderr = self.view.run(argv, timeout=60)
        except Exception as error:  # the node twin went away mid-command
            exit_code, stdout, stderr = 128, "", "%s\n" % error
        self.client.informer.changed.set()
        return exit_code, stdout + stderr

    def _write_terminated(self, pod: dict, runtime: dict, exit_code: int, now: float) -> None:
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                      "startedAt": rfc3339(runtime["started_at"]), "finishedAt": rfc3339(now),
                      "containerID": container_id(meta(pod).get("uid"), runtime["attempt"])}
        status = pod_status_base(pod, now, False, self.node_ip)
        for condition in status["conditions"][2:4]:
            condition.update(reason="PodCompleted", message="")
        status.update({"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [{
            "name": container.get("name"), "image": container.get("image", ""), "imageID": "",
            "containerID": terminated["containerID"], "ready": False, "started": False,
            "restartCount": runtime["restart_count"], "state": {"terminated": terminated}, "lastState": {}}]})
        self.client.patch("pods", pod, {"status": status}, subresource="status")

    # --- the device plugin pod ------------------------------------------------------------------
    def _sync_plugin_pod(self, pod: dict, now: float) -> None:
        uid = meta(pod).get("uid")
        runtime = self._runtime.get(uid)
        if self.config.operator_labels and self._plugin_waits_for_driver(pod, runtime, now):
            return
        runtime = self._runtime.get(uid)
        crashed = runtime is not None and runtime["state"] == "crashed"
        if runtime is None or runtime["needs_restart"] or (pod.get("status") or {}).get("phase") != "Running":
            self._start_plugin(pod, now)
        elif crashed and now >= runtime["next_attempt"]:
            self._start_plugin(pod, now)
        elif not crashed and ("device-plugin-crash" in self.faults or self._plugin_blocker() is not None):
            self._start_plugin(pod, now)
        elif not crashed and self._plugin_config is not None and self._config_label() != self._plugin_config["label"]:
            self._reload_config(pod, runtime, now)
        elif not crashed and self._registered is None and self._stale_plugin_uid != uid \
                and self._reregister_after is None:
            self._read_nvml(now)
            self._register(pod, now)

    def _plugin_waits_for_driver(self, pod: dict, runtime, now: float) -> bool:
        """GPU Operator mode: the plugin's init container waits for the driver validation instead of crashing
        on a node whose driver pod has not loaded the driver yet (a node boots without one)."""
        starting = runtime is None or runtime.get("needs_restart") or runtime.get("state") == "waiting-driver"
        if not starting or "device-plugin-crash" in self.faults:
            return False
        if self._plugin_can_start():
            if runtime is not None and runtime.get("state") == "waiting-driver":
                del self._runtime[meta(pod).get("uid")]
            return False
        if runtime is None or runtime.get("state") != "waiting-driver":
            self._runtime[meta(pod).get("uid")] = {"attempt": 0, "restart_count": 0, "started_at": now,
                                                  "needs_restart": False, "next_attempt": now,
                                                  "state": "waiting-driver"}
            self._registered = None
            self._write_creating(pod, None, now)
        return True

    def _plugin_can_start(self) -> bool:
        return bool(self._snapshot and self._snapshot.gpus) and "device-plugin-crash" not in self.faults \
            and self._plugin_blocker() is None

    def _plugin_blocker(self):
        """Case 3 crashes besides NVML: the MIG strategy fault, or what the node's disk shows now (a stale plugin
        socket, a kubelet socket nobody answers: NodeView.device_plugin_blocker, read live, not from the
        snapshot, so a repair over SSH counts at the plugin's next start); None when nothing is in the way."""
        if "device-plugin-mig-mismatch" in self.faults or self._single_strategy_error():
            return "mig_strategy_mismatch"
        blocker = getattr(self.view, "device_plugin_blocker", None)
        if not callable(blocker) or not (self._snapshot and self._snapshot.gpus):
            return None
        return blocker()

    def _single_strategy_error(self):
        """The single strategy refuses the MIG layout NVML shows (None: it takes it, or another strategy)."""
        if self.config.mig_strategy != "single" or self.config.dra or not self._snapshot:
            return None
        return deviceplugin.single_strategy_error(self._snapshot.gpus)

    def _nvml_failure(self) -> str:
        """Why NVML fails here: no driver ever seen = no libnvidia-ml; a driver that was there but is not
        loaded now; a loaded driver that NVML still cannot use = userspace/kernel version mismatch."""
        if "device-plugin-crash" in self.faults or not self._ever_had_gpus:
            return "library_not_found"
        if not (self._snapshot and self._snapshot.driver_version):
            return "driver_not_loaded"
        return "version_mismatch"

    def _read_nvml(self, now: float) -> None:
        """A starting plugin reads NVML now, not the kubelet's last look (up to view_refresh_s old): MIG devices
        made with nvidia-smi a moment before (no node event says so) are in what it registers."""
        self._view_dirty = True
        self._refresh_view(now)

    # --- the plugin's config (config-manager) -----------------------------------------------------
    def _config_label(self) -> str:
        node = self.client.informer.get("nodes", self.name)
        return ((meta(node).get("labels") or {}) if node else {}).get(deviceplugin.CONFIG_LABEL, "")

    def _resolve_config(self, pod: dict):
        """(config, error) the config-manager comes to for this pod on this node now; (None, None) without one."""
        source = deviceplugin.config_source(pod)
        if source is None:
            return None, None
        label = self._config_label()
        try:
            data = self.client.store.get("configmaps", source["name"], source["namespace"]).get("data") or {}
        except ApiError:
            data = {}
        name, error = deviceplugin.select_config(label, source["default"], data)
        config = {"label": label, "name": name, "sharing": None}
        if error is None:
            try:
                config["sharing"] = deviceplugin.sharing_of(data[name])
            except ValueError as invalid:
                error = str(invalid)
        return config, error

    def _take_config(self, config, error) -> None:
        self._plugin_config = config
        if config is None:
            self._label_sharing = None
        elif error is None:
            self._label_sharing = config["sharing"]

    def _sharing(self):
        return self._plugin_config["sharing"] if self._plugin_config else None

    def _reload_config(self, pod: dict, runtime: dict, now: float) -> None:
        """The label changed under a running plugin: the config-manager links the new config and sends SIGHUP;
        the plugin registers again with it, or (no such config) the config-manager exits and the pod crash-loops."""
        config, error = self._resolve_config(pod)
        self._take_config(config, error)
        self.logs.append(meta(pod).get("namespace"), meta(pod)["name"],
                         deviceplugin.config_log(now, config["label"], config["name"], error))
        self._registered = None
        if error is not None:
            self._write_crash_loop(pod, runtime, 1, now)
            return
        self._read_nvml(now)
        self._register(pod, now)

    def _start_plugin(self, pod: dict, now: float) -> None:
        self._read_nvml(now)
        runtime = self._start_container(pod, now)
        config, config_error = self._resolve_config(pod)
        self._take_config(config, config_error)
        if self._plugin_can_start() and config_error is None:
            runtime["state"] = "running"
            self.logs.set(meta(pod).get("namespace"), meta(pod)["name"], "")
            self._write_running(pod, runtime, now, ready=True)
            self._register(pod, now)
            return
        self._registered = None
        blocker = self._plugin_blocker() if self._snapshot and self._snapshot.gpus else None
        if config_error is not None and self._plugin_can_start():
            log = deviceplugin.config_log(now, config["label"], None, config_error)
        elif blocker == "stale_socket":
            log = deviceplugin.stale_socket_log(now)
        elif blocker == "kubelet_not_listening":
            log = deviceplugin.registration_failure_log(now)
        elif blocker == "mig_strategy_mismatch":
            log = deviceplugin.mig_strategy_log(now, self.config.mig_strategy, self._single_strategy_error()
                                                or deviceplugin.SINGLE_MORE_THAN_ONE_TYPE)
        else:
            log = deviceplugin.nvml_failure_log(now, self._nvml_failure())
        self.logs.set(meta(pod).get("namespace"), meta(pod)["name"], log)
        self._write_crash_loop(pod, runtime, 1, now)

    def _write_crash_loop(self, pod: dict, runtime: dict, exit_code: int, now: float) -> None:
        """The container exited and waits out its restart back-off (10 s doubling to 5 min upstream)."""
        runtime["state"] = "crashed"
        backoff_s = min(self.config.max_crash_backoff_s, self.config.crash_backoff_s * (2 ** runtime["attempt"]))
        runtime["next_attempt"] = now + backoff_s
        container_name = (((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name")
        waiting = {"reason": "CrashLoopBackOff",
                   "message": "back-off %s restarting failed container=%s pod=%s_%s(%s)" % (
                       go_duration(backoff_s), container_name, meta(pod)["name"], meta(pod).get("namespace"),
                       meta(pod).get("uid"))}
        last_state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                     "startedAt": rfc3339(runtime["started_at"]),
                                     "finishedAt": rfc3339(now),
                                     "containerID": container_id(meta(pod).get("uid"), runtime["attempt"])}}
        runtime["last_state"] = last_state
        self._write_running(pod, runtime, now, ready=False, waiting=waiting, last_state=last_state)

    def _register(self, pod: dict, now: float) -> None:
        if self._stale_plugin_uid == meta(pod).get("uid"):
            return
        gpus = self._snapshot.gpus if self._snapshot else []
        if self.config.dra:
            self._registered = {}
        else:
            self._registered = deviceplugin.extended_resources(gpus, self.config.mig_strategy, self._sharing())
            self._capacity_extended.update(self._registered)
        self._healthy_uuids = {gpu["uuid"] for gpu in gpus}
        self._registered_by = meta(pod).get("uid")
        self.logs.append(meta(pod).get("namespace"), meta(pod)["name"],
                         deviceplugin.startup_log(self._registered or {deviceplugin.GPU_RESOURCE: 0}, now))

    def _follow_device_health(self, snapshot: _ViewSnapshot, now: float) -> None:
        """A registered plugin keeps watching NVML: a GPU that fell off the bus (Xid 79) goes Unhealthy, so
        allocatable drops while capacity keeps counting it; a GPU back after a reset is healthy again."""
        if not self._registered or self.config.dra or not snapshot.up:
            return
        healthy = deviceplugin.extended_resources(snapshot.gpus, self.config.mig_strategy, self._sharing())
        if all(healthy.get(name, 0) == count for name, count in self._registered.items()):
            return
        uuids = {gpu["uuid"] for gpu in snapshot.gpus}
        plugin = self._plugin_pod()
        if plugin is not None:
            self.logs.append(meta(plugin).get("namespace"), meta(plugin)["name"],
                             deviceplugin.unhealthy_log(sorted(self._healthy_uuids - uuids), now))
        self._registered = {name: healthy.get(name, 0) for name in self._registered}
        self._healthy_uuids = uuids

    def _reregister_running_plugin(self, now: float) -> None:
        """After a kubelet restart a healthy plugin sees kubelet.sock recreated and registers again."""
        self._reregister_after = None
        plugin = self._plugin_pod()
        runtime = self._runtime.get(meta(plugin).get("uid")) if plugin else None
        if plugin is None or runtime is None or runtime["state"] != "running" or not self._plugin_can_start():
            return
        gpus = self._snapshot.gpus
        resources = deviceplugin.extended_resources(gpus, self.config.mig_strategy, self._sharing()) \
            if not self.config.dra else {}
        self.logs.append(meta(plugin).get("namespace"), meta(plugin)["name"],
                         deviceplugin.kubelet_restart_log(resources or {deviceplugin.GPU_RESOURCE: 0}, now))
        self._registered = resources
        self._healthy_uuids = {gpu["uuid"] for gpu in gpus}
        self._registered_by = meta(plugin).get("uid")
        self._capacity_extended.update(resources)

