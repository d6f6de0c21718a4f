"""The twin's device plugin with a config (time-slicing): the node label `nvidia.com/device-plugin.config` picks a
named config of the plugin's ConfigMap, the plugin advertises GPUs x replicas under `nvidia.com/gpu` or the renamed
`nvidia.com/gpu.shared`, GFD labels replicas, sharing strategy and the `-SHARED` product suffix; a label naming no
config crash-loops the plugin with the config-manager's error (NVIDIA/k8s-device-plugin `cmd/config-manager`,
`api/config/v1/replicas.go`, `internal/lm/resource.go`). In-process cluster, no HTTPS.
"""
from __future__ import annotations

import pytest

from gpulab.kube.sim import deviceplugin
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for

CONFIGMAP = "nvidia-device-plugin-configs"
TIME_SLICED_4 = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
SHARED_2 = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
PLAIN = "version: v1\nflags:\n  migStrategy: none\n"


def plugin_config_patch(default=""):
    """What `helm upgrade --set config.name=CONFIGMAP` changes in the plugin's DaemonSet: the ConfigMap volume and
    the config-manager sidecar (merge patch: the lists are given whole)."""
    manifest = deviceplugin.daemonset_manifest()
    spec = manifest["spec"]["template"]["spec"]
    env = [{"name": "NODE_LABEL", "value": deviceplugin.CONFIG_LABEL},
           {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
           {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
           {"name": "DEFAULT_CONFIG", "value": default},
           {"name": "FALLBACK_STRATEGIES", "value": "named,single"}]
    containers = spec["containers"] + [{"name": "config-manager", "image": deviceplugin.IMAGE,
                                        "command": ["config-manager"], "env": env}]
    volumes = spec["volumes"] + [{"name": "available-configs", "configMap": {"name": CONFIGMAP}}]
    return {"spec": {"template": {"spec": {"containers": containers, "volumes": volumes}}}}


@pytest.fixture
def cluster(tmp_path):
    views = [FakeNodeView("gpu-0", gpus=make_gpus(8)), FakeNodeView("gpu-1", gpus=make_gpus(8))]
    kube = KubeCluster(str(tmp_path / "lab"), views, heartbeat_s=0.5, tick_s=0.05, crash_backoff_s=0.2,
                       container_start_s=0.3).start(serve=False)
    kube.store.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": CONFIGMAP, "namespace": deviceplugin.NAMESPACE},
                                     "data": {"ts-4": TIME_SLICED_4, "shared-2": SHARED_2, "default": PLAIN}})
    kube.store.patch("daemonsets", deviceplugin.DAEMONSET_NAME, plugin_config_patch(), "application/merge-patch+json",
                     namespace=deviceplugin.NAMESPACE)
    yield kube
    kube.stop()


def label(kube, node, value):
    kube.store.patch("nodes", node, {"metadata": {"labels": {deviceplugin.CONFIG_LABEL: value}}},
                     "application/merge-patch+json")


def advertised(kube, node):
    status = kube.store.get("nodes", node)["status"]
    return {name: (status["capacity"].get(name), value) for name, value in status["allocatable"].items()
            if name.startswith("nvidia.com/")}


def labels(kube, node):
    return kube.store.get("nodes", node)["metadata"]["labels"]


def plugin_pod(kube, node):
    pods = [pod for pod in kube.store.list("pods", deviceplugin.NAMESPACE, field_selector="spec.nodeName=%s" % node)[0]
            if not pod["metadata"].get("deletionTimestamp")]
    return pods[0] if pods else None


def configured(kube):
    """Both nodes' plugins run with the config (the DaemonSet rolled), the fallback config "default"."""
    for node in ("gpu-0", "gpu-1"):
        wait_for(lambda: labels(kube, node).get("nvidia.com/gpu.sharing-strategy") == "none", 20, "configured plugin")
        wait_for(lambda: advertised(kube, node) == {"nvidia.com/gpu": ("8", "8")}, 10, "the default config")


def test_named_config_selection_follows_the_config_manager():
    names = {"default", "ts-4"}
    assert deviceplugin.select_config("ts-4", "", names) == ("ts-4", None)
    assert deviceplugin.select_config("", "", names) == ("default", None)            # fallback "named"
    assert deviceplugin.select_config("", "", {"only"}) == ("only", None)            # fallback "single"
    assert deviceplugin.select_config("nope", "", names) == (None, "specified config nope does not exist")
    assert deviceplugin.select_config("", "", {"a", "b"})[0] is None


def test_sharing_of_a_config_says_replicas_and_the_resource_name():
    assert deviceplugin.sharing_of(TIME_SLICED_4) == {"strategy": "time-slicing", "replicas": 4, "rename": ""}
    assert deviceplugin.sharing_of(SHARED_2) == {"strategy": "time-slicing", "replicas": 2,
                                                 "rename": "nvidia.com/gpu.shared"}
    assert deviceplugin.sharing_of(PLAIN) == {"strategy": "none", "replicas": 1, "rename": ""}
    with pytest.raises(ValueError):
        deviceplugin.sharing_of(TIME_SLICED_4.replace("replicas: 4", "replicas: 0"))


def test_the_label_picks_the_config_and_the_plugin_advertises_gpus_times_replicas(cluster):
    configured(cluster)

    label(cluster, "gpu-0", "ts-4")
    wait_for(lambda: advertised(cluster, "gpu-0") == {"nvidia.com/gpu": ("32", "32")}, 10, "4 replicas of 8 GPUs")
    wait_for(lambda: labels(cluster, "gpu-0").get("nvidia.com/gpu.replicas") == "4", 10, "GFD replicas label")
    shown = labels(cluster, "gpu-0")
    assert shown["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert shown["nvidia.com/gpu.product"].endswith("-SHARED") and shown["nvidia.com/gpu.count"] == "8"
    assert advertised(cluster, "gpu-1") == {"nvidia.com/gpu": ("8", "8")}       # the other node keeps its own
    log = cluster.logs.get(deviceplugin.NAMESPACE, plugin_pod(cluster, "gpu-0")["metadata"]["name"], None)
    assert "Label change detected: nvidia.com/device-plugin.config=ts-4" in log

    label(cluster, "gpu-0", "shared-2")
    wait_for(lambda: advertised(cluster, "gpu-0").get("nvidia.com/gpu.shared") == ("16", "16"), 10, "renamed")
    # the kubelet keeps the resource the plugin stopped serving, nothing allocatable (its checkpoint)
    assert advertised(cluster, "gpu-0")["nvidia.com/gpu"][1] == "0"
    wait_for(lambda: labels(cluster, "gpu-0").get("nvidia.com/gpu.replicas") == "2", 10, "GFD replicas label")
    assert not labels(cluster, "gpu-0")["nvidia.com/gpu.product"].endswith("-SHARED")


def test_a_label_naming_no_config_crash_loops_the_plugin_until_the_label_is_put_back(cluster):
    configured(cluster)
    label(cluster, "gpu-0", "ts-9")
    wait_for(lambda: advertised(cluster, "gpu-0") == {"nvidia.com/gpu": ("8", "0")}, 10, "nothing allocatable")
    pod = plugin_pod(cluster, "gpu-0")
    waiting = pod["status"]["containerStatuses"][0]["state"].get("waiting") or {}
    assert waiting.get("reason") == "CrashLoopBackOff", pod["status"]
    log = cluster.logs.get(deviceplugin.NAMESPACE, pod["metadata"]["name"], None)
    assert "specified config ts-9 does not exist" in log
    assert labels(cluster, "gpu-0")["nvidia.com/gpu.sharing-strategy"] == "none"   # GFD keeps what it showed

    label(cluster, "gpu-0", "ts-4")
    wait_for(lambda: advertised(cluster, "gpu-0") == {"nvidia.com/gpu": ("32", "32")}, 15, "back after back-off")
