"""The lab daemon: one background supervisor per state dir; it owns every state change of the fleet twin.

Started by ``gpulab up`` as ``python -m gpulab.daemon DIR`` (its own session, log ``DIR/daemon.log``), it reads
the settings ``up`` left in ``DIR/lab.json``, creates and boots the nodes, starts the Kubernetes twin when
``gpulab.kube.sim.cluster`` imports, then serves JSON-lines requests on ``DIR/control.sock`` (status, fault,
clear, mok-confirm, power, down) and watches the nodes' reboot requests until ``down``.
"""
from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import shutil
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback

from gpulab import bastion as fleet_bastion, inventory, kubeadm, netns, noderuntime, personality, rancherlayout, sshkeys
from gpulab.bridge import TcpBridge, connect_tcp, listening
from gpulab.events import EventLog
from gpulab.faults import CLUSTER_FAULTS, FaultError, parse_fault
from gpulab.bmc import BmcFleet
from gpulab.kube.api import tls as kube_tls
from gpulab.labmetrics import LabMetrics
from gpulab.layer import nvidia_function
from gpulab.node import Node, NodeView
from gpulab.osutil import kill_pids, pid_namespace, pids_in_namespace, process_name, read_json, unmount_all_under, \
    wait_namespace_empty, write_json

LAB_FILE = "lab.json"
CONTROL_SOCKET = "control.sock"
DAEMON_LOG = "daemon.log"
ALWAYS_RUNFILES = ("615.71.09",)
IP_PREFIX = "127.0.1."
IP_RESERVATION_PREFIX = b"\0gpulab-ip-"   # abstract unix socket names: the kernel drops them with their owner
BOOT_WORKERS = 4
POLL_S = 0.2


def node_name(index: int) -> str:
    return "gpu-node-%02d" % index


def address_free(ip: str) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((ip, 22))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def reserve_address(ip: str):
    """A socket holding the abstract name ``@gpulab-ip-<ip>`` for the lab's lifetime (the kernel drops it when the
    daemon dies), or None if another lab holds it. A node's address stays ours while the node reboots."""
    reservation = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        reservation.bind(IP_RESERVATION_PREFIX + ip.encode())
        return reservation
    except OSError:
        reservation.close()
        return None


def allocate_ips(count: int, first_host: int) -> tuple:
    """(``count`` consecutive free 127.0.1.N addresses from N = ``first_host`` on, their reservations)."""
    start = first_host
    while start + count - 1 <= 254:
        block = [IP_PREFIX + str(start + offset) for offset in range(count)]
        reservations = []
        for ip in block:
            reservation = reserve_address(ip)
            if reservation is None or not address_free(ip):
                if reservation is not None:
                    reservation.close()
                break
            reservations.append(reservation)
        if len(reservations) == count:
            return block, reservations
        for reservation in reservations:
            reservation.close()
        start += len(reservations) + 1
    raise RuntimeError("no %d free consecutive addresses in %s%d-254" % (count, IP_PREFIX, first_host))


def ip_hex(ip: str) -> str:
    """127.0.1.11 as /proc/net/tcp writes it (little-endian hex)."""
    return "".join("%02X" % int(part) for part in reversed(ip.split(".")))


def ssh_clients_of(ips: list) -> list:
    """PIDs of host ssh processes (ControlPersist masters included) with a TCP connection to one of ``ips``:22."""
    wanted = {ip_hex(ip) + ":0016" for ip in ips}
    inodes = set()
    with open("/proc/net/tcp") as stream:
        next(stream)
        for line in stream:
            fields = line.split()
            if fields[2] in wanted:
                inodes.add(fields[9])
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % entry) as stream:
                if stream.read().strip() != "ssh":
                    continue
            links = [os.readlink("/proc/%s/fd/%s" % (entry, fd)) for fd in os.listdir("/proc/%s/fd" % entry)]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            pids.append(int(entry))
    return pids


def running_nodes(state_dir: str) -> list:
    """[(node.json dict, pid namespace)] of this state dir's nodes whose PID 1 still runs."""
    own_namespace = pid_namespace(os.getpid())
    nodes_dir = os.path.join(state_dir, "nodes")
    running = []
    for name in sorted(os.listdir(nodes_dir)) if os.path.isdir(nodes_dir) else []:
        node = read_json(os.path.join(nodes_dir, name, "node.json")) or {}
        namespace = pid_namespace(node["holder_pid"]) if node.get("holder_pid") else None
        if namespace and namespace != own_namespace:
            running.append((node, namespace))
    return running


def kill_ssh_clients_of_running_nodes(state_dir: str) -> None:
    """Host ssh clients (ControlPersist masters, ProxyJump hops) of our nodes, while our sshds still hold the
    addresses: once a node is gone another lab may take its address, and its clients are not ours to kill."""
    ips = [node["ip"] for node, _namespace in running_nodes(state_dir)]
    ips += [ip for ip in [fleet_bastion.running_address(state_dir)] if ip]
    if ips:
        kill_pids(ssh_clients_of(ips))


def kill_node_processes(state_dir: str) -> None:
    """Every process of every node of this state dir (from node.json), whoever started it."""
    for _node, namespace in running_nodes(state_dir):
        kill_pids(pids_in_namespace(namespace), signal.SIGKILL)
        wait_namespace_empty(namespace)


def kill_prometheus(lab: dict) -> None:
    """The lab's Prometheus (``up --prometheus``), also when the daemon that started it was killed."""
    pid = (lab.get("metrics") or {}).get("prometheus_pid")
    if pid and process_name(pid) == "prometheus":
        kill_pids([pid], signal.SIGKILL)


def cleanup_state_dir(state_dir: str, keep_logs: bool = False) -> dict:
    """Remove every process, mount and file a lab made in ``state_dir`` (also when its daemon is gone)."""
    lab = read_json(os.path.join(state_dir, LAB_FILE)) or {}
    kill_prometheus(lab)
    kill_ssh_clients_of_running_nodes(state_dir)
    kill_node_processes(state_dir)
    fleet_bastion.sweep(state_dir)
    netns.sweep(state_dir, lab.get("network"))
    left_mounts = unmount_all_under(state_dir)
    keep = set(lab.get("preexisting", []))
    if keep_logs:
        keep |= {"events.jsonl", DAEMON_LOG}
    if left_mounts:
        return {"left_mounts": left_mounts}
    if lab.get("created_dir") and not keep_logs:
        shutil.rmtree(state_dir, ignore_errors=True)
    elif os.path.isdir(state_dir):
        for entry in os.listdir(state_dir):
            if entry not in keep:
                path = os.path.join(state_dir, entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
    return {"left_mounts": []}


class Lab:
    def __init__(self, state_dir: str):
        self.state_dir = os.path.abspath(state_dir)
        self.lab_file = os.path.join(self.state_dir, LAB_FILE)
        self.info = read_json(self.lab_file)
        settings = self.info["settings"]
        self.settings = settings
        self.keys_dir = os.path.join(self.state_dir, "keys")
        self.cache_dir = os.path.join(self.state_dir, "cache")
        self.nvidia_backend = settings.get("nvidia_backend") or "gpulab.nvidia"
        self.extra_pythonpath = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
        self.boot_delay_s = float(settings.get("boot_delay_s", 2.0))
        self.mok_timeout_s = float(settings.get("mok_timeout_s", 10.0))
        self.events = EventLog(self.state_dir)
        self.nodes = []
        self.by_name = {}
        self.cluster = None
        self.network = None          # with `up --bastion`: the fleet network namespace (gpulab.netns)
        self.bastion = None
        self.bridges = []
        self.metrics = LabMetrics(self)
        self.bmc = None              # with `up --bmc`: a Redfish BMC per node (gpulab.bmc)
        self.ip_reservations = []
        self.cluster_faults = {}     # node name -> cluster-side fault kinds forwarded to the kube twin
        self.armed_cluster_faults = {}   # node name -> cluster-side fault kinds armed for the node's next boot
        self.power_threads = {}
        self.stopping = threading.Event()
        self.server = None
        self.runfile_mirror = None
        self.package_mirror = None
        self._log_lock = threading.Lock()
        self._fake_paths = None

    # ---- helpers ------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        with self._log_lock:
            sys.stderr.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message))
            sys.stderr.flush()

    def save_info(self, **changes) -> None:
        self.info.update(changes)
        write_json(self.lab_file, self.info)

    def fake_binary_paths(self) -> dict:
        if self._fake_paths is None:
            try:
                self._fake_paths = dict(getattr(importlib.import_module(self.nvidia_backend),
                                                "FAKE_BINARY_PATHS", {}) or {})
            except ImportError:
                self._fake_paths = {}
        return self._fake_paths

    def node(self, name: str) -> Node:
        try:
            return self.by_name[name]
        except KeyError:
            raise FaultError("no node %r in this lab; nodes: %s" % (name, ", ".join(self.by_name)))

    # ---- up -----------------------------------------------------------------------------------------------
    def up(self) -> None:
        started = time.monotonic()
        self.events.emit("lab", "lab-starting", nodes=self.settings["nodes"])
        for sub in ("keys", "cache", "runfiles", "nodes"):
            os.makedirs(os.path.join(self.state_dir, sub), exist_ok=True)
        os.chmod(self.keys_dir, 0o700)
        sshkeys.generate_key(sshkeys.client_key_path(self.keys_dir), "gpulab-operator")
        with_bastion = bool(self.settings.get("bastion"))
        ips, self.ip_reservations = allocate_ips(self.settings["nodes"] + with_bastion,
                                                 int(self.settings.get("first_ip_host", 11)))
        if with_bastion:
            self.start_fleet_network(bastion_ip=ips.pop(), node_ips=ips)
        operator_mode = bool(self.settings.get("gpu_operator"))
        # GPU Operator mode: no host driver; the driver pods load --driver (the ClusterPolicy's version)
        node_os = personality.fleet_os(self.settings.get("os") or [], len(ips))
        node_containerd = noderuntime.fleet_containerd(self.settings.get("containerd") or [], len(ips))
        node_rancher = rancherlayout.fleet_rancher(self.settings.get("rancher") or [], len(ips))
        specs = [{"name": node_name(index + 1), "ip": ip, "profile": self.settings["profile"], "os": node_os[index],
                  "index": index, "driver": None if operator_mode else self.settings.get("driver"),
                  "containerd": node_containerd[index], "rancher": node_rancher[index]}
                 for index, ip in enumerate(ips)]
        keys = ("name", "ip", "profile", "os", "containerd", "rancher")
        self.save_info(nodes=[{k: spec[k] for k in keys} for spec in specs])
        secure_boot_nodes = set(self.settings.get("secure_boot_nodes") or [])
        package_mirror_vars = self.start_package_mirror()
        rocky_repo = self.package_mirror.rocky_repo() if self.package_mirror is not None else None
        runtime_debs = self.node_runtime_debs(sorted(set(node_containerd)))
        for spec in specs:
            node = Node(self, spec)
            node.create(bool(self.settings.get("secure_boot")) or node.name in secure_boot_nodes,
                        blacklist_nouveau=operator_mode, rocky_repo=rocky_repo,
                        extra_debs=runtime_debs[spec["containerd"]], rancher=spec["rancher"])
            if self.settings.get("dcgm"):   # `up --dcgm`: DCGM's dcgmi on the node's disk, as its package would
                node.nvidia("dcgmi.install")(root=os.path.join(node.tmpfs_dir, "upper"))
            if operator_mode:   # what the Operator's container-toolkit operand leaves on the node's disk
                node.nvidia("toolkitoperand.install")(root=os.path.join(node.tmpfs_dir, "upper"))
            self.nodes.append(node)
            self.by_name[node.name] = node
        self.write_runfiles()
        mirror_vars = dict(self.start_runfile_mirror(), **package_mirror_vars)
        paths = inventory.write_access_files(self.state_dir, self.settings["cluster_name"], self.info["nodes"],
                                             mirror_vars, bastion=self.info.get("bastion"))
        if self.bastion is not None:
            self.bastion.boot(self.network)
            self.bastion.open_door(self.network)
            self.bridge_into_fleet(self.runfile_mirror.url)
            if self.package_mirror is not None:
                self.bridge_into_fleet(self.package_mirror.url)
            self.events.emit("lab", "bastion-up", ip=self.bastion.ip)
        with concurrent.futures.ThreadPoolExecutor(BOOT_WORKERS) as pool:
            results = list(pool.map(lambda node: node.boot(), self.nodes))
        failed = [node.name for node, ok in zip(self.nodes, results) if not ok]
        if failed:
            raise RuntimeError("nodes did not come up: %s (see DIR/nodes/<name>/boot.log)" % ", ".join(failed))
        nodes_s = round(time.monotonic() - started, 3)
        self.start_cluster()
        if self.network is not None and (self.info.get("kube") or {}).get("api_url"):
            self.bridge_into_fleet(self.info["kube"]["api_url"])
        self.save_info(metrics=self.metrics.start(bool(self.settings.get("prometheus")),
                                                  self.settings.get("prometheus_rules") or [],
                                                  self.settings.get("scrape_interval") or "1s"))
        if self.settings.get("bmc"):
            self.bmc = BmcFleet(self)
            self.save_info(bmc=self.bmc.start())
        self.save_info(status="ready", inventory=paths["inventory"], ssh_config=paths["ssh_config"],
                       nodes_up_s=nodes_s, up_s=round(time.monotonic() - started, 3))
        self.events.emit("lab", "lab-up", nodes_up_s=nodes_s, up_s=self.info["up_s"])

    def node_runtime_debs(self, versions: list) -> dict:
        """``up --containerd 1.7|2.1``: containerd line -> the Debian packages its nodes unpack onto their disks
        (none for 1.6, the host's own); lab.json ``containerd`` records which package versions."""
        debs, packages = {}, {}
        for version in versions:
            deb = noderuntime.containerd_deb(version)
            debs[version] = [deb] if deb else []
            if deb:
                packages[version] = {"package_version": noderuntime.deb_version(deb), "deb": deb}
                self.log("containerd %s nodes: %s" % (version, deb))
        self.save_info(containerd=packages)
        return debs

    def start_fleet_network(self, bastion_ip: str, node_ips: list) -> None:
        """``up --bastion``: the namespace the nodes and the bastion boot in, before any of them."""
        self.network = netns.FleetNetwork.create(self.state_dir)
        self.save_info(network=self.network.info())
        self.bastion = fleet_bastion.Bastion(self.state_dir, bastion_ip, node_ips)
        self.bastion.create()
        self.save_info(bastion={"name": fleet_bastion.NAME, "ip": bastion_ip, "user": fleet_bastion.USER})

    def bridge_into_fleet(self, url: str) -> None:
        """A host service the nodes use (``http(s)://127.0.0.1:PORT``), at the same address in the fleet network."""
        host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        listener = listening(self.network.socket(), host, int(port))
        self.bridges.append(TcpBridge("to-host-%s" % port, listener, lambda: connect_tcp(host, int(port))).start())

    def write_runfiles(self) -> None:
        versions = list(dict.fromkeys(list(ALWAYS_RUNFILES) + list(self.settings.get("runfiles") or [])))
        write = nvidia_function(self.nvidia_backend, "runfile.write_runfile")
        # with cache_dir the NVIDIA layer prebuilds each version's modules once for all nodes
        install_s = float(self.settings.get("install_s") or 0)
        written = [write(dest_dir=os.path.join(self.state_dir, "runfiles"), version=version, cache_dir=self.cache_dir,
                         **({"install_s": install_s} if install_s else {}))
                   for version in versions]
        self.save_info(runfiles=written, apt_repo=self.build_apt_repo(versions))
        if self.settings.get("gpu_operator") and self.settings["driver"] not in versions:
            # the driver pods' modules, prebuilt once for all nodes (their driver container builds from the cache)
            version = self.settings["driver"]
            flavor = nvidia_function(self.nvidia_backend, "installer.Options")(version).flavor   # its default
            nvidia_function(self.nvidia_backend, "runfile.prebuild_modules")(self.cache_dir, version, flavor)

    def start_runfile_mirror(self) -> dict:
        """The loopback HTTP mirror of DIR/runfiles (with SHA256SUMS); returns the inventory variables that point
        the driver role at it."""
        mirror_class = nvidia_function(self.nvidia_backend, "mirror.RunfileMirror")
        self.runfile_mirror = mirror_class(os.path.join(self.state_dir, "runfiles")).start()
        self.save_info(runfile_mirror=self.runfile_mirror.url)
        return self.runfile_mirror.inventory_vars()

    def start_package_mirror(self) -> dict:
        """The loopback mirror of NVIDIA's package repositories (signed, NVIDIA's layout and names); returns the
        inventory variables that point the roles at it. A lab without it (no dpkg-scanpackages or gpg) still
        works for everything but the toolkit install."""
        if shutil.which("dpkg-scanpackages") is None or shutil.which("gpg") is None:
            return {}
        try:
            mirror_class = nvidia_function(self.nvidia_backend, "nvrepos.PackageMirror")
            # `up --cuda-repo VERSION`: also NVIDIA's CUDA repositories with the stub driver's packages
            cuda = {"driver_versions": tuple(self.settings["cuda_repo"])} if self.settings.get("cuda_repo") else {}
            self.package_mirror = mirror_class(os.path.join(self.state_dir, "nvidia-repos"), **cuda).start()
        except Exception as error:
            self.log("mirror of NVIDIA's package repositories not built: %s" % error)
            return {}
        self.save_info(package_mirror=self.package_mirror.url)
        return self.package_mirror.inventory_vars()

    def build_apt_repo(self, versions: list):
        """The package-method repository (``deb [trusted=yes] file:/opt/gpulab/cache/apt ./`` in a node), when the
        NVIDIA layer can build it; a lab without it still works for the runfile method."""
        if shutil.which("dpkg-scanpackages") is None:
            return None
        try:
            build = nvidia_function(self.nvidia_backend, "debs.build_repo")
            return build(os.path.join(self.cache_dir, "apt"), versions)["source_line"]
        except Exception as error:
            self.log("apt repository of the stub driver not built: %s" % error)
            return None

    def start_cluster(self) -> None:
        try:
            module = importlib.import_module("gpulab.kube.sim.cluster")
            cluster_class = module.KubeCluster
        except (ImportError, AttributeError) as error:
            self.log("Kubernetes twin not started: gpulab.kube.sim.cluster.KubeCluster unavailable (%s)" % error)
            self.save_info(kube=None)
            return
        views = [NodeView(node) for node in self.nodes]
        extra = {}
        if self.settings.get("gpu_operator"):
            extra["gpu_operator"] = module.OperatorConfig(self.settings["driver"],
                                                          float(self.settings.get("operator_time_scale") or 1.0))
        self.cluster = cluster_class(self.state_dir, views, api_only=int(self.settings.get("api_only") or 0),
                                     dra=bool(self.settings.get("dra")),
                                     mig_strategy=self.settings.get("mig_strategy") or "single", **extra)
        self.cluster.start()
        url = getattr(self.cluster, "url", None) or getattr(self.cluster, "api_url", None)
        self.save_info(kube={"api_url": url, "kubeconfig": os.path.join(self.state_dir, "kubeconfig")})
        self.install_kubelet_credentials(url)
        self.events.emit("lab", "kube-up", api_url=url)

    def install_kubelet_credentials(self, url) -> None:
        """Each running node gets what ``kubeadm join`` leaves: ``/etc/kubernetes/kubelet.conf`` pointing at the API
        twin (``url``: the node reaches it at that address, through the reverse bridge with ``--bastion``), the CA,
        and a client certificate ``CN=system:node:NAME, O=system:nodes`` that the twin authorizes on its own Node
        object only (``kube/api/nodeauth.py``)."""
        server = getattr(self.cluster, "server", None)
        if not url or server is None:
            return
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime())
        for node in self.nodes:
            if not node.is_running():
                continue
            cert, key = kube_tls.issue_client_certificate(server.ca_dir, "system:node:" + node.name, ["system:nodes"],
                                                          name="kubelet-" + node.name)
            client_pem = kube_tls.read_pem(cert) + kube_tls.read_pem(key)
            kubeadm.install_kubelet_credentials(node.root_path("/"), node.name, self.settings["cluster_name"], url,
                                                server.ca_pem, client_pem, stamp)

    # ---- supervision ----------------------------------------------------------------------------------------
    def supervise(self) -> None:
        while not self.stopping.is_set():
            for node in self.nodes:
                request = node.take_control_request()
                modprobe = node.take_modprobe_request()
                if modprobe is not None:
                    threading.Thread(target=self._guarded, args=(node.modprobe, modprobe), daemon=True).start()
                if request is not None:
                    self.start_power_action(node, request)
                elif node.status == "up" and not node.is_running() and not self.busy(node):
                    self.events.emit(node.name, "crashed", pid=node.holder_pid)
                    node.holder_pid = None
                    node.process = None
                    node.set_status("down", reason="crashed")
            self.stopping.wait(POLL_S)

    def busy(self, node: Node) -> bool:
        thread = self.power_threads.get(node.name)
        return thread is not None and thread.is_alive()

    def start_power_action(self, node: Node, request: dict) -> None:
        if self.busy(node):
            self.log("%s: ignoring %s while a power action runs" % (node.name, request))
            return
        self.events.emit(node.name, "power-request", **request)
        thread = threading.Thread(target=self._guarded, args=(self.power_action, node, request), daemon=True)
        self.power_threads[node.name] = thread
        thread.start()

    def _guarded(self, function, *args) -> None:
        try:
            function(*args)
        except Exception:
            self.log(traceback.format_exc())

    def power_action(self, node: Node, request: dict) -> None:
        # the ssh command that asked for the reboot must get its answer before sshd dies
        if request.get("source") != "host":
            time.sleep(1.0)
        node.shutdown(reason="%s (%s)" % (request.get("action"), request.get("program", "lab")))
        if request.get("action") == "poweroff":
            node.set_status("off")
            return
        self.boot_after_delay(node)

    def boot_after_delay(self, node: Node) -> None:
        if "reboot-hang" in node.faults:
            node.set_status("hung", reason="fault reboot-hang")
            return
        delay_s = self.boot_delay_s * (10 if "slow-boot" in node.faults else 1)
        if self.stopping.wait(delay_s):
            return
        if "reboot-hang" in node.faults:
            node.set_status("hung", reason="fault reboot-hang")
            return
        node.boot()

    def schedule_boot(self, node: Node, delay_s: float = 0) -> None:
        def run():
            if delay_s:
                self.stopping.wait(delay_s)
            if not self.stopping.is_set():
                node.boot()
        thread = threading.Thread(target=self._guarded, args=(run,), daemon=True)
        self.power_threads[node.name] = thread
        thread.start()

    # ---- requests -------------------------------------------------------------------------------------------
    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "status":
            return {"ok": True, "lab": self.status()}
        if op == "fault":
            if request.get("at_next_boot"):
                return self.arm_fault(request["node"], request["kind"])
            return self.fault(request["node"], request["kind"])
        if op == "clear":
            return self.clear(request["node"], request.get("kind"))
        if op == "mok-confirm":
            return {"ok": True, "message": self.node(request["node"]).mok_confirm()}
        if op == "power":
            return self.power(request["node"], request["action"])
        if op == "down":
            threading.Thread(target=self.down, args=(bool(request.get("keep_logs")),), daemon=True).start()
            return {"ok": True, "message": "stopping"}
        return {"ok": False, "error": "unknown op %r" % op}

    def status(self) -> dict:
        return {"name": self.settings["cluster_name"], "state_dir": self.state_dir,
                "status": self.info.get("status"), "daemon_pid": os.getpid(),
                "kube": self.info.get("kube"), "nodes": [self.node_summary(node) for node in self.nodes],
                "bastion": self.bastion.summary() if self.bastion is not None else None,
                "inventory": self.info.get("inventory"), "ssh_config": self.info.get("ssh_config")}

    def node_summary(self, node: Node) -> dict:
        summary = node.summary()
        summary["faults"] = summary["faults"] + list(self.cluster_faults.get(node.name, []))
        summary["armed_faults"] = summary["armed_faults"] + list(self.armed_cluster_faults.get(node.name, []))
        return summary

    def arm_fault(self, name: str, kind: str) -> dict:
        """``kind`` takes effect at the node's next boot: node faults as the node comes up, cluster faults when
        its kubelet sees the new bootID (the stale device-plugin ledger a reboot leaves, as in real life)."""
        node = self.node(name)
        parsed = parse_fault(kind)
        if parsed[0] != "cluster":
            node.arm_fault(kind)
            return {"ok": True, "fault": kind, "at": "next boot"}
        if self.cluster is None:
            return {"ok": False, "error": "fault %s needs the Kubernetes twin, which is not running" % kind}
        self.cluster.arm_fault(name, kind, lambda applied: self._armed_cluster_fault_applied(name, applied))
        armed = self.armed_cluster_faults.setdefault(name, [])
        if kind not in armed:
            armed.append(kind)
        self.events.emit(name, "fault-armed", fault=kind, scope="cluster", at="next boot")
        return {"ok": True, "fault": kind, "at": "next boot"}

    def _armed_cluster_fault_applied(self, name: str, kind: str) -> None:
        if kind in self.armed_cluster_faults.get(name, []):
            self.armed_cluster_faults[name].remove(kind)
        active = self.cluster_faults.setdefault(name, [])
        if kind not in active:
            active.append(kind)
        self.events.emit(name, "fault", fault=kind, scope="cluster", at="boot")

    def fault(self, name: str, kind: str) -> dict:
        node = self.node(name)
        parsed = parse_fault(kind)
        if parsed[0] == "cluster":
            if self.cluster is None:
                return {"ok": False, "error": "fault %s needs the Kubernetes twin, which is not running" % kind}
            self.cluster.apply_fault(name, kind)
            self.cluster_faults.setdefault(name, [])
            if kind not in self.cluster_faults[name]:
                self.cluster_faults[name].append(kind)
            self.events.emit(name, "fault", fault=kind, scope="cluster")
            return {"ok": True, "fault": kind}
        return {"ok": True, "fault": kind, "details": node.apply_fault(kind)}

    def clear(self, name: str, kind) -> dict:
        node = self.node(name)
        cleared = []
        if kind is not None:
            parse_fault(kind)
        active = self.cluster_faults.get(name, [])
        cluster_kinds = [kind] if kind in CLUSTER_FAULTS else (list(active) if kind is None else [])
        armed = self.armed_cluster_faults.get(name, [])
        if self.cluster is not None:
            for one in [k for k in armed if kind is None or k == kind]:
                self.cluster.clear_fault(name, one)
                armed.remove(one)
                self.events.emit(name, "fault-disarmed", fault=one, scope="cluster")
                cleared.append(one + " (armed)")
            for one in cluster_kinds:
                self.cluster.clear_fault(name, one)
                if one in active:
                    active.remove(one)
                    self.events.emit(name, "clear", fault=one, scope="cluster")
                    cleared.append(one)
        if kind not in CLUSTER_FAULTS:
            cleared += [one + " (armed)" for one in node.disarm(kind)]
            cleared += node.clear_fault(kind)
        return {"ok": True, "cleared": cleared}

    def power(self, name: str, action: str) -> dict:
        """Out-of-band power control, as a BMC would: cycle (reboot), off, on."""
        node = self.node(name)
        if action == "on":
            if node.holder_pid:
                return {"ok": False, "error": "node %s is already on" % name}
            self.schedule_boot(node)
        elif action in ("cycle", "off"):
            self.start_power_action(node, {"action": "reboot" if action == "cycle" else "poweroff",
                                           "program": "bmc", "source": "host"})
        else:
            return {"ok": False, "error": "power action must be on, off or cycle"}
        return {"ok": True}

    # ---- down -----------------------------------------------------------------------------------------------
    def down(self, keep_logs: bool = False) -> None:
        """Stop the kube twin and the nodes, sweep the state dir, exit; a failure is logged and the daemon still
        exits, so ``gpulab down`` sweeps what is left instead of waiting for a daemon that stays up."""
        try:
            self._take_down(keep_logs)
        except Exception:
            self.log("down failed:\n" + traceback.format_exc())
            os._exit(1)
        os._exit(0)

    def _take_down(self, keep_logs: bool) -> None:
        self.stopping.set()
        self.events.emit("lab", "lab-stopping")
        self.metrics.stop()
        if self.bmc is not None:
            self.bmc.stop()
        if self.cluster is not None:
            try:
                self.cluster.stop()
            except Exception:
                self.log("kube twin stop failed:\n" + traceback.format_exc())
        if self.runfile_mirror is not None:
            self.runfile_mirror.stop()
        if self.package_mirror is not None:
            self.package_mirror.stop()
        kill_ssh_clients_of_running_nodes(self.state_dir)
        for node in self.nodes:
            node.shutdown(reason="lab down")
        for bridge in self.bridges:
            bridge.stop()
        if self.bastion is not None:
            self.bastion.shutdown()
        if self.network is not None:
            self.network.stop(self.state_dir)
        self.events.emit("lab", "lab-down")
        if self.server is not None:
            threading.Thread(target=self.server.shutdown, daemon=True).start()
        cleanup_state_dir(self.state_dir, keep_logs=keep_logs)


class ControlHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            try:
                response = self.server.lab.handle(json.loads(line))
            except (FaultError, KeyError, ValueError) as error:
                response = {"ok": False, "error": str(error)}
            except Exception as error:
                self.server.lab.log(traceback.format_exc())
                response = {"ok": False, "error": "%s: %s" % (type(error).__name__, error)}
            self.wfile.write((json.dumps(response) + "\n").encode())
            self.wfile.flush()


class ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(state_dir: str) -> int:
    lab = Lab(state_dir)
    lab.save_info(daemon_pid=os.getpid(), status="starting")
    socket_path = os.path.join(lab.state_dir, CONTROL_SOCKET)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server = ControlServer(socket_path, ControlHandler)
    server.lab = lab
    lab.server = server
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=lab.down, daemon=True).start())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        lab.up()
    except Exception as error:
        lab.log(traceback.format_exc())
        lab.save_info(status="failed", error="%s: %s" % (type(error).__name__, error))
        lab.events.emit("lab", "lab-failed", error=str(error))
        # stay reachable so `gpulab status` shows why and `gpulab down` cleans up
    threading.Thread(target=lab._guarded, args=(lab.supervise,), daemon=True).start()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
