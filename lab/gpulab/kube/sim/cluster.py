"""`KubeCluster`: the Kubernetes API twin of one gpulab state directory, wired together.

    cluster = KubeCluster(state_dir, node_views, api_only=0, mig_strategy="single", dra=False)
    cluster.start()        # store + records, controllers, one kubelet per NodeView, HTTPS API, DIR/kubeconfig
    cluster.apply_fault("gpu-1", "stale-device-plugin"); cluster.clear_fault("gpu-1", "stale-device-plugin")
    cluster.arm_fault("gpu-1", "stale-device-plugin", on_applied)   # at the node's next boot
    cluster.stop()

Cluster-side fault kinds (`gpulab fault NODE KIND`):
- `stale-device-plugin`: the kubelet restarts and the running plugin does not re-register: capacity stays,
  allocatable `nvidia.com/gpu` is 0 until the plugin pod is deleted and the DaemonSet recreates it;
- `kubelet-restart`: allocatable drops to 0 for a moment, then the plugin re-registers (log says so);
- `device-plugin-crash`: the plugin pod crash-loops (CrashLoopBackOff, NVML load failure in its log),
  allocatable 0;
- `pdb-block`: a Deployment pinned to the node whose PDB (minAvailable = replicas) allows no disruption;
- `kubelet-down`: the kubelet stops posting: Ready Unknown (NotReady) and the unreachable taints.

GPU Operator mode (`gpu_operator=operator.OperatorConfig(driver_version, time_scale)`, `gpulab up --gpu-operator`):
the Operator's CRDs, ClusterPolicy, labels, driver and validator DaemonSets (`operator.py`, pods in
`driverpod.py`), its driver upgrade controller (`driver_upgrade_controller.py`) and MIG Manager (`migmanager.py`).

Timings (seconds, defaults as upstream where upstream has one): `heartbeat_s` 10 (Lease renewal and node
status), `crash_backoff_s` 10 doubling to 300 (CrashLoopBackOff), `job_backoff_s` 10 doubling to 360 (a
Job's next pod after a failed one), `container_start_s` 1 (a new pod is
ContainerCreating that long before it is Ready), `tick_s` 0.5 (controller resync). Tests shrink them.

NodeView extras the kubelet uses when a view has them: `ip` (InternalIP, else 127.0.0.1),
`kernel_release` (nodeInfo.kernelVersion) and `pci_gpu_count()` (NVIDIA functions on the PCI bus, so a
GPU node is labelled `feature.node.kubernetes.io/pci-10de.present` before any driver loads; without it a
node counts as a GPU node once NVML has shown GPUs there).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gpulab.faults import CLUSTER_FAULTS

from ..api.errors import ApiError
from ..api.recorder import RECORDS_FILE, Recorder
from ..api.store import Store
from . import deviceplugin, migmanager, operator
from .apionly import ApiOnlyFleet
from .controllers import ControllerManager
from .driver_upgrade_controller import DriverUpgradeController
from .kubelet import Kubelet, KubeletConfig
from .pods import PodLogs
from .rootca import RootCaPublisher
from .tokens import TokensController

OperatorConfig = operator.OperatorConfig    # for the daemon, which imports only this module
KUBECONFIG_FILE = "kubeconfig"
FAULT_NAMESPACE = "gpulab-faults"
API_FAULTS_FILE = "api-faults.json"   # rules of kube/api/faults.py, written by harnesses (benchmarks/chaos.py)
ARMABLE_FAULTS = ("stale-device-plugin", "device-plugin-crash", "kubelet-down")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


class KubeCluster:
    def __init__(self, state_dir: str, node_views, api_only: int = 0, mig_strategy: str = "single",
                 dra: bool = False, heartbeat_s: float = 10.0, tick_s: float = 0.5, host: str = "127.0.0.1",
                 port: int = 0, crash_backoff_s: float = 10.0, container_start_s: float = 1.0, record: bool = True,
                 job_backoff_s: float = 10.0, gpu_operator=None, container_pid1_signals: bool = False):
        if mig_strategy not in ("single", "mixed"):
            raise ValueError("mig_strategy must be 'single' or 'mixed', not %r" % (mig_strategy,))
        self.state_dir = state_dir
        self.node_views = list(node_views)
        self.host = host
        self.port = port
        self.kubeconfig_path = os.path.join(state_dir, KUBECONFIG_FILE)
        self.records_path = os.path.join(state_dir, RECORDS_FILE)
        # GPU Operator mode (`operator.OperatorConfig`): its time_scale shrinks the crash back-off too, so a
        # driver pod reaches the upgrade controller's restart limit in seconds in tests.
        self.gpu_operator = gpu_operator
        if gpu_operator is not None:
            crash_backoff_s *= gpu_operator.time_scale
        self.config = KubeletConfig(heartbeat_s=heartbeat_s, mig_strategy=mig_strategy, dra=dra,
                                    crash_backoff_s=crash_backoff_s, container_start_s=container_start_s,
                                    operator_labels=gpu_operator is not None,
                                    container_pid1_signals=container_pid1_signals)
        if gpu_operator is not None:
            self.config.max_crash_backoff_s *= gpu_operator.time_scale
        os.makedirs(state_dir, exist_ok=True)
        self.recorder = Recorder(self.records_path) if record else None
        self.store = Store(recorder=self.recorder)
        self.logs = PodLogs()
        self.store.pod_log_provider = self._pod_log
        self.manager = ControllerManager(self.store, tick_s=tick_s, job_backoff_s=job_backoff_s)
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpulab-kubelet-exec")
        self.kubelets = {view.name: Kubelet(view, self.manager, self.config, self.logs, self._executor,
                                            node_ip=getattr(view, "ip", None)) for view in self.node_views}
        self.manager.kubelets = list(self.kubelets.values())
        self.api_only = ApiOnlyFleet(self.manager, api_only) if api_only else None
        self.manager.api_only = self.api_only
        self.server = None
        self._fault_lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, serve: bool = True) -> "KubeCluster":
        """Start controllers and kubelets; with `serve`, the HTTPS API and DIR/kubeconfig too."""
        self.manager.start(background=False)
        # manager.create leaves an object that already exists as it is (409 is not an error here).
        self.manager.create("daemonsets", deviceplugin.daemonset_manifest(), namespace=deviceplugin.NAMESPACE)
        if self.gpu_operator is not None:
            operator.install(self.manager, self.gpu_operator)
            self.manager.addons += [operator.GpuOperator(self.manager, self.gpu_operator),
                                    DriverUpgradeController(self.manager, self.gpu_operator),
                                    migmanager.MigManager(self.manager)]
        if self.config.dra:
            for device_class in deviceplugin.dra_device_classes():
                self.manager.create("deviceclasses", device_class)
        if self.api_only is not None:
            self.api_only.register(time.time())
        self.manager.run_once()
        self.manager.start_thread()
        if serve:
            self._serve()
        return self

    def _serve(self) -> None:
        # Imported here: in-process tests (serve=False) need neither TLS nor openssl.
        from ..api.kubeconfig import write_kubeconfig
        from ..api.server import ApiServer
        from ..api.tls import new_token
        token = new_token()
        self.server = ApiServer(self.store, self.host, self.port, os.path.join(self.state_dir, "keys", "kube"), token,
                                faults_path=os.path.join(self.state_dir, API_FAULTS_FILE))
        self.server.start()
        RootCaPublisher(self.store, self.server.ca_pem).start()    # kube-root-ca.crt in every namespace
        write_kubeconfig(self.kubeconfig_path, self.server.url, self.server.ca_pem, token)
        self.manager.addons.append(TokensController(self.store, self.server.access.authenticator.legacy_token,
                                                    self.server.ca_pem))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.manager.stop()
        for kubelet in self.kubelets.values():
            kubelet.processes.kill_all()
        self._executor.shutdown(wait=False)
        if self.recorder is not None:
            self.recorder.close()

    @property
    def url(self):
        return self.server.url if self.server is not None else None

    def _pod_log(self, namespace: str, pod: str, container, params: dict) -> str:
        text = self.logs.get(namespace, pod, container) or ""
        tail = (params or {}).get("tailLines")
        if tail not in (None, ""):
            lines = text.splitlines(True)
            text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
        return text

    # --- faults ---------------------------------------------------------------------------------
    def apply_fault(self, node: str, kind: str) -> None:
        self._check_fault(node, kind)
        now = time.time()
        with self._fault_lock, self.manager.pass_lock():
            if kind == "pdb-block":
                self._create_pdb_block(node)
            elif node in self.kubelets:
                self.kubelets[node].apply_fault(kind, now)
            else:
                self.api_only.set_down(node, True, now)
        self.manager.wake()

    def arm_fault(self, node: str, kind: str, on_applied) -> None:
        """``kind`` takes effect when the node's kubelet sees its next boot; ``on_applied(kind)`` is called then
        (from the controller thread). Only kinds a boot can bring: not ``pdb-block``, not ``kubelet-restart``
        (a boot restarts the kubelet anyway), not on API-only nodes (they never boot)."""
        self._check_fault(node, kind)
        if kind not in ARMABLE_FAULTS or node not in self.kubelets:
            raise ValueError("fault %s cannot be armed for the next boot of %s (armable on node twins: %s)"
                             % (kind, node, ", ".join(ARMABLE_FAULTS)))
        with self._fault_lock, self.manager.pass_lock():
            self.kubelets[node].arm_fault(kind, on_applied)

    def clear_fault(self, node: str, kind: str) -> None:
        """Undo a fault; clearing one that is not applied (or not applicable) does nothing."""
        self._check_fault(node, kind, applying=False)
        now = time.time()
        with self._fault_lock, self.manager.pass_lock():
            if kind == "pdb-block":
                self._delete_pdb_block(node)
            elif node in self.kubelets:
                self.kubelets[node].clear_fault(kind, now)
            elif kind == "kubelet-down" and node in self.api_only.down:
                self.api_only.set_down(node, False, now)
        self.manager.wake()

    def _check_fault(self, node: str, kind: str, applying: bool = True) -> None:
        if kind not in CLUSTER_FAULTS:
            raise ValueError("unknown cluster fault kind %r (known: %s)" % (kind, ", ".join(CLUSTER_FAULTS)))
        api_only_names = set(self.api_only.names) if self.api_only is not None else set()
        if node not in self.kubelets and node not in api_only_names:
            raise ValueError("no node %r in this cluster" % (node,))
        if applying and node in api_only_names and kind not in ("kubelet-down", "pdb-block"):
            raise ValueError("api-only node %s has no kubelet or device plugin: only kubelet-down and pdb-block"
                             " apply" % node)

    def _create_pdb_block(self, node: str) -> None:
        name = "pdb-block-%s" % node
        labels = {"app": name}
        self.manager.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": FAULT_NAMESPACE}})
        self.manager.create("deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": FAULT_NAMESPACE, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "containers": [{"name": "pause", "image": PAUSE_IMAGE}]}}}},
            namespace=FAULT_NAMESPACE)
        self.manager.create("poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": FAULT_NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}, namespace=FAULT_NAMESPACE)

    def _delete_pdb_block(self, node: str) -> None:
        name = "pdb-block-%s" % node
        for resource in ("poddisruptionbudgets", "deployments"):
            try:
                self.store.delete(resource, name, namespace=FAULT_NAMESPACE)
            except ApiError as error:
                if error.code != 404:
                    raise
