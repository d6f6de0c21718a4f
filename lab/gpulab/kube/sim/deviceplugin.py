"""The NVIDIA device plugin and GPU Feature Discovery as the twin models them (pure functions).

What the plugin advertises comes from the GPUs the node's loaded driver exposes
(NodeView.visible_gpus()), so labels and allocatable follow a driver upgrade + reboot:
- `single` MIG strategy: `nvidia.com/gpu` = GPUs (or the MIG devices, when every GPU is in MIG mode); a plugin
  starting on a layout it refuses (two MIG profiles, MIG devices beside whole GPUs) crash-loops with its error;
- `mixed`: `nvidia.com/gpu` for GPUs without MIG plus `nvidia.com/mig-<profile>` per MIG profile;
- DRA: no extended resources; one resource.k8s.io ResourceSlice per node (driver gpu.nvidia.com).
With a plugin config (the Helm chart's `config.name`: a ConfigMap volume and the config-manager), the node label
`nvidia.com/device-plugin.config` picks a named config of the ConfigMap (`select_config`); its time-slicing
`replicas` multiply the GPUs advertised, under `nvidia.com/gpu` or a renamed resource (`renameByDefault`:
`nvidia.com/gpu.shared`), and GFD labels `nvidia.com/gpu.replicas`, `nvidia.com/gpu.sharing-strategy` and the
`-SHARED` product suffix (NVIDIA/k8s-device-plugin `api/config/v1/replicas.go`, `internal/lm/resource.go`,
`cmd/config-manager/main.go`).
Log texts are those the k8s-device-plugin prints (v0.12 style lines, e.g. NVIDIA/k8s-device-plugin#303).
"""

from __future__ import annotations

import time

NAMESPACE = "kube-system"
DAEMONSET_NAME = "nvidia-device-plugin-daemonset"
POD_LABELS = {"name": "nvidia-device-plugin-ds", "app": "nvidia-device-plugin-ds"}
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DRA_DRIVER = "gpu.nvidia.com"
# Node Feature Discovery's PCI label for vendor 0x10de: what makes a node a "GPU node" for the
# plugin's DaemonSet even when no driver is loaded (then the plugin crash-loops, as on real nodes).
GPU_NODE_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GFD_LABEL_PREFIX = "nvidia.com/"

NVML_LIBRARY_NOT_FOUND = ("could not load NVML library: libnvidia-ml.so.1: cannot open shared object file: "
                          "No such file or directory")


def is_device_plugin_pod(pod: dict) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (pod.get("metadata") or {}).get("namespace") == NAMESPACE and labels.get("app") == POD_LABELS["app"]


def daemonset_manifest() -> dict:
    """The static DaemonSet of NVIDIA/k8s-device-plugin `deployments/static/nvidia-device-plugin.yml`."""
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET_NAME, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"name": POD_LABELS["name"]}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(POD_LABELS)},
                "spec": {
                    "nodeSelector": {GPU_NODE_LABEL: "true"},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [{
                        "name": "nvidia-device-plugin-ctr", "image": IMAGE,
                        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "true"}],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
                    }],
                    "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                },
            },
        },
    }


# The plugin's config (the Helm chart's `config.name`/`config.default`; GPU Operator: ClusterPolicy
# `devicePlugin.config`): the ConfigMap is mounted into the pod, the config-manager picks one of its keys by the
# node's label (else DEFAULT_CONFIG, else the fallbacks `named` = a key "default", `single` = the only key).
CONFIG_LABEL = "nvidia.com/device-plugin.config"
CONFIG_FALLBACKS = ("named", "single")


def config_source(pod: dict):
    """{namespace, name, default} of the plugin config a pod mounts (a ConfigMap volume of the config-manager,
    with its DEFAULT_CONFIG); None: the pod runs without one (flags only, as the static manifest)."""
    spec = pod.get("spec") or {}
    config_maps = [(volume.get("configMap") or {}).get("name") for volume in spec.get("volumes") or []]
    config_maps = [name for name in config_maps if name]
    if not config_maps:
        return None
    default = ""
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for env in container.get("env") or []:
            if env.get("name") == "DEFAULT_CONFIG" and env.get("value"):
                default = env["value"]
    return {"namespace": (pod.get("metadata") or {}).get("namespace") or NAMESPACE, "name": config_maps[0],
            "default": default}


def select_config(label_value: str, default: str, available) -> tuple:
    """(config name, None) the config-manager links for this node, or (None, its error): a label or default that
    names no key of the ConfigMap is an error, as in `cmd/config-manager` (the plugin then does not start)."""
    names = sorted(available)
    if not names:
        return None, "no configuration files available"
    for wanted in (label_value, default):
        if wanted:
            if wanted not in names:
                return None, "specified config %s does not exist" % wanted
            return wanted, None
    if "named" in CONFIG_FALLBACKS and "default" in names:
        return "default", None
    if "single" in CONFIG_FALLBACKS and len(names) == 1:
        return names[0], None
    return None, "no config was set, no default was provided, and all fallbacks failed"


def sharing_of(config_text: str) -> dict:
    """What one named config says about sharing whole GPUs: {strategy, replicas, rename} for `nvidia.com/gpu`
    (strategy `time-slicing`, `mps` or `none`; rename "" when the resource keeps its name). Raises ValueError on
    a config the plugin refuses."""
    import yaml   # PyYAML: the config is YAML, as in the ConfigMap
    try:
        config = yaml.safe_load(config_text or "") or {}
    except yaml.YAMLError as error:
        raise ValueError("unable to parse config file: %s" % error)
    if not isinstance(config, dict):
        raise ValueError("unable to parse config file: not a mapping")
    if config.get("version", "v1") != "v1":
        raise ValueError("unknown version: %s" % config.get("version"))
    sharing = config.get("sharing") or {}
    for strategy, key in (("mps", "mps"), ("time-slicing", "timeSlicing")):
        replicated = sharing.get(key) or {}
        for resource in replicated.get("resources") or []:
            if resource.get("name") != GPU_RESOURCE:
                continue
            replicas = resource.get("replicas")
            if not isinstance(replicas, int) or replicas < 1:
                raise ValueError("unable to validate config: number of replicas must be >= 1 for %s" % GPU_RESOURCE)
            if replicas == 1:
                continue
            rename = resource.get("rename") or ""
            if not rename and replicated.get("renameByDefault"):
                rename = GPU_RESOURCE + ".shared"
            return {"strategy": strategy, "replicas": replicas, "rename": rename}
    return {"strategy": "none", "replicas": 1, "rename": ""}


def config_log(when: float, label_value: str, config: str, error=None) -> str:
    """What the config-manager prints when the label changes (and its error, after which it exits)."""
    lines = ["Label change detected: %s=%s" % (CONFIG_LABEL, label_value)]
    if error:
        lines.append("Error: %s" % error)
    else:
        lines += ["Updating to config: %s" % config, "Successfully updated to config: %s" % config,
                  "Sending signal 'hangup' to 'nvidia-device-plugin'", "Successfully sent signal",
                  'Received signal "hangup", shutting down.', "Loading configuration.",
                  "Running with config: %s" % config]
    return "".join("%s %s\n" % (_log_time(when), line) for line in lines)


def mig_resource_name(profile: str) -> str:
    return MIG_RESOURCE_PREFIX + profile


def extended_resources(gpus: list, mig_strategy: str = "single", sharing=None) -> dict:
    """Resource name -> device count the plugin registers with the kubelet (`sharing`: `sharing_of` a config)."""
    counts = _extended_resources(gpus, mig_strategy)
    if sharing and sharing["replicas"] > 1 and GPU_RESOURCE in counts:
        whole = counts.pop(GPU_RESOURCE)
        name = sharing["rename"] or GPU_RESOURCE
        counts[name] = counts.get(name, 0) + whole * sharing["replicas"]
    return counts


def _extended_resources(gpus: list, mig_strategy: str) -> dict:
    if mig_strategy == "mixed":
        counts = {GPU_RESOURCE: sum(1 for gpu in gpus if not gpu.get("mig_enabled"))}
        for gpu in gpus:
            for device in gpu.get("mig_devices") or [] if gpu.get("mig_enabled") else []:
                name = mig_resource_name(device["profile"])
                counts[name] = counts.get(name, 0) + 1
        return counts
    if gpus and all(gpu.get("mig_enabled") for gpu in gpus):
        return {GPU_RESOURCE: sum(len(gpu.get("mig_devices") or []) for gpu in gpus)}
    return {GPU_RESOURCE: len(gpus)}


def product_label(gpu_name: str) -> str:
    return "-".join(gpu_name.split())


def gfd_labels(gpus: list, driver_version, mig_capable: bool, mig_strategy: str = "single", sharing=None) -> dict:
    """GPU Feature Discovery labels for the node; empty when NVML shows no GPU (GFD then labels nothing).
    With a plugin config (`sharing`), also its sharing strategy, its replicas and the `-SHARED` product suffix
    (replicas > 1 under the resource's own name)."""
    if not gpus or not driver_version:
        return {}
    first = gpus[0]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product_label(first["name"]),
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(first.get("memory_mib") or 0),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "true" if mig_capable else "false",
        "nvidia.com/mig.strategy": mig_strategy,
    }
    labels.update(_driver_version_labels(driver_version))
    if sharing is not None:
        labels["nvidia.com/gpu.sharing-strategy"] = sharing["strategy"]
        if sharing["replicas"] > 1:
            labels["nvidia.com/gpu.replicas"] = str(sharing["replicas"])
            if not sharing["rename"]:
                labels["nvidia.com/gpu.product"] += "-SHARED"
    if mig_strategy == "mixed":
        for name, count in extended_resources(gpus, "mixed").items():
            if name.startswith(MIG_RESOURCE_PREFIX):
                labels["nvidia.com/%s.count" % name[len("nvidia.com/"):]] = str(count)
    return labels


def _driver_version_labels(driver_version: str) -> dict:
    parts = driver_version.split(".")
    labels = {"nvidia.com/cuda.driver-version.full": driver_version,
              "nvidia.com/cuda.driver-version.major": parts[0]}
    if len(parts) > 1:
        labels["nvidia.com/cuda.driver-version.minor"] = parts[1]
    if len(parts) > 2:
        labels["nvidia.com/cuda.driver-version.revision"] = parts[2]
    return labels


GFD_LABEL_KEYS = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count",
                  "nvidia.com/gpu.memory", "nvidia.com/gpu.replicas", "nvidia.com/mig.capable",
                  "nvidia.com/mig.strategy", "nvidia.com/gpu.sharing-strategy")


def is_gfd_label(key: str) -> bool:
    """A label GFD writes (others under `nvidia.com/`, e.g. the GPU Operator's, are not its to remove)."""
    return key in GFD_LABEL_KEYS or key.startswith(GFD_LABEL_PREFIX + "cuda.") or (
        key.startswith(MIG_RESOURCE_PREFIX) and key.endswith(".count"))


def apply_gfd_labels(current_labels: dict, wanted_gfd_labels: dict, not_owned=()) -> dict:
    """Node labels with every GFD-owned label replaced by the wanted set (keys in `not_owned` left alone)."""
    kept = {key: value for key, value in (current_labels or {}).items()
            if not is_gfd_label(key) or key in not_owned}
    kept.update({key: value for key, value in wanted_gfd_labels.items() if key not in not_owned})
    return kept


def dra_device_classes() -> list:
    """The DeviceClasses the NVIDIA DRA driver installs: whole GPUs and MIG devices."""
    classes = []
    for name, device_type in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        expression = "device.driver == '%s' && device.attributes['%s'].type == '%s'" % (
            DRA_DRIVER, DRA_DRIVER, device_type)
        classes.append({"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass", "metadata": {"name": name},
                        "spec": {"selectors": [{"cel": {"expression": expression}}]}})
    return classes


def resource_slice(node_name: str, node_uid: str, gpus: list, driver_version, generation: int,
                   api_version: str = "resource.k8s.io/v1beta1") -> dict:
    """The DRA driver's ResourceSlice for one node: a device per GPU and per MIG device."""
    devices = []
    for gpu in gpus:
        devices.append(_dra_device("gpu-%d" % gpu["index"], gpu, "gpu", driver_version, gpu.get("memory_mib") or 0))
        for mig_index, mig in enumerate(gpu.get("mig_devices") or [] if gpu.get("mig_enabled") else []):
            devices.append(_dra_device("gpu-%d-mig-%d" % (gpu["index"], mig_index), dict(gpu, uuid=mig["uuid"]),
                                       "mig", driver_version, None, profile=mig["profile"]))
    return {
        "apiVersion": api_version, "kind": "ResourceSlice",
        "metadata": {"name": "%s-%s" % (node_name, DRA_DRIVER),
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                          "controller": True}]},
        "spec": {"driver": DRA_DRIVER, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def _dra_device(name: str, gpu: dict, device_type: str, driver_version, memory_mib, profile=None) -> dict:
    attributes = {"type": {"string": device_type}, "uuid": {"string": gpu["uuid"]},
                  "productName": {"string": gpu["name"]}, "index": {"int": gpu["index"]}}
    if driver_version:
        attributes["driverVersion"] = {"version": driver_version}
    if profile:
        attributes["profile"] = {"string": profile}
    capacity = {"memory": {"value": "%dMi" % memory_mib}} if memory_mib else {}
    return {"name": name, "basic": {"attributes": attributes, "capacity": capacity}}


def _log_time(when: float) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(when))


def startup_log(resources: dict, when: float) -> str:
    """What a healthy plugin prints until it has registered each resource with the kubelet."""
    stamp = _log_time(when)
    lines = ["Loading NVML", "Starting FS watcher.", "Starting OS watcher.", "Retreiving plugins."]
    for name in sorted(resources):
        socket = "/var/lib/kubelet/device-plugins/%s.sock" % name.replace("nvidia.com/", "nvidia-")
        lines += ["Starting GRPC server for '%s'" % name, "Starting to serve '%s' on %s" % (name, socket),
                  "Registered device plugin for '%s' with Kubelet" % name]
    return "".join("%s %s\n" % (stamp, line) for line in lines)


def kubelet_restart_log(resources: dict, when: float) -> str:
    """Lines a running plugin adds when the kubelet's socket is recreated and it re-registers."""
    stamp = _log_time(when)
    lines = ["inotify: /var/lib/kubelet/device-plugins/kubelet.sock created, restarting.",
             "Stopping to serve '%s' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock" % GPU_RESOURCE]
    return "".join("%s %s\n" % (stamp, line) for line in lines) + startup_log(resources, when)


def unhealthy_log(lost_uuids: list, when: float) -> str:
    """What the plugin's health checker prints when NVML loses devices (e.g. an Xid 79 critical error)."""
    stamp = _log_time(when)
    return "".join("%s '%s' device marked unhealthy: %s\n" % (stamp, GPU_RESOURCE, uuid) for uuid in lost_uuids)


# Why NVML failed -> (what go-nvml/NVML says, the NVML return code name).
NVML_FAILURES = {
    "library_not_found": (NVML_LIBRARY_NOT_FOUND, "ERROR_LIBRARY_NOT_FOUND"),
    "driver_not_loaded": ("Driver Not Loaded", "ERROR_DRIVER_NOT_LOADED"),
    "version_mismatch": ("Driver/library version mismatch", "ERROR_LIB_RM_VERSION_MISMATCH"),
}


def nvml_failure_log(when: float, failure: str = "library_not_found") -> str:
    """The crash a plugin with FAIL_ON_INIT_ERROR=true prints when NVML cannot be initialized."""
    stamp = _log_time(when)
    text, code = NVML_FAILURES[failure]
    lines = [
        "Loading NVML",
        "Failed to initialize NVML: %s." % text,
        "If this is a GPU node, did you set the docker default runtime to `nvidia`?",
        "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
        "You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start",
        "If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on"
        " GPU nodes",
        "Error: failed to initialize NVML: %s" % code,
    ]
    return "".join("%s %s\n" % (stamp, line) for line in lines)


# The crashes of runbook case 3 besides NVML (NVIDIA/k8s-device-plugin internal/plugin/server.go `Start`,
# cmd/nvidia-device-plugin/main.go `startPlugins`, internal/rm/device_map.go): what the plugin prints before it exits.
PLUGIN_SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


def stale_socket_log(when: float) -> str:
    """The plugin cannot listen on its socket: a stale one is in the way (bind: address already in use)."""
    error = "listen unix %s: bind: address already in use" % PLUGIN_SOCKET
    lines = ["Loading NVML", "Starting FS watcher.", "Starting OS watcher.", "Retreiving plugins.",
             "Starting GRPC server for '%s'" % GPU_RESOURCE,
             "Could not start device plugin for '%s': %s" % (GPU_RESOURCE, error),
             "Failed to start plugin: %s" % error]
    return "".join("%s %s\n" % (_log_time(when), line) for line in lines)


def registration_failure_log(when: float) -> str:
    """The plugin serves its socket but the kubelet's registration socket refuses it."""
    error = ('rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial '
             'unix %s: connect: connection refused"' % KUBELET_SOCKET)
    lines = ["Loading NVML", "Starting FS watcher.", "Starting OS watcher.", "Retreiving plugins.",
             "Starting GRPC server for '%s'" % GPU_RESOURCE,
             "Starting to serve '%s' on %s" % (GPU_RESOURCE, PLUGIN_SOCKET),
             "Could not register device plugin: %s" % error,
             "Stopping to serve '%s' on %s" % (GPU_RESOURCE, PLUGIN_SOCKET),
             "Failed to start plugin: %s" % error]
    return "".join("%s %s\n" % (_log_time(when), line) for line in lines)


SINGLE_MORE_THAN_ONE_TYPE = "invalid MIG configuration: more than one MIG device type present on node"
SINGLE_NOT_UNIFORM = "all devices on the node must be configured with the same migEnabled value"


def single_strategy_error(gpus: list):
    """Why the single strategy refuses the node's MIG layout (the plugin's device map, internal/rm/device_map.go:
    every MIG device of one type, and no whole GPU beside MIG devices); None when it takes it. A GPU in MIG mode
    without MIG devices is in neither map."""
    profiles = {device["profile"] for gpu in gpus if gpu.get("mig_enabled") for device in gpu.get("mig_devices") or []}
    if len(profiles) > 1:
        return SINGLE_MORE_THAN_ONE_TYPE
    if profiles and any(not gpu.get("mig_enabled") for gpu in gpus):
        return SINGLE_NOT_UNIFORM
    return None


def mig_strategy_log(when: float, mig_strategy: str, error: str = SINGLE_MORE_THAN_ONE_TYPE) -> str:
    """The node's MIG layout does not fit the plugin's strategy: single with more than one MIG profile, or MIG
    devices beside whole GPUs (`error`: which, as single_strategy_error says; mixed: the strategy MPS refuses)."""
    if mig_strategy == "mixed":
        error = "unable to validate flags: using --mig-strategy=mixed is not supported with MPS"
    else:
        error = ("error getting plugins: unable to create plugins: failed to construct resource managers: error "
                 "building device map: %s" % error)
    lines = ["Loading NVML", "Loading configuration.", 'Running with config: {"flags": {"migStrategy": "%s"}}'
             % mig_strategy, "error starting plugins: %s" % error]
    return "".join("%s %s\n" % (_log_time(when), line) for line in lines)
