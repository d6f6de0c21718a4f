"""The NVIDIA GPU Operator's state manager as the twin models it (`gpulab up --gpu-operator`).

`install(manager, config)` does what the Operator's Helm chart does: namespace `gpu-operator`, the ClusterPolicy
and NVIDIADriver CRDs (real manifests, `gpu_operator_crds/`), ServiceAccounts, and the ClusterPolicy
`cluster-policy` with the driver enabled at `config.driver_version` and the chart's upgradePolicy defaults.
`GpuOperator.sync(now)` (every controller pass) then reconciles like `controllers/clusterpolicy_controller.go`:
- GPU nodes (NFD's `feature.node.kubernetes.io/pci-10de.present=true`) get `nvidia.com/gpu.present=true` and
  the `nvidia.com/gpu.deploy.<operand>=true` labels (a value someone else set, e.g. `paused-for-driver-upgrade`
  or `false`, is left alone), and the annotation `nvidia.com/gpu-driver-upgrade-enabled=true` while
  `spec.driver.upgradePolicy.autoUpgrade` is true (k8s-driver-manager reads it);
- the driver DaemonSet `nvidia-driver-daemonset` (updateStrategy OnDelete, nodeSelector
  `nvidia.com/gpu.deploy.driver=true`, pods `app=nvidia-driver-daemonset`, image
  `<repository>/<image>:<version>-debian12`): a changed `spec.driver.version` changes its template, so the
  DaemonSet controller makes a new ControllerRevision; running pods keep their `controller-revision-hash`
  until deleted (OnDelete);
- the validator DaemonSet `nvidia-operator-validator` (nodeSelector `nvidia.com/gpu.deploy.operator-validator`);
- a node that rebooted gets its driver pod recreated from the newest revision when it was out of date
  (gpu-operator #2509: a reboot bypasses the upgrade controller's pacing);
- the ClusterPolicy `status.state` (`ready` when every driver and validator pod is Ready, else `notReady`).
The driver and validator pods themselves run in the kubelets (`driverpod.py`); the upgrade controller is
`driver_upgrade_controller.py`.
"""
from __future__ import annotations

import copy
import glob
import os

from ..api.errors import ApiError
from ..api.timefmt import rfc3339
from . import migmanager
from .driverpod import DRIVER_APP, DRIVER_CONTAINER, NAMESPACE, UPGRADE_ENABLED_ANNOTATION, VALIDATOR_APP
from .objects import meta, owner_reference, pod_is_terminating

CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_operator_crds")
CLUSTER_POLICY = "cluster-policy"
CLUSTER_POLICY_RESOURCE = "clusterpolicies.nvidia.com"     # the store keys a CRD's resource by the CRD name
DRIVER_DAEMONSET = DRIVER_APP
VALIDATOR_DAEMONSET = VALIDATOR_APP
GPU_NODE_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
DEPLOY_OPERANDS = ("driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
                   "node-status-exporter", "operator-validator", "mig-manager")
OS_TAG = "debian12"       # the Operator appends the node's OS (os-release ID + VERSION_ID) to the driver tag
OPERATOR_VERSION = "v25.3.0"
DRIVER_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.0"
VALIDATOR_IMAGE = "nvcr.io/nvidia/cloud-native/gpu-operator-validator:" + OPERATOR_VERSION
SERVICE_ACCOUNTS = ("gpu-operator", "nvidia-driver", "nvidia-operator-validator")


class OperatorConfig:
    """`driver_version`: ClusterPolicy's spec.driver.version at install; `time_scale` multiplies every timer of
    the upgrade controller (requeue 120 s, validation 600 s, the upgradePolicy's timeouts) — 1 is the real
    Operator, tests use e.g. 0.01."""

    def __init__(self, driver_version: str, time_scale: float = 1.0):
        if not driver_version:
            raise ValueError("GPU Operator mode needs a driver version")
        if not 0 < float(time_scale) <= 1:
            raise ValueError("time_scale must be in (0, 1], not %r" % (time_scale,))
        self.driver_version = driver_version
        self.time_scale = float(time_scale)


def cluster_policy_manifest(driver_version: str) -> dict:
    """The ClusterPolicy the gpu-operator Helm chart renders with `driver.version` set (its default values)."""
    return {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": CLUSTER_POLICY},
        "spec": {
            "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
            "daemonsets": {"updateStrategy": "RollingUpdate", "priorityClassName": "system-node-critical"},
            "driver": {
                "enabled": True, "repository": "nvcr.io/nvidia", "image": "driver", "version": driver_version,
                "manager": {"repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-driver-manager",
                            "version": DRIVER_MANAGER_IMAGE.rsplit(":", 1)[1]},
                "upgradePolicy": {
                    "autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%",
                    "waitForCompletion": {"timeoutSeconds": 0},
                    "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
                    "drain": {"enable": False, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False}},
            },
            "toolkit": {"enabled": True}, "devicePlugin": {"enabled": True}, "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": True}, "gfd": {"enabled": True}, "nodeStatusExporter": {"enabled": False},
            "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
        },
    }


def install(manager, config: OperatorConfig) -> None:
    """What `helm install gpu-operator` leaves: namespace, CRDs, ServiceAccounts, the ClusterPolicy (and the
    `nvidia` RuntimeClass its toolkit operand makes)."""
    import yaml   # PyYAML: the CRDs are the upstream YAML files

    manager.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for path in sorted(glob.glob(os.path.join(CRD_DIR, "*.yaml"))):
        with open(path, encoding="utf-8") as stream:
            manager.create("customresourcedefinitions", yaml.safe_load(stream))
    for name in SERVICE_ACCOUNTS:
        manager.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                           "metadata": {"name": name, "namespace": NAMESPACE}}, namespace=NAMESPACE)
    # the container-toolkit operand's RuntimeClass (GPU pods may run with runtimeClassName: nvidia)
    manager.create("runtimeclasses", {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                      "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    manager.store.create(CLUSTER_POLICY_RESOURCE, cluster_policy_manifest(config.driver_version))
    migmanager.install(manager)     # the MIG Manager's ConfigMap default-mig-parted-config


def driver_image(driver_spec: dict) -> str:
    return "%s/%s:%s-%s" % (driver_spec.get("repository") or "nvcr.io/nvidia", driver_spec.get("image") or "driver",
                            driver_spec.get("version"), OS_TAG)


def driver_daemonset_manifest(policy: dict) -> dict:
    """`assets/state-driver/0500_daemonset.yaml` as the Operator renders it for this ClusterPolicy (the parts
    the twin uses: labels, selector, OnDelete, nodeSelector, the driver-manager init container, the image)."""
    driver = (policy.get("spec") or {}).get("driver") or {}
    labels = {"app": DRIVER_APP, "app.kubernetes.io/component": "nvidia-driver",
              "app.kubernetes.io/managed-by": "gpu-operator"}
    manager_env = [{"name": "ENABLE_GPU_POD_EVICTION", "value": "true"},
                   {"name": "ENABLE_AUTO_DRAIN", "value": "false"},
                   {"name": "DRAIN_USE_FORCE", "value": "false"},
                   {"name": "DRAIN_POD_SELECTOR_LABEL", "value": ""},
                   {"name": "DRAIN_TIMEOUT_SECONDS", "value": "0s"},
                   {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "false"},
                   {"name": "OPERATOR_NAMESPACE", "value": NAMESPACE}]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": DRIVER_DAEMONSET, "namespace": NAMESPACE, "labels": dict(labels),
                     "annotations": {"openshift.io/scc": "nvidia-driver"},
                     "ownerReferences": [owner_reference(policy)]},
        "spec": {
            "selector": {"matchLabels": {"app": DRIVER_APP}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": dict(labels),
                             "annotations": {"kubectl.kubernetes.io/default-container": DRIVER_CONTAINER}},
                "spec": {
                    "nodeSelector": {DEPLOY_LABEL_PREFIX + "driver": "true"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "nvidia-driver",
                    "hostPID": True,
                    "initContainers": [{"name": "k8s-driver-manager", "image": DRIVER_MANAGER_IMAGE,
                                        "command": ["driver-manager"], "args": ["uninstall_driver"],
                                        "env": manager_env}],
                    "containers": [{"name": DRIVER_CONTAINER, "image": driver_image(driver),
                                    "command": ["nvidia-driver"], "args": ["init"],
                                    "securityContext": {"privileged": True}}],
                },
            },
        },
    }


def validator_daemonset_manifest(policy: dict) -> dict:
    labels = {"app": VALIDATOR_APP, "app.kubernetes.io/part-of": "gpu-operator"}
    init = [{"name": name, "image": VALIDATOR_IMAGE, "command": ["sh", "-c"], "args": ["nvidia-validator"],
             "env": [{"name": "COMPONENT", "value": name.split("-")[0]}]}
            for name in ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": VALIDATOR_DAEMONSET, "namespace": NAMESPACE, "labels": dict(labels),
                     "ownerReferences": [owner_reference(policy)]},
        "spec": {
            "selector": {"matchLabels": {"app": VALIDATOR_APP}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": {
                "nodeSelector": {DEPLOY_LABEL_PREFIX + "operator-validator": "true"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": "system-node-critical", "serviceAccountName": "nvidia-operator-validator",
                "initContainers": init,
                "containers": [{"name": "nvidia-operator-validator", "image": VALIDATOR_IMAGE,
                                "command": ["sh", "-c"],
                                "args": ["echo all validations are successful; sleep infinity"]}]}},
        },
    }


def cluster_policy(manager):
    """The ClusterPolicy, read from the store (the informer caches built-in kinds only); None when absent."""
    try:
        return manager.store.get(CLUSTER_POLICY_RESOURCE, CLUSTER_POLICY)
    except ApiError as error:
        if error.code == 404:
            return None
        raise


def auto_upgrade(policy) -> bool:
    spec = ((policy or {}).get("spec") or {}).get("driver") or {}
    return bool((spec.get("upgradePolicy") or {}).get("autoUpgrade"))


class GpuOperator:
    """The ClusterPolicy reconciler (labels, operand DaemonSets, status); runs on the controller thread."""

    def __init__(self, manager, config: OperatorConfig):
        self.manager = manager
        self.config = config
        self._boot_ids = {}        # node name -> bootID last seen

    def sync(self, now: float) -> None:
        policy = cluster_policy(self.manager)
        if policy is None or meta(policy).get("deletionTimestamp"):
            return
        driver_enabled = bool(((policy.get("spec") or {}).get("driver") or {}).get("enabled", True))
        self._label_nodes(policy)
        if driver_enabled:
            self._apply_daemonset(driver_daemonset_manifest(policy))
        self._apply_daemonset(validator_daemonset_manifest(policy))
        self._recreate_after_reboot()
        self._write_status(policy, now)

    # --- node labels --------------------------------------------------------------------------------------
    def _label_nodes(self, policy: dict) -> None:
        upgrade_enabled = auto_upgrade(policy)
        for node in self.manager.informer.items("nodes"):
            labels = meta(node).get("labels") or {}
            if labels.get(GPU_NODE_LABEL) != "true":
                continue
            wanted = {GPU_PRESENT_LABEL: "true"}
            wanted.update({DEPLOY_LABEL_PREFIX + operand: "true" for operand in DEPLOY_OPERANDS
                           if DEPLOY_LABEL_PREFIX + operand not in labels})
            patch = {key: value for key, value in wanted.items() if labels.get(key) != value}
            annotations = meta(node).get("annotations") or {}
            annotation_patch = {}
            if upgrade_enabled and annotations.get(UPGRADE_ENABLED_ANNOTATION) != "true":
                annotation_patch[UPGRADE_ENABLED_ANNOTATION] = "true"
            elif not upgrade_enabled and UPGRADE_ENABLED_ANNOTATION in annotations:
                annotation_patch[UPGRADE_ENABLED_ANNOTATION] = None
            metadata = {key: value for key, value in (("labels", patch), ("annotations", annotation_patch)) if value}
            if metadata:
                self.manager.patch("nodes", node, {"metadata": metadata})

    # --- operand DaemonSets -------------------------------------------------------------------------------
    def _apply_daemonset(self, wanted: dict) -> None:
        current = self.manager.informer.get("daemonsets", meta(wanted)["name"], NAMESPACE)
        if current is None:
            self.manager.create("daemonsets", wanted, namespace=NAMESPACE)
            return
        spec = current.get("spec") or {}
        if spec.get("template") != wanted["spec"]["template"] or spec.get("updateStrategy") != \
                wanted["spec"]["updateStrategy"]:
            updated = copy.deepcopy(current)
            updated["spec"]["template"] = wanted["spec"]["template"]
            updated["spec"]["updateStrategy"] = wanted["spec"]["updateStrategy"]
            updated["metadata"].pop("resourceVersion", None)
            result = self.manager.store.update("daemonsets", updated, namespace=NAMESPACE)
            self.manager.informer.observe("daemonsets", result)

    # --- reboots ------------------------------------------------------------------------------------------
    def _recreate_after_reboot(self) -> None:
        newest = newest_revision_hash(self.manager)
        pods = {(pod.get("spec") or {}).get("nodeName"): pod for pod in driver_pods(self.manager)}
        for node in self.manager.informer.items("nodes"):
            name = meta(node)["name"]
            boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
            previous = self._boot_ids.get(name)
            self._boot_ids[name] = boot_id
            if previous is None or previous == boot_id or name not in pods:
                continue
            pod = pods[name]
            if newest and (meta(pod).get("labels") or {}).get("controller-revision-hash") != newest:
                self.manager.delete("pods", pod, grace_period_seconds=0)

    # --- status -------------------------------------------------------------------------------------------
    def _write_status(self, policy: dict, now: float) -> None:
        ready = True
        for name in (DRIVER_DAEMONSET, VALIDATOR_DAEMONSET):
            daemonset = self.manager.informer.get("daemonsets", name, NAMESPACE)
            status = (daemonset or {}).get("status") or {}
            if daemonset is None or status.get("numberReady", 0) != status.get("desiredNumberScheduled", 0):
                ready = False
        state = "ready" if ready else "notReady"
        current = policy.get("status") or {}
        if current.get("state") == state:
            return
        since = rfc3339(now)
        conditions = [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since,
             "reason": "Reconciled" if ready else "OperandNotReady",
             "message": "" if ready else "ClusterPolicy is not ready, states not ready: [state-driver]"},
            {"type": "Error", "status": "False", "lastTransitionTime": since, "reason": "Ready" if ready else
             "OperandNotReady", "message": ""}]
        self.manager.patch(CLUSTER_POLICY_RESOURCE, policy, {"status": {"state": state, "namespace": NAMESPACE,
                                                                   "conditions": conditions}},
                           subresource="status")


def driver_daemonset(manager):
    return manager.informer.get("daemonsets", DRIVER_DAEMONSET, NAMESPACE)


def driver_pods(manager) -> list:
    return [pod for pod in manager.informer.items("pods", NAMESPACE)
            if (meta(pod).get("labels") or {}).get("app") == DRIVER_APP and (pod.get("spec") or {}).get("nodeName")]


def newest_revision_hash(manager):
    """`controller-revision-hash` of the driver DaemonSet's newest ControllerRevision (what the upgrade
    controller compares each pod's label with), None before the DaemonSet controller made one."""
    daemonset = driver_daemonset(manager)
    if daemonset is None:
        return None
    uid = meta(daemonset).get("uid")
    revisions = [rev for rev in manager.informer.items("controllerrevisions", NAMESPACE)
                 if any(ref.get("uid") == uid for ref in meta(rev).get("ownerReferences") or [])]
    if not revisions:
        return None
    newest = max(revisions, key=lambda rev: int(rev.get("revision") or 0))
    return (meta(newest).get("labels") or {}).get("controller-revision-hash")


def pod_in_sync(pod: dict, newest: str) -> bool:
    return not pod_is_terminating(pod) and (meta(pod).get("labels") or {}).get("controller-revision-hash") == newest
