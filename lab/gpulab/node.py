"""Host side of one GPU node twin: its disk, boots and shutdowns, faults, and the NodeView for the kube twin.

A node lives in ``DIR/nodes/<name>/``. Its disk is a tmpfs mounted on the host at ``tmpfs/`` (overlay upper
and work dirs; it survives node reboots and goes with ``down``). A boot is one ``unshare`` process whose child
(``gpulab.nsinit``, then a reaper) is PID 1 of the node's own PID, mount and UTS namespaces; killing it ends
the boot. Only the daemon calls these methods (one lock per node); ``node.json`` is written only here.
"""
from __future__ import annotations

import copy
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

from gpulab import containerdcri, driverload, faults as node_faults, noderuntime, personality, rancherlayout, sshkeys
from gpulab.faults import FaultError, parse_fault
from gpulab.layer import nvidia_function
from gpulab.nvidia.profiles import CLI_PROFILES
from gpulab.osutil import LAB_DIR, end_boot, mounts_under, pid_namespace, pids_in_namespace, port_accepts, read_json, \
    write_file, write_json

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

DISK_SIZE = "4g"
BOOT_TIMEOUT_S = 60
SSH_WAIT_S = 10


class Node:
    """One node twin. ``lab`` is the daemon (for events, logging, settings)."""

    def __init__(self, lab, spec: dict):
        self.lab = lab
        self.name = spec["name"]
        self.ip = spec["ip"]
        self.profile = spec["profile"]
        self.os = spec.get("os") or personality.DEFAULT_OS
        self.index = spec["index"]
        self.dir = os.path.join(lab.state_dir, "nodes", self.name)
        self.tmpfs_dir = os.path.join(self.dir, "tmpfs")
        self.merged_dir = os.path.join(self.dir, "merged")
        self.run_dir = os.path.join(self.dir, "run")
        self.firmware_dir = os.path.join(self.dir, "firmware")
        self.control_dir = os.path.join(self.dir, "control")
        self.disk_size = DISK_SIZE
        self.lock = threading.RLock()
        self.process = None          # the unshare process of the current boot
        self.holder_pid = None       # PID 1 of the node, as the host sees it
        self.booted_efi = None
        self.mok_event = threading.Event()
        self.state = read_json(os.path.join(self.dir, "node.json")) or {
            "name": self.name, "ip": self.ip, "profile": self.profile, "os": self.os, "status": "created",
            "boot_id": None,
            "boots": 0, "faults": [], "machine_id": uuid.uuid4().hex,
            "preinstall_driver": spec.get("driver"), "module_loaded": False, "kernel_driver_version": None,
            "holder_pid": None, "last_boot_s": None, "efi_before_fault": None}

    # ---- persistent state -------------------------------------------------------------------------------
    def save(self) -> None:
        self.state["holder_pid"] = self.holder_pid
        write_json(os.path.join(self.dir, "node.json"), self.state)

    def set_status(self, status: str, **details) -> None:
        self.state["status"] = status
        self.save()
        self.lab.events.emit(self.name, status, **details)

    @property
    def status(self) -> str:
        return self.state["status"]

    @property
    def faults(self) -> list:
        return self.state["faults"]

    def hw(self) -> dict:
        return read_json(os.path.join(self.run_dir, "hw.json"), {"gpus": []})

    def write_hw(self, hw: dict) -> None:
        write_json(os.path.join(self.run_dir, "hw.json"), hw)

    def efi_path(self) -> str:
        return os.path.join(self.firmware_dir, "efi.json")

    def efi(self):
        return read_json(self.efi_path())

    def nvidia(self, dotted: str):
        """A function of the NVIDIA layer, e.g. ``self.nvidia("boot.apply_xid")``."""
        return nvidia_function(self.lab.nvidia_backend, dotted)

    def write_faults_file(self) -> None:
        write_json(os.path.join(self.run_dir, "faults.json"), list(self.faults))

    # ---- creation -----------------------------------------------------------------------------------------
    def create(self, secure_boot: bool, blacklist_nouveau: bool = False, rocky_repo: dict | None = None,
               extra_debs: list = (), rancher: str | None = None) -> None:
        """Directories, the disk (tmpfs) with the node's personality, host key, hw.json and efi.json of a new node;
        with ``blacklist_nouveau`` (GPU Operator nodes, prepared as NVIDIA's docs ask) nouveau never binds the GPUs;
        ``rocky_repo``: where a Rocky node's BaseOS repository is (``personality.write_identity``); ``extra_debs``:
        packages unpacked onto the disk (``up --containerd``: Debian's containerd, ``noderuntime``); ``rancher``: the
        k3s/RKE2 install on the disk (``up --rancher``, ``rancherlayout``)."""
        for path in (self.dir, self.tmpfs_dir, self.merged_dir, self.run_dir, self.firmware_dir, self.control_dir):
            os.makedirs(path, exist_ok=True)
        if not mounts_under(self.tmpfs_dir):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=%s" % self.disk_size,
                            "gpulab-%s" % self.name, self.tmpfs_dir], check=True)
        self.hide_host_homes()
        personality.write_identity(os.path.join(self.tmpfs_dir, "upper"), self.os, rocky_repo)
        for deb in extra_debs:
            noderuntime.unpack_into(os.path.join(self.tmpfs_dir, "upper"), deb)
        if rancher:
            rancherlayout.write_layout(os.path.join(self.tmpfs_dir, "upper"), rancher)
        if blacklist_nouveau:
            write_file(os.path.join(self.tmpfs_dir, "upper", "etc", "modprobe.d", "blacklist-nouveau.conf"),
                       "blacklist nouveau\noptions nouveau modeset=0\n")
        sshkeys.generate_key(sshkeys.host_key_path(self.lab.keys_dir, self.name), "root@%s" % self.name)
        self.write_hw(self.initial_hw())
        write_json(self.efi_path(), self.initial_efi(self.hw(), secure_boot))
        self.write_faults_file()
        self.save()

    def hide_host_homes(self) -> None:
        """A new node's /root and /home start empty, not with the host's keys and caches: opaque overlay dirs."""
        for path, mode in (("root", 0o700), ("home", 0o755)):
            upper = os.path.join(self.tmpfs_dir, "upper", path)
            if not os.path.isdir(upper):
                os.makedirs(upper, mode=mode)
                os.chmod(upper, mode)
                os.setxattr(upper, "trusted.overlay.opaque", b"y")
        for name in ("bashrc", "profile"):  # what Debian's base-files gives root
            source = "/usr/share/base-files/dot." + name
            target = os.path.join(self.tmpfs_dir, "upper", "root", "." + name)
            if os.path.exists(source) and not os.path.exists(target):
                shutil.copyfile(source, target)

    def initial_hw(self) -> dict:
        return self.nvidia("profiles.make_hw")(self.name, CLI_PROFILES.get(self.profile, self.profile))

    def initial_efi(self, hw: dict, secure_boot: bool) -> dict:
        return self.nvidia("mok.default_efi_state")(efi=bool(hw.get("efi", True)), secure_boot=bool(secure_boot))

    # ---- boot ---------------------------------------------------------------------------------------------
    def boot(self) -> bool:
        """Firmware (MOK), then the namespace boot; True once sshd answers (or is deliberately off)."""
        with self.lock:
            if self.holder_pid:
                return True
            started = time.monotonic()
            self.set_status("booting", boot=self.state["boots"] + 1)
        efi = self.run_firmware()
        with self.lock:
            return self._boot_namespace(efi, started)

    def run_firmware(self):
        """What the firmware and shim's MokManager do before the kernel: returns the EFI state to boot with."""
        efi = self.efi()
        if efi is None:
            return None
        if "secure-boot-no-key" in self.faults and efi.get("efi", True):
            efi["secure_boot"] = True
            efi["enrolled"] = []
        if efi.get("pending"):
            if not efi.get("pending_confirmed"):
                self.wait_in_mok_manager(efi)
                efi["pending_confirmed"] = bool((self.efi() or {}).get("pending_confirmed"))
            efi = self.apply_staged_keys(efi)
        write_json(self.efi_path(), efi)
        return efi

    def wait_in_mok_manager(self, efi: dict) -> None:
        """MokManager waits at the console for someone to confirm (``gpulab mok-confirm``) or times out."""
        self.lab.events.emit(self.name, "mok-manager-waiting", timeout_s=self.lab.mok_timeout_s,
                             pending=len(efi["pending"]))
        self.mok_event.clear()
        with self.lock:
            self.state["status"] = "mok-manager"
            self.save()
        self.mok_event.wait(self.lab.mok_timeout_s)

    def apply_staged_keys(self, efi: dict) -> dict:
        confirmed = bool(efi.get("pending_confirmed"))
        efi, enrolled = self.nvidia("mok.apply_staged_keys")(efi)
        if confirmed:
            self.lab.events.emit(self.name, "mok-enrolled", keys=len(enrolled))
        else:
            self.lab.events.emit(self.name, "mok-timeout", dropped="staged keys not confirmed at the console")
        return efi

    def boot_request(self, efi, boot_id: str) -> dict:
        return {
            "name": self.name, "ip": self.ip, "boot_id": boot_id,
            "cluster_name": self.lab.settings.get("cluster_name"),
            "kube_api_url": (self.lab.info.get("kube") or {}).get("api_url"), "machine_id": self.state["machine_id"],
            "tmpfs_dir": self.tmpfs_dir, "merged_dir": self.merged_dir, "run_dir": self.run_dir,
            "firmware_dir": self.firmware_dir, "control_dir": self.control_dir, "lab_dir": LAB_DIR,
            "cache_dir": self.lab.cache_dir, "nvidia_backend": self.lab.nvidia_backend,
            "fake_binary_paths": self.lab.fake_binary_paths(),
            "host_key": sshkeys.host_key_path(self.lab.keys_dir, self.name),
            "authorized_key": sshkeys.public_key(sshkeys.client_key_path(self.lab.keys_dir)),
            "hw": self.hw(), "efi": efi, "faults": list(self.faults),
            "preinstall_driver": self.state.get("preinstall_driver"),
            "start_sshd": "ssh-drop" not in self.faults,
        }

    def _boot_namespace(self, efi, started: float) -> bool:
        boot_id = str(uuid.uuid4())
        ended = [kind for kind in self.faults if kind in node_faults.CLEARED_BY_BOOT]
        for kind in ended:   # e.g. driver-skew: this boot loads the module on disk
            self.faults.remove(kind)
        if ended:
            self.write_faults_file()
        request_path = os.path.join(self.dir, "boot-request.json")
        write_json(request_path, self.boot_request(efi, boot_id))
        self.clear_control_requests()
        log_file = open(os.path.join(self.dir, "boot.log"), "a")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([LAB_DIR] + self.lab.extra_pythonpath))
        self.process = subprocess.Popen(
            self.network_prefix() + ["unshare", "--mount", "--uts", "--pid", "--fork", "--propagation", "private",
                                     "--", sys.executable, "-m", "gpulab.nsinit", request_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file, env=env, cwd="/",
            start_new_session=True)
        log_file.close()
        result = self._read_boot_result()
        if not result.get("ok"):
            self._kill_boot()
            self.set_status("boot-failed", error=result.get("error"))
            return False
        self.holder_pid = result["host_pid"]
        self.booted_efi = efi
        self.state.update(boot_id=boot_id, boots=self.state["boots"] + 1, module_loaded=result["module_loaded"],
                          kernel_driver_version=result["kernel_driver_version"], preinstall_driver=None)
        self.apply_armed_faults()
        ssh_ok = self.wait_ssh() if "ssh-drop" not in self.faults else False
        boot_s = round(time.monotonic() - started, 3)
        self.state["last_boot_s"] = boot_s
        self.set_status("up", boot_id=boot_id, boot_s=boot_s, setup_s=result["setup_s"], ssh=ssh_ok,
                        module_loaded=result["module_loaded"], kernel_driver_version=result["kernel_driver_version"])
        return ssh_ok or "ssh-drop" in self.faults

    def _read_boot_result(self) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], BOOT_TIMEOUT_S)
        line = self.process.stdout.readline() if ready else b""
        self.process.stdout.close()
        if not line:
            return {"ok": False, "error": "node did not report its boot within %ds (see %s/boot.log)"
                    % (BOOT_TIMEOUT_S, self.dir)}
        return json.loads(line)

    def network_prefix(self) -> list:
        """``nsenter --net=...`` into the fleet network of ``up --bastion``; nothing otherwise (the host's)."""
        network = getattr(self.lab, "network", None)
        return network.nsenter_prefix() if network else []

    def ssh_answers(self) -> bool:
        network = getattr(self.lab, "network", None)
        return network.port_accepts(self.ip) if network else port_accepts(self.ip)

    def nsenter_node(self) -> list:
        """nsenter into the running node's namespaces (its network too when it has its own)."""
        namespaces = ["-m", "-u", "-p"] + (["-n"] if getattr(self.lab, "network", None) else [])
        return ["nsenter", "-t", str(self.holder_pid)] + namespaces + ["-r", "-w", "--"]

    def wait_ssh(self) -> bool:
        deadline = time.monotonic() + SSH_WAIT_S
        while time.monotonic() < deadline:
            if self.ssh_answers():
                return True
            time.sleep(0.05)
        return False

    # ---- shutdown -----------------------------------------------------------------------------------------
    def shutdown(self, reason: str) -> None:
        """Power off now: every process of the node dies, so do its namespace mounts; the disk stays."""
        with self.lock:
            if not self.holder_pid and not self.process:
                return
            self.set_status("shutting-down", reason=reason)
            self._kill_boot()
            self.set_status("down", reason=reason)

    def _kill_boot(self) -> None:
        namespace = pid_namespace(self.holder_pid) if self.holder_pid else None
        if self.holder_pid:
            try:
                os.kill(self.holder_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end_boot(self.process, namespace)
        self.process = None
        self.holder_pid = None
        self.save()

    def is_running(self) -> bool:
        """The node's PID 1 is alive (False after it was killed from outside)."""
        return bool(self.holder_pid) and pid_namespace(self.holder_pid) is not None and \
            self.process is not None and self.process.poll() is None

    # ---- inside the node ----------------------------------------------------------------------------------
    def run(self, argv: list, timeout: float = 30) -> tuple:
        """(rc, stdout, stderr) of a command inside the node (its namespaces and root), as root."""
        if not self.holder_pid:
            return (255, "", "node %s is not running" % self.name)
        env = {"PATH": NODE_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(self.nsenter_node() + list(argv), capture_output=True, text=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired as error:
            return (124, error.stdout or "", "timed out after %ss" % timeout)
        return (done.returncode, done.stdout, done.stderr)

    def start_process(self, argv: list, env=None):
        """A pod container's process inside the node (its namespaces and root), as root, in a new session
        (so its whole process group can be signalled); stdout and stderr on one pipe. None when the node is
        not running or has no such program."""
        if not self.holder_pid or not argv or self._program_path(argv[0]) is None:
            return None
        environment = {"PATH": NODE_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        environment.update(env or {})
        return subprocess.Popen(self.nsenter_node() + list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=environment, start_new_session=True)

    def gpu_container_edits(self):
        """What the NVIDIA container runtime injects into a GPU container on this node now (the layer's
        ``ctrinject.container_edits`` on the node's root: driver root, device nodes, mounts); None when the node is
        not running or holds no driver."""
        if not self.holder_pid:
            return None
        return self.nvidia("ctrinject.container_edits")(self.root_path("/"))

    def _program_path(self, program: str):
        candidates = [program] if "/" in program else [d + "/" + program for d in NODE_PATH.split(":")]
        for candidate in candidates:
            path = self.root_path(candidate)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return candidate
        return None

    def root_path(self, path: str) -> str:
        """A path inside the running node, seen from the host (through its PID 1's root)."""
        return "/proc/%d/root/%s" % (self.holder_pid, path.lstrip("/"))

    def _take_request(self, name: str, unreadable):
        """The JSON request a fake program of the node wrote to control_dir/name, if any (consumed); ``unreadable``
        when it is not JSON."""
        path = os.path.join(self.control_dir, name)
        try:
            with open(path) as stream:
                text = stream.read()
            os.unlink(path)
        except FileNotFoundError:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return unreadable

    def take_control_request(self):
        """The reboot/poweroff request the node's fake shutdown wrote, if any (consumed)."""
        return self._take_request("request", {"action": "reboot", "when": "now", "program": "unknown"})

    def take_modprobe_request(self):
        """A ``modprobe nvidia`` the node's fake modprobe asked for (``nvidia/bin/modprobe``), if any (consumed)."""
        return self._take_request("modprobe", None)

    def modprobe(self, request: dict) -> None:
        """``modprobe nvidia`` in the running node: the module modprobe finds for the running release loads as at
        boot (Secure Boot may refuse it; an explicit modprobe ignores a ``blacklist nvidia``); the answer goes to
        ``modprobe-<id>.json`` in the node's control dir, where the fake modprobe waits for it."""
        with self.lock:
            if not self.holder_pid:
                result = {"ok": False, "reason": "node %s is not running" % self.name}
            elif request.get("remove"):
                result = driverload.unload(self, node_faults.CLEARED_BY_BOOT)
            elif self.state["module_loaded"]:
                result = {"ok": True}
            else:
                state = self.nvidia("boot.compute_boot_state")(
                    root=self.root_path("/"), hw=self.hw(), efi=copy.deepcopy(self.booted_efi),
                    faults=list(self.faults) + ["explicit-modprobe"])
                if state.get("module_loaded"):
                    driverload.apply_loaded(self, state)
                    result = {"ok": True}
                else:
                    self.append_kmsg([line for line in state.get("kmsg") or [] if "rejected" in line
                                      or "Lockdown" in line])
                    result = {"ok": False, "reason": "Key was rejected by service" if state.get("module_rejected")
                              else ("No such device" if state.get("kernel_module_path")
                                    else "Module nvidia not found in directory /lib/modules/%s" % os.uname().release)}
        write_json(os.path.join(self.control_dir, "modprobe-%s.json" % request.get("id")), result)
        self.lab.events.emit(self.name, "modprobe", modules=request.get("modules"), ok=result["ok"],
                             reason=result.get("reason"))

    def clear_control_requests(self) -> None:
        for name in ("request", "request.tmp", "modprobe", "modprobe.tmp"):
            try:
                os.unlink(os.path.join(self.control_dir, name))
            except FileNotFoundError:
                pass

    def node_pids(self) -> list:
        namespace = pid_namespace(self.holder_pid) if self.holder_pid else None
        return pids_in_namespace(namespace) if namespace else []

    def append_kmsg(self, messages: list) -> None:
        self.nvidia("kmsg.append")(os.path.join(self.run_dir, "kmsg"), messages)

    # ---- faults -------------------------------------------------------------------------------------------
    def apply_fault(self, kind: str, **event_details) -> dict:
        parsed = parse_fault(kind)
        with self.lock:
            details = node_faults.apply(self, parsed)
            if kind not in self.faults:
                self.faults.append(kind)
            self.write_faults_file()
            self.save()
            self.lab.events.emit(self.name, "fault", fault=kind, **dict(details, **event_details))
            return details

    def arm_fault(self, kind: str) -> None:
        """``kind`` is applied when the node next boots (as it comes up, before sshd is waited for)."""
        node_faults.check_armable(kind)
        with self.lock:
            armed = self.state.setdefault("armed_faults", [])
            if kind not in armed:
                armed.append(kind)
            self.save()
            self.lab.events.emit(self.name, "fault-armed", fault=kind, at="next boot")

    def apply_armed_faults(self) -> None:
        armed, self.state["armed_faults"] = list(self.state.get("armed_faults") or []), []
        for kind in armed:
            self.apply_fault(kind, at="boot")

    def disarm(self, kind) -> list:
        """Drop one armed fault, or all (kind None); returns the kinds dropped."""
        with self.lock:
            armed = self.state.setdefault("armed_faults", [])
            dropped = [one for one in armed if kind is None or one == kind]
            for one in dropped:
                armed.remove(one)
                self.lab.events.emit(self.name, "fault-disarmed", fault=one)
            self.save()
            return dropped

    def clear_fault(self, kind: str) -> list:
        """Clear one fault, or all of them (kind None); returns the kinds cleared."""
        with self.lock:
            kinds = [kind] if kind else list(self.faults)
            cleared = []
            for one in kinds:
                parsed = parse_fault(one)
                if one not in self.faults:
                    continue
                self.faults.remove(one)
                node_faults.clear(self, parsed)
                cleared.append(one)
                self.write_faults_file()
                self.save()
                self.lab.events.emit(self.name, "clear", fault=one)
            return cleared

    # ---- the GPU Operator's driver container ------------------------------------------------------------
    def start_driver_container(self, version: str, modules_in_use: bool) -> tuple:
        """The driver container starts: unload what is loaded (unless in use), build, install into
        /run/nvidia/driver and load ``version``. (ok, container log)."""
        with self.lock:
            if not self.holder_pid:
                return False, "node %s is not running\n" % self.name
            loaded = self.state["kernel_driver_version"] if self.state["module_loaded"] else None
            result = self._driver_container(["start", version], loaded, modules_in_use)
            if result["unloaded"]:
                driverload.apply_unloaded(self)
            if result["ok"]:
                driverload.apply_loaded(self, result["state"])
        self.lab.events.emit(self.name, "driver-container-start", version=version, ok=result["ok"],
                             unloaded=loaded if result["unloaded"] else None)
        return result["ok"], "\n".join(result["log"]) + "\n"

    def _driver_container(self, args: list, loaded, modules_in_use: bool) -> dict:
        """The NVIDIA layer's driver container (``<backend>.driverctr``), run inside the node (its kernel
        headers, module cache and /run): its JSON result."""
        argv = ["env", "PYTHONPATH=/opt/gpulab/lib", "/usr/bin/python3", "-m", "%s.driverctr" % self.lab.nvidia_backend]
        argv += args + (["--loaded", loaded] if loaded else []) + (["--in-use"] if modules_in_use else [])
        rc, out, err = self.run(argv, timeout=300)
        try:
            return json.loads(out)
        except ValueError:
            return {"ok": False, "unloaded": False, "state": None,
                    "log": ["driver container failed (exit %d): %s" % (rc, (err or out).strip())]}

    def stop_driver_container(self, modules_in_use: bool) -> tuple:
        """SIGTERM to the driver container: the modules are unloaded unless in use. (ok, log lines)."""
        with self.lock:
            if not self.holder_pid:
                return True, ""
            loaded = self.state["kernel_driver_version"] if self.state["module_loaded"] else None
            result = self._driver_container(["stop"], loaded, modules_in_use)
            if result["unloaded"]:
                driverload.apply_unloaded(self)
        self.lab.events.emit(self.name, "driver-container-stop", ok=result["ok"],
                             unloaded=loaded if result["unloaded"] else None)
        return result["ok"], "\n".join(result["log"]) + "\n"

    # ---- MOK ----------------------------------------------------------------------------------------------
    def mok_confirm(self) -> str:
        """The operator at the console accepts the staged MOK keys (now in MokManager, or at next boot)."""
        with self.lock:
            efi = self.efi() or {}
            if not efi.get("pending"):
                raise FaultError("node %s has no MOK key staged (run `mokutil --import KEY.der` on it first)"
                                 % self.name)
            efi["pending_confirmed"] = True
            write_json(self.efi_path(), efi)
            waiting = self.status == "mok-manager"
            self.lab.events.emit(self.name, "mok-confirm", at="console" if waiting else "next boot")
        self.mok_event.set()
        return "confirmed in MokManager" if waiting else "will be enrolled at the next boot"

    # ---- report -------------------------------------------------------------------------------------------
    def summary(self) -> dict:
        return {"name": self.name, "ip": self.ip, "profile": self.profile, "status": self.status,
                "boot_id": self.state["boot_id"], "boots": self.state["boots"], "faults": list(self.faults),
                "armed_faults": list(self.state.get("armed_faults") or []),
                "module_loaded": self.state["module_loaded"],
                "kernel_driver_version": self.state["kernel_driver_version"],
                "last_boot_s": self.state["last_boot_s"], "pid": self.holder_pid,
                "ssh": self.ssh_answers() if self.status == "up" else False}


class NodeView:
    """What the Kubernetes twin sees of a node (see lab/ARCHITECTURE.md, "Kubernetes twin contract")."""

    def __init__(self, node: Node):
        self._node = node
        self.name = node.name
        self.ip = node.ip

    def is_up(self) -> bool:
        node = self._node
        return node.status == "up" and "ssh-drop" not in node.faults and node.is_running()

    def boot_id(self) -> str:
        return self._node.state["boot_id"]

    def driver_version(self):
        node = self._node
        if not self.is_up() or not node.state["module_loaded"]:
            return None
        return node.state["kernel_driver_version"]

    def visible_gpus(self) -> list:
        if self.driver_version() is None or {"driver-mismatch", "driver-skew"} & set(self._node.faults):
            return []
        node = self._node
        as_views = node.nvidia("smi.visible_gpus")
        if node.holder_pid:
            try:
                # what NVML shows, MIG changes made with nvidia-smi included
                return as_views(node.nvidia("smi.load_node_hw")(node.root_path("/")))
            except OSError:
                pass  # the node went down meanwhile
        return as_views(node.hw())

    def device_plugin_blocker(self):
        """What on the node's disk keeps the device plugin from starting (runbook case 3), read now:
        ``stale_socket`` (a file at the plugin's socket path: the twin's plugin is no process, so any file there is
        stale), ``kubelet_not_listening`` (under kubelet-socket-dead, while the kubelet's socket refuses), else None."""
        node = self._node
        if not self.is_up():
            return None
        try:
            if os.path.lexists(node.root_path(node_faults.PLUGIN_SOCKET)):
                return "stale_socket"
        except OSError:
            return None
        if "kubelet-socket-dead" in node.faults and \
                node_faults.socket_refuses(node.root_path(node_faults.KUBELET_SOCKET)):
            return "kubelet_not_listening"
        return None

    def kubelet_failed(self) -> bool:
        """The node's kubelet unit failed to start (its stand-in refused its config, as the real kubelet refuses a
        bad KubeletConfiguration or a CPU manager checkpoint of another policy): it posts nothing until it starts."""
        node = self._node
        if not self.is_up():
            return False
        try:
            return os.path.exists(node.root_path("/run/gpulab-systemd/kubelet.service.failed"))
        except OSError:
            return False

    def container_runtime_judged(self) -> bool:
        """Whether the node runs its pods through its containerd (its unit was started with the node's systemctl
        and not stopped): a file read, cheap enough for every new pod."""
        node = self._node
        if not node.holder_pid:
            return False
        try:
            with open(node.root_path(containerdcri.SYSTEMD_STARTED)) as stream:
                return containerdcri.judged(stream.read())
        except OSError:
            return False

    def container_runtime_blocker(self, handler=None):
        """containerd's error creating a pod sandbox for runtime ``handler`` (None: its default runtime) on this
        node now (``gpulab.containerdcri`` run inside the node, which runs ``containerd config dump``); None when it
        would create it or the node is not judged."""
        if not self.is_up() or not self.container_runtime_judged():
            return None
        argv = ["env", "PYTHONPATH=/opt/gpulab/lib", "/usr/bin/python3", "-m", "gpulab.containerdcri"]
        rc, stdout, _stderr = self._node.run(argv + ([handler] if handler else []), timeout=30)
        return (stdout.strip() or None) if rc == 0 else None

    def pci_gpu_count(self) -> int:
        """NVIDIA GPUs on the node's PCI bus (an Xid 79 GPU is off the bus), driver or not."""
        return sum(1 for gpu in self._node.hw().get("gpus") or [] if gpu.get("on_bus", True))

    def mig_capable(self) -> bool:
        return any(gpu.get("mig_capable") for gpu in self._node.hw().get("gpus") or [])

    def run(self, argv: list, timeout: float = 30) -> tuple:
        return self._node.run(argv, timeout)

    def start_process(self, argv: list, env=None):
        return self._node.start_process(argv, env)

    def gpu_container_edits(self):
        return self._node.gpu_container_edits()

    def start_driver_container(self, version: str, modules_in_use: bool = False) -> tuple:
        """GPU Operator mode: the driver pod's container starts on the node; (ok, log)."""
        return self._node.start_driver_container(version, modules_in_use)

    def stop_driver_container(self, modules_in_use: bool = False) -> tuple:
        return self._node.stop_driver_container(modules_in_use)

    def subscribe(self, callback) -> None:
        name = self.name
        self._node.lab.events.subscribe(
            lambda event: callback(name, event["kind"]) if event.get("node") == name else None)
