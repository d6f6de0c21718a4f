"""What a kubeadm-joined node shows its host side, for a node twin: the kubelet's files, its systemd unit and a
running ``kubelet`` stand-in holding ``/var/lib/kubelet/device-plugins/kubelet.sock``.

The Kubernetes side of the node (Node object, heartbeats, device plugin) is the kube twin's (``kube/sim``); this
is only what tools on the node see: ``systemctl is-active kubelet``, the device-plugin directory and socket, the
kubeconfig and flag files. nsinit calls ``install_kubelet_files`` before chroot at each boot (files are written
once, on the node's disk, so an operator's changes stay) and ``start_kubelet_at_boot`` after it: the unit is
enabled, so it starts at every boot, as systemd would start it.
"""
from __future__ import annotations

import os

from gpulab.osutil import in_root, write_file
from gpulab.systemctl import deferred_at_boot, enabled_state, start_unit

KUBELET_ROOT_DIR = "/var/lib/kubelet"
DEVICE_PLUGIN_DIR = KUBELET_ROOT_DIR + "/device-plugins"
KUBELET_SOCKET = DEVICE_PLUGIN_DIR + "/kubelet.sock"
KUBELET_UNIT = "kubelet.service"
UNIT_PATH = "/lib/systemd/system/" + KUBELET_UNIT
WANTS_LINK = "/etc/systemd/system/multi-user.target.wants/" + KUBELET_UNIT
KUBELET_BINARY = "/usr/bin/kubelet"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
CA_CERT = "/etc/kubernetes/pki/ca.crt"
KUBELET_PKI_DIR = KUBELET_ROOT_DIR + "/pki"
KUBELET_CLIENT_CURRENT = KUBELET_PKI_DIR + "/kubelet-client-current.pem"

UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

# kubeadm's drop-in (the stand-in does not expand $VARS, so the flags are spelled out)
KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml
"""

KUBEADM_FLAGS = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock '
                 '--pod-infra-container-image=registry.k8s.io/pause:3.10"\n')

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
"""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /etc/kubernetes/pki/ca.crt
    server: %(server)s
  name: %(cluster)s
contexts:
- context:
    cluster: %(cluster)s
    user: system:node:%(node)s
  name: system:node:%(node)s@%(cluster)s
current-context: system:node:%(node)s@%(cluster)s
preferences: {}
users:
- name: system:node:%(node)s
  user:
    client-certificate: %(client)s
    client-key: %(client)s
"""

# The kubelet stand-in the unit runs: reads its KubeletConfiguration (``--config``) as the kubelet does at start and
# refuses to start where the real one does (see KUBELET_REFUSALS), keeps the CPU manager's checkpoint
# (``cpu_manager_state``, refused when it names another policy), then binds the device-plugin registration socket
# (a stale one is replaced; nothing needs to answer on it) and holds it; the file stays after a stop, as the real
# kubelet leaves it. A small `python3 -S` script, not the gpulab package (it runs on every node all the time), so
# it reads the config's top-level scalars and one level of mappings, all the checks below need.
STANDIN = """#!/usr/bin/python3 -S
# gpulab node twin: kubelet stand-in (lab/gpulab/kubeadm.py); the node's Kubernetes side is the lab's kube twin
import ctypes, json, os, signal, socket, sys, time, zlib
ctypes.CDLL(None).prctl(15, b"kubelet", 0, 0, 0)  # PR_SET_NAME: `pgrep kubelet` finds it, as on a real node
path = "%(socket)s"
root_dir = "%(root)s"


def scalar(text):
    text = text.split(" #")[0].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\\"":
        return text[1:-1]
    return text


def read_config(config_path):
    config, parent = {}, None
    with open(config_path) as stream:
        for line in stream:
            if not line.strip() or line.lstrip().startswith("#") or ":" not in line or line.lstrip().startswith("-"):
                continue
            key, _, value = line.partition(":")
            if not line[0].isspace():
                parent = key.strip()
                config[parent] = scalar(value) if value.strip() else {}
            elif parent is not None and isinstance(config.get(parent), dict):
                config[parent][key.strip()] = scalar(value)
    return config


def refuse(message):
    sys.stderr.write("E0000 %%s\\n" %% message)
    sys.stderr.write("F0000 failed to run Kubelet: %%s\\n" %% message)
    sys.exit(1)


def percent(config, key, default):
    value = config.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        refuse("failed to load kubelet config file: %%s: %%s is not an integer" %% (key, value))


args = sys.argv[1:]
config_path = None
for index, arg in enumerate(args):
    if arg.startswith("--config="):
        config_path = arg.split("=", 1)[1]
    elif arg == "--config" and index + 1 < len(args):
        config_path = args[index + 1]
config = {}
if config_path:
    try:
        config = read_config(config_path)
    except OSError as error:
        refuse("failed to load kubelet config file, path: %%s, error: %%s" %% (config_path, error))
cpu_policy = config.get("cpuManagerPolicy") or "none"
topology_policy = config.get("topologyManagerPolicy") or "none"
high = percent(config, "imageGCHighThresholdPercent", 85)
low = percent(config, "imageGCLowThresholdPercent", 80)
errors = []
if not 0 <= high <= 100:
    errors.append("invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) %%d must be "
                  "between 0 and 100, inclusive" %% high)
if not 0 <= low <= 100:
    errors.append("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) %%d must be "
                  "between 0 and 100, inclusive" %% low)
if low >= high:
    errors.append("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) %%d must be less "
                  "than imageGCHighThresholdPercent (--image-gc-high-threshold) %%d" %% (low, high))
if topology_policy not in ("none", "best-effort", "restricted", "single-numa-node"):
    errors.append("invalid configuration: topologyManagerPolicy (--topology-manager-policy) %%r must be one of: "
                  "[none best-effort restricted single-numa-node]" %% topology_policy)
if errors:
    refuse("kubelet config validation: [%%s]" %% ", ".join(errors))
if cpu_policy not in ("none", "static"):
    refuse("unknown policy: \\"%%s\\"" %% cpu_policy)
reserved = config.get("reservedSystemCPUs") or any(
    (config.get(group) or {}).get("cpu") not in (None, "", "0") for group in ("kubeReserved", "systemReserved")
    if isinstance(config.get(group), dict))
if cpu_policy == "static" and not reserved:
    refuse("[cpumanager] unable to determine reserved CPU resources for static policy")
state_path = os.path.join(root_dir, "cpu_manager_state")
try:
    with open(state_path) as stream:
        checkpoint = json.load(stream).get("policyName")
except FileNotFoundError:
    checkpoint = None
except ValueError:
    checkpoint = "(corrupted)"
if checkpoint is not None and checkpoint != cpu_policy:
    refuse("start cpu manager error: could not restore state from checkpoint: configured policy \\"%%s\\" differs "
           "from state checkpoint policy \\"%%s\\", please drain this node and delete the CPU manager checkpoint "
           "file \\"%%s\\" before restarting Kubelet" %% (cpu_policy, checkpoint, state_path))
if checkpoint is None:
    default_set = "" if cpu_policy == "none" else "0-%%d" %% ((os.cpu_count() or 1) - 1)
    body = {"policyName": cpu_policy, "defaultCpuSet": default_set}
    body["checksum"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())  # the twin's, not the kubelet's FNV
    os.makedirs(root_dir, exist_ok=True)
    with open(state_path, "w") as stream:
        json.dump(body, stream)
os.makedirs(os.path.dirname(path), exist_ok=True)
if os.path.lexists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(16)
print("I0000 kubelet stand-in of the gpulab node twin (flags: %%s)" %% " ".join(args), flush=True)
print("I0000 cpuManagerPolicy=%%s topologyManagerPolicy=%%s imageGCHighThresholdPercent=%%d "
      "imageGCLowThresholdPercent=%%d" %% (cpu_policy, topology_policy, high, low), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
""" % {"socket": KUBELET_SOCKET, "root": KUBELET_ROOT_DIR}


def install_kubelet_files(merged: str, node_name: str, cluster_name: str = "kubernetes",
                          api_server: str = "https://127.0.0.1:6443") -> None:
    """The kubeadm layout on the node's disk (files already there are kept) and the kubelet stand-in binary."""
    once = {
        UNIT_PATH: UNIT,
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROPIN,
        KUBELET_ROOT_DIR + "/kubeadm-flags.env": KUBEADM_FLAGS,
        KUBELET_ROOT_DIR + "/config.yaml": KUBELET_CONFIG,
        KUBELET_CONF: KUBECONFIG % {"server": api_server, "cluster": cluster_name, "node": node_name,
                                    "client": KUBELET_CLIENT_CURRENT},
    }
    first_time = not os.path.exists(in_root(merged, UNIT_PATH))
    for path, text in once.items():
        if not os.path.exists(in_root(merged, path)):
            write_file(in_root(merged, path), text, 0o600 if path.endswith(".conf") and "kubernetes" in path
                       else 0o644)
    for directory in (DEVICE_PLUGIN_DIR, "/etc/kubernetes/manifests", "/etc/kubernetes/pki", KUBELET_PKI_DIR):
        os.makedirs(in_root(merged, directory), exist_ok=True)
    if first_time:  # kubeadm's packages enable the unit
        link = in_root(merged, WANTS_LINK)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.lexists(link):
            os.symlink(UNIT_PATH, link)
    write_file(in_root(merged, KUBELET_BINARY), STANDIN, 0o755)


def install_kubelet_credentials(root: str, node_name: str, cluster_name: str, api_server: str, ca_pem: str,
                                client_pem: str, stamp: str) -> None:
    """What ``kubeadm join`` leaves a node to reach the API server as itself, on a running node's root (the daemon
    calls it once the Kubernetes twin serves, through ``/proc/PID/root``): the cluster CA, the kubelet's client
    certificate and key in one file (``kubelet-client-<stamp>.pem``, linked from ``kubelet-client-current.pem`` as
    the kubelet's certificate rotation leaves it) and ``kubelet.conf`` pointing at ``api_server``."""
    write_file(in_root(root, CA_CERT), ca_pem, 0o644)
    issued = "%s/kubelet-client-%s.pem" % (KUBELET_PKI_DIR, stamp)
    write_file(in_root(root, issued), client_pem, 0o600)
    current = in_root(root, KUBELET_CLIENT_CURRENT)
    if os.path.lexists(current):
        os.unlink(current)
    os.symlink(issued, current)
    write_file(in_root(root, KUBELET_CONF), KUBECONFIG % {"server": api_server, "cluster": cluster_name,
                                                          "node": node_name, "client": KUBELET_CLIENT_CURRENT}, 0o600)


def start_kubelet_at_boot(log) -> None:
    """After chroot: an enabled kubelet unit starts at boot (the host's enabled units do not: they are not the
    node's)."""
    if KUBELET_UNIT in deferred_at_boot():
        return  # a oneshot unit ordered Before=kubelet.service runs first; the boot sequence starts kubelet after it
    if enabled_state(KUBELET_UNIT) == "enabled" and start_unit(KUBELET_UNIT) != 0:
        log("kubelet.service failed to start at boot")
