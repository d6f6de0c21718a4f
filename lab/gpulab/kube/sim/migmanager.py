"""The GPU Operator's MIG Manager (nvidia-mig-manager, NVIDIA/mig-parted) as the twin models it.

Only in GPU Operator mode (`gpulab up --gpu-operator`). `install(manager)` adds what the Operator's Helm chart
renders for it: the ConfigMap `default-mig-parted-config` in `gpu-operator`, whose `config.yaml` holds mig-parted's
named layouts (`version: v1`, `mig-configs: {NAME: [{devices: all | [indexes], mig-enabled: bool,
mig-devices: {PROFILE: COUNT}}]}`); a site adds its own layouts to it. `MigManager.sync(now)` (every controller
pass) does, for each MIG-capable node the Operator deploys it on (`nvidia.com/gpu.deploy.mig-manager=true`,
`nvidia.com/mig.capable=true`) whose Node has the label `nvidia.com/mig.config=NAME`, what the real one's
reconfigure script does when the label is set or changes and at every start of its pod (so after each boot of
the node and each new driver):
- `nvidia.com/mig.config.state=pending`;
- `nvidia-mig-parted apply` of layout NAME, here as the nvidia-smi commands it amounts to, run in the node with
  the driver's nvidia-smi (the Operator's driver root, as the runtime injects it): MIG mode per GPU (`-mig 1|0`
  then a GPU reset `-r`), then for a GPU whose MIG devices differ from the layout `mig -dci`, `mig -dgi` and
  `mig -cgi PROFILES -C`; a GPU already as the layout wants is left alone;
- `nvidia.com/mig.config.state=success` and a restart of the node's device-plugin pod (it reads the MIG devices
  when it starts), or `failed` (nvidia-smi's error in an Event) when a command failed or NAME is not in the
  ConfigMap. A failed layout is tried again only when the label, the layout, the boot or the driver changes.
Each apply leaves a Node Event (source `nvidia-mig-manager`, reason `MigConfigApplied` or `MigConfigFailed`)
naming the commands run. The twin's MIG Manager is no pod: it runs beside the Operator's reconciler, its commands
on a worker thread, the API writes on the controller thread.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ..api.errors import ApiError
from . import deviceplugin
from .driverpod import NAMESPACE
from .gpuinject import injected
from .objects import meta, pod_is_terminating

CONFIG_MAP = "default-mig-parted-config"
CONFIG_KEY = "config.yaml"
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
CAPABLE_LABEL = "nvidia.com/mig.capable"
COMPONENT = "nvidia-mig-manager"
# the chart's defaults for 80 GB A100/H100 (the profiles both share)
DEFAULT_CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "all-1g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.20gb": 4}}],
    "all-2g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}],
    "all-3g.40gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "all-4g.40gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1}}],
    "all-7g.80gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}],
    "all-balanced": [{"devices": "all", "mig-enabled": True,
                      "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
}


def config_map_manifest(configs: dict | None = None) -> dict:
    import yaml   # PyYAML, as the Operator's own files
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs or DEFAULT_CONFIGS}, sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {CONFIG_KEY: text}}


def install(manager) -> None:
    manager.create("configmaps", config_map_manifest(), namespace=NAMESPACE)


def parse_configs(text: str) -> dict:
    """`mig-configs` of a mig-parted config file (name -> list of entries); ValueError when it is not one."""
    import yaml
    data = yaml.safe_load(text or "") or {}
    configs = data.get("mig-configs") if isinstance(data, dict) else None
    if not isinstance(configs, dict):
        raise ValueError("no mig-configs in %s" % CONFIG_KEY)
    return configs


def wanted_layout(entries: list, gpu_indexes: list) -> dict:
    """GPU index -> None (MIG off) or the list of profiles, from a layout's entries (a later entry naming a GPU
    replaces what an earlier one said); GPUs no entry names are left out (left as they are)."""
    wanted = {}
    for entry in entries or []:
        devices = entry.get("devices", "all")
        indexes = list(gpu_indexes) if devices == "all" else [int(index) for index in devices]
        if not entry.get("mig-enabled"):
            profiles = None
        else:
            profiles = [name for name, count in (entry.get("mig-devices") or {}).items() for _ in range(int(count))]
        for index in indexes:
            if index in gpu_indexes:
                wanted[index] = profiles
    return wanted


def plan_commands(entries: list, gpus: list) -> list:
    """The nvidia-smi argument lists that turn `gpus` (NodeView.visible_gpus() shape) into the layout."""
    by_index = {gpu["index"]: gpu for gpu in gpus}
    commands = []
    for index, profiles in sorted(wanted_layout(entries, sorted(by_index)).items()):
        gpu = by_index[index]
        enabled = bool(gpu.get("mig_enabled"))
        if profiles is None:
            if enabled:
                commands += [["nvidia-smi", "-i", str(index), "-mig", "0"], ["nvidia-smi", "-i", str(index), "-r"]]
            continue
        current = sorted(device["profile"] for device in gpu.get("mig_devices") or [])
        if not enabled:
            commands += [["nvidia-smi", "-i", str(index), "-mig", "1"], ["nvidia-smi", "-i", str(index), "-r"]]
            current = []
        if current == sorted(profiles):
            continue
        if current:
            commands += [["nvidia-smi", "mig", "-i", str(index), "-dci"],
                         ["nvidia-smi", "mig", "-i", str(index), "-dgi"]]
        if profiles:
            commands.append(["nvidia-smi", "mig", "-i", str(index), "-cgi", ",".join(profiles), "-C"])
    return commands


class MigManager:
    """Applies each labelled node's layout (see the module text); runs on the controller thread."""

    def __init__(self, manager):
        self.manager = manager
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpulab-mig-manager")
        self._jobs = {}        # node name -> (future, key)
        self._done = {}        # node name -> key of the last apply (label, layout, boot, driver)
        self._parsed = None    # (ConfigMap resourceVersion, layouts, error)

    def sync(self, now: float) -> None:
        configs, config_error = self._configs()
        for kubelet in self.manager.kubelets:
            view = kubelet.view
            node = self.manager.informer.get("nodes", kubelet.name)
            labels = (meta(node).get("labels") or {}) if node else {}
            name = labels.get(CONFIG_LABEL)
            job = self._jobs.get(kubelet.name)
            if job is not None:
                if job[0].done():
                    del self._jobs[kubelet.name]
                    self._finish(kubelet.name, job, now)
                continue
            if node is None or not name or labels.get(DEPLOY_LABEL) != "true" or labels.get(CAPABLE_LABEL) != "true":
                continue
            if not view.is_up() or view.driver_version() is None:
                continue
            entries = (configs or {}).get(name)
            key = (name, json.dumps(entries, sort_keys=True), view.boot_id(), view.driver_version())
            if self._done.get(kubelet.name) == key:
                continue
            self._set_state(node, "pending")
            if entries is None:
                self._done[kubelet.name] = key
                self._set_state(node, "failed")
                self.manager.record_event(node, "MigConfigFailed", "MIG config %s not found in ConfigMap %s/%s%s" % (
                    name, NAMESPACE, CONFIG_MAP, ": " + config_error if config_error else ""), "Warning", COMPONENT)
                continue
            self._jobs[kubelet.name] = (self._executor.submit(self._apply, kubelet, entries), key)

    def _configs(self):
        """(layouts, None) or (None, why): read from the store (the informer caches no ConfigMaps), parsed once
        per resourceVersion."""
        try:
            config_map = self.manager.store.get("configmaps", CONFIG_MAP, namespace=NAMESPACE)
        except ApiError as error:
            if error.code == 404:
                return None, "no ConfigMap"
            raise
        version = meta(config_map).get("resourceVersion")
        if self._parsed is None or self._parsed[0] != version:
            try:
                self._parsed = (version, parse_configs((config_map.get("data") or {}).get(CONFIG_KEY)), None)
            except Exception as error:  # not a mig-parted file, or a YAML syntax error
                self._parsed = (version, None, str(error))
        return self._parsed[1], self._parsed[2]

    def _apply(self, kubelet, entries: list) -> tuple:
        """(ok, commands run, output): runs on the worker thread, never touches the API."""
        view = kubelet.view
        edits_of = getattr(view, "gpu_container_edits", None)
        try:
            commands = plan_commands(entries, view.visible_gpus())
            edits = edits_of() if callable(edits_of) else None
            run = []
            for argv in commands:
                run.append(" ".join(argv))
                real_argv, _env = injected(argv, {}, edits)
                exit_code, stdout, stderr = view.run(real_argv, timeout=60)
                if exit_code != 0:
                    return False, run, (stderr + stdout).strip()
            return True, run, ""
        except Exception as error:  # the node went down or the layout does not fit the GPUs
            return False, [], str(error)
        finally:
            self.manager.wake()

    def _finish(self, node_name: str, job: tuple, now: float) -> None:
        future, key = job
        ok, commands, error = future.result()
        self._done[node_name] = key
        node = self.manager.informer.get("nodes", node_name)
        if node is None:
            return
        summary = "; ".join(commands) or "nothing to change"
        if not ok:
            self._set_state(node, "failed")
            self.manager.record_event(node, "MigConfigFailed", "MIG config %s failed: %s (%s)" % (
                key[0], error, summary), "Warning", COMPONENT)
            return
        if commands:
            self._restart_device_plugin(node_name)
        self._set_state(node, "success")
        self.manager.record_event(node, "MigConfigApplied", "MIG config %s applied: %s" % (key[0], summary),
                                  component=COMPONENT)

    def _set_state(self, node: dict, state: str) -> None:
        if (meta(node).get("labels") or {}).get(STATE_LABEL) != state:
            self.manager.patch("nodes", node, {"metadata": {"labels": {STATE_LABEL: state}}})

    def _restart_device_plugin(self, node_name: str) -> None:
        for pod in self.manager.informer.items("pods", deviceplugin.NAMESPACE):
            if (pod.get("spec") or {}).get("nodeName") == node_name and deviceplugin.is_device_plugin_pod(pod) \
                    and not pod_is_terminating(pod):
                self.manager.delete("pods", pod)
