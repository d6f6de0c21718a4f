# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The roles' per-OS vars and Kubernetes manifests, rendered by ansible-core's own templating."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19 renders every string
    def trust_as_template(value):
        return value

COLLECTION_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..")
ROLES_DIR = os.path.join(COLLECTION_DIR, "roles")


def role_vars(role, *files, **overrides):
    init_plugin_loader()
    loader = DataLoader()
    variables = {}
    for name in ("defaults/main.yml",) + files:
        variables.update(_load_trusted(loader, os.path.join(ROLES_DIR, role, name)))
    variables.update(overrides)
    return Templar(loader=loader, variables=variables)


def _load_trusted(loader, path):
    """A role's vars file as a play loads it: its strings are templates (ansible-core 2.19 marks them trusted)."""
    try:
        return loader.load_from_file(path, trusted_as_template=True)
    except TypeError:  # ansible-core < 2.19
        return loader.load_from_file(path)


def render(templar, expression):
    return templar.template(trust_as_template(expression))


# container_runtime: Ubuntu 22.04/24.04 and Debian share the Debian family file, Rocky Linux 9 the RedHat one.
@pytest.mark.parametrize("family, expected_specs, repo_url", [
    ("Debian", ["nvidia-container-toolkit=1.17.8-1", "nvidia-container-toolkit-base=1.17.8-1",
                "libnvidia-container-tools=1.17.8-1", "libnvidia-container1=1.17.8-1"],
     "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"),
    ("RedHat", ["nvidia-container-toolkit-1.17.8-1", "nvidia-container-toolkit-base-1.17.8-1",
                "libnvidia-container-tools-1.17.8-1", "libnvidia-container1-1.17.8-1"],
     "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"),
])
def test_toolkit_packages_are_pinned_per_os_family(family, expected_specs, repo_url):
    templar = role_vars("container_runtime", "vars/main.yml", "vars/%s.yml" % family)
    assert render(templar, "{{ container_runtime_os_package_specs }}") == expected_specs
    assert render(templar, "{{ container_runtime_os_repo_url }}") == repo_url
    assert family in render(templar, "{{ container_runtime_supported_os_families }}")


def test_toolkit_version_and_release_reach_every_package():
    templar = role_vars("container_runtime", "vars/main.yml", "vars/Debian.yml",
                        container_runtime_toolkit_version="1.18.0-rc.2", container_runtime_toolkit_package_release="1")
    assert set(render(templar, "{{ container_runtime_os_package_specs }}")) == {
        "nvidia-container-toolkit=1.18.0-rc.2-1", "nvidia-container-toolkit-base=1.18.0-rc.2-1",
        "libnvidia-container-tools=1.18.0-rc.2-1", "libnvidia-container1=1.18.0-rc.2-1"}


@pytest.mark.parametrize("family, repo_url", [
    ("Debian", "http://mirror.example.internal/libnvidia-container/stable/deb/$(ARCH)"),
    ("RedHat", "http://mirror.example.internal/libnvidia-container/stable/rpm/$basearch")])
def test_an_inventory_points_the_toolkit_repository_and_key_at_a_mirror(family, repo_url):
    # the locations are role defaults, so the inventory outranks them (role vars/ would outrank the inventory)
    defaults = _load_trusted(DataLoader(), os.path.join(ROLES_DIR, "container_runtime", "defaults", "main.yml"))
    assert defaults["container_runtime_toolkit_repo_key_url"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    templar = role_vars("container_runtime", "vars/main.yml", "vars/%s.yml" % family,
                        container_runtime_toolkit_repo_base_url="http://mirror.example.internal/libnvidia-container")
    assert render(templar, "{{ container_runtime_os_repo_url }}") == repo_url


@pytest.mark.parametrize("ctk_exists, generator, expected", [
    (True, "auto", "nvidia-ctk"), (False, "auto", "facts"), (True, "facts", "facts")])
def test_cdi_generator_follows_the_toolkit(ctk_exists, generator, expected):
    templar = role_vars("container_runtime", "vars/main.yml", container_runtime_cdi_generator=generator,
                        container_runtime_nvidia_ctk_stat={"stat": {"exists": ctk_exists}})
    assert render(templar, "{{ container_runtime_cdi_generator_effective }}") == expected


def manifests(**overrides):
    """device_plugin_manifests, the variable the role's k8s task applies (its template lookup included)."""
    overrides.setdefault("ansible_search_path", [os.path.join(ROLES_DIR, "device_plugin")])
    templar = role_vars("device_plugin", "vars/main.yml", **overrides)
    return render(templar, "{{ device_plugin_manifests }}")


def test_daemonset_matches_nvidia_static_manifest():
    # Facts of NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml (v0.17.1).
    [daemonset] = manifests()
    assert daemonset["metadata"] == {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"}
    spec = daemonset["spec"]
    assert spec["selector"] == {"matchLabels": {"name": "nvidia-device-plugin-ds"}}
    assert spec["updateStrategy"] == {"type": "RollingUpdate"}
    assert spec["template"]["metadata"]["labels"] == {"name": "nvidia-device-plugin-ds"}
    pod = spec["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert "nodeSelector" not in pod and "affinity" not in pod
    [container] = pod["containers"]
    assert container["name"] == "nvidia-device-plugin-ctr"
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert container["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                                {"name": "MIG_STRATEGY", "value": "none"}]
    assert container["volumeMounts"] == [{"name": "kubelet-device-plugins-dir",
                                          "mountPath": "/var/lib/kubelet/device-plugins"}]
    assert pod["volumes"] == [{"name": "kubelet-device-plugins-dir",
                               "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}]


def test_kubelet_root_dir_moves_the_host_path_only():
    [daemonset] = manifests(device_plugin_kubelet_root_dir="/data/kubelet/", device_plugin_mig_strategy="mixed",
                            device_plugin_fail_on_init_error=True,
                            device_plugin_image_digest="sha256:" + "a" * 64)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["volumes"][0]["hostPath"]["path"] == "/data/kubelet/device-plugins"
    container = pod["containers"][0]
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/kubelet/device-plugins"
    assert container["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "true"},
                                {"name": "MIG_STRATEGY", "value": "mixed"}]
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin@sha256:" + "a" * 64


def test_time_slicing_adds_configmap_and_a_daemonset_for_the_labelled_nodes():
    plain, config_map, sliced = manifests(device_plugin_time_slicing_enabled=True,
                                          device_plugin_time_slicing_replicas=4,
                                          device_plugin_time_slicing_rename_by_default=True,
                                          device_plugin_mig_strategy="single")
    assert plain["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/device-plugin.config", "operator": "NotIn",
                               "values": ["time-slicing"]}]}]
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "nvidia-device-plugin-daemonset-time-slicing"
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == {
        "version": "v1", "flags": {"migStrategy": "single", "failOnInitError": False},
        "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": False,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    pod = sliced["spec"]["template"]["spec"]
    assert sliced["spec"]["selector"]["matchLabels"] != plain["spec"]["selector"]["matchLabels"], \
        "two DaemonSets with one selector would fight over the same pods"
    assert pod["nodeSelector"] == {"nvidia.com/device-plugin.config": "time-slicing"}
    container = pod["containers"][0]
    assert {"name": "CONFIG_FILE", "value": "/etc/nvidia-device-plugin/config.yaml"} in container["env"]
    assert {"name": "device-plugin-config", "configMap": {"name": config_map["metadata"]["name"]}} in pod["volumes"]
