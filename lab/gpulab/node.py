"""Host side of one GPU node twin: its disk, boots and shutdowns, faults, and the NodeView for the kube twin.

A node lives in ``DIR/nodes/<name>/``. Its disk is a tmpfs mounted on the host at ``tmpfs/`` (overlay upper
and work dirs; it survives node reboots and goes with ``down``). A boot is one ``unshare`` process whose child
(``gpulab.nsinit``, then a reaper) is PID 1 of the node's own PID, mount and UTS namespaces; killing it ends
the boot. Only the daemon calls these methods (one lock per node); ``node.json`` is written only here.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from gpulab import sshkeys

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI_PROFILES = {"h100x8": "h100-sxm-80gb-x8", "a100x8": "a100-sxm4-80gb-x8", "l40sx4": "l40s-x4"}
DISK_SIZE = "4g"
DISK_FILL_FILE = "disk-full.fill"
BOOT_TIMEOUT_S = 60
SSH_WAIT_S = 10

SIMPLE_FAULTS = ("reboot-hang", "slow-boot", "dkms-fail", "disk-full", "secure-boot-no-key", "ssh-drop",
                 "driver-mismatch")
CLUSTER_FAULTS = ("stale-device-plugin", "kubelet-restart", "device-plugin-crash", "pdb-block", "kubelet-down")

XID_TEXTS = {
    13: "Graphics Exception: ESR 0x50e730=0x8e000c 0x50e734=0x0 0x50e728=0x1f81fb60 0x50e72c=0x1174",
    31: "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f4c_00000000.",
    43: "Ch 00000008, engmask 00000101",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860",
    63: "Row remapping event: Bank 3 Row 0x1a2b pending.",
    64: "Row remapping failure: Bank 3 Row 0x1a2b.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
}


class FaultError(ValueError):
    pass


def parse_fault(kind: str) -> tuple:
    """('simple', kind) | ('xid', code, gpu_index) | ('cluster', kind); FaultError for anything else."""
    if kind in SIMPLE_FAULTS:
        return ("simple", kind)
    if kind in CLUSTER_FAULTS:
        return ("cluster", kind)
    if kind.startswith("xid:"):
        parts = kind.split(":")
        try:
            code = int(parts[1])
            gpu_index = int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise FaultError("fault %r: expected xid:CODE or xid:CODE:GPU_INDEX, e.g. xid:79 or xid:48:3" % kind)
        if len(parts) > 3 or code <= 0 or gpu_index < 0:
            raise FaultError("fault %r: expected xid:CODE or xid:CODE:GPU_INDEX" % kind)
        return ("xid", code, gpu_index)
    raise FaultError("unknown fault %r; known: %s, xid:CODE[:GPU]" % (kind, ", ".join(SIMPLE_FAULTS + CLUSTER_FAULTS)))


def nvidia_function(backend: str, dotted: str, log=None):
    """backend.<module>.<function>, or None while the NVIDIA layer does not provide it (logged once)."""
    module_name, function_name = dotted.rsplit(".", 1)
    try:
        module = importlib.import_module("%s.%s" % (backend, module_name))
    except ImportError as error:
        if log:
            log("NVIDIA layer: %s.%s not importable (%s): using the fallback" % (backend, module_name, error))
        return None
    function = getattr(module, function_name, None)
    if function is None and log:
        log("NVIDIA layer: %s.%s.%s missing: using the fallback" % (backend, module_name, function_name))
    return function


def read_json(path: str, default=None):
    try:
        with open(path) as stream:
            return json.load(stream)
    except FileNotFoundError:
        return default


def write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as stream:
        json.dump(data, stream, indent=1, sort_keys=True)
        stream.write("\n")
    os.replace(tmp, path)


def mounts_under(path: str) -> list:
    """Mount points of the host at or below ``path`` (deepest first), from /proc/self/mountinfo."""
    prefix = os.path.realpath(path)
    points = []
    with open("/proc/self/mountinfo") as stream:
        for line in stream:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_all_under(path: str) -> list:
    left = []
    for point in mounts_under(path):
        if subprocess.run(["umount", point], stderr=subprocess.DEVNULL).returncode != 0:
            if subprocess.run(["umount", "-l", point], stderr=subprocess.DEVNULL).returncode != 0:
                left.append(point)
    return left


def pid_namespace(pid: int):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def is_zombie(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as stream:
            return stream.read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def pids_in_namespace(namespace: str) -> list:
    """Live processes of a PID namespace (zombies hold no mounts and are left to their reaper)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pid_namespace(int(entry)) == namespace and not is_zombie(int(entry)):
            pids.append(int(entry))
    return pids


def kill_pids(pids: list, sig=signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_namespace_empty(namespace: str, timeout_s: float = 10) -> None:
    """Wait until no live process is left in a PID namespace (its mounts are gone with them), at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    while pids_in_namespace(namespace) and time.monotonic() < deadline:
        time.sleep(0.02)


def process_name(pid: int) -> str:
    try:
        with open("/proc/%d/comm" % pid) as stream:
            return stream.read().strip()
    except OSError:
        return ""


def port_accepts(ip: str, port: int = 22, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            return conn.recv(4).startswith(b"SSH")
    except OSError:
        return False


class Node:
    """One node twin. ``lab`` is the daemon (for events, logging, settings)."""

    def __init__(self, lab, spec: dict):
        self.lab = lab
        self.name = spec["name"]
        self.ip = spec["ip"]
        self.profile = spec["profile"]
        self.index = spec["index"]
        self.dir = os.path.join(lab.state_dir, "nodes", self.name)
        self.tmpfs_dir = os.path.join(self.dir, "tmpfs")
        self.merged_dir = os.path.join(self.dir, "merged")
        self.run_dir = os.path.join(self.dir, "run")
        self.firmware_dir = os.path.join(self.dir, "firmware")
        self.control_dir = os.path.join(self.dir, "control")
        self.lock = threading.RLock()
        self.process = None          # the unshare process of the current boot
        self.holder_pid = None       # PID 1 of the node, as the host sees it
        self.booted_efi = None
        self.mok_event = threading.Event()
        self.state = read_json(os.path.join(self.dir, "node.json")) or {
            "name": self.name, "ip": self.ip, "profile": self.profile, "status": "created", "boot_id": None,
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

    def write_faults_file(self) -> None:
        write_json(os.path.join(self.run_dir, "faults.json"), list(self.faults))

    # ---- creation -----------------------------------------------------------------------------------------
    def create(self, secure_boot: bool) -> None:
        """Directories, the disk (tmpfs), host key, hw.json and efi.json of a new node."""
        for path in (self.dir, self.tmpfs_dir, self.merged_dir, self.run_dir, self.firmware_dir, self.control_dir):
            os.makedirs(path, exist_ok=True)
        if not mounts_under(self.tmpfs_dir):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=%s" % DISK_SIZE,
                            "gpulab-%s" % self.name, self.tmpfs_dir], check=True)
        self.hide_host_homes()
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
        make_hw = nvidia_function(self.lab.nvidia_backend, "profiles.make_hw", self.lab.log)
        profile = CLI_PROFILES.get(self.profile, self.profile)
        if make_hw is None:
            return {"node": self.name, "profile": profile, "efi": True, "gpus": []}
        return make_hw(self.name, profile)

    def initial_efi(self, hw: dict, secure_boot: bool) -> dict:
        has_efi = bool(hw.get("efi", True))
        initial = nvidia_function(self.lab.nvidia_backend, "mok.default_efi_state", self.lab.log)
        if initial is not None:
            return initial(efi=has_efi, secure_boot=bool(secure_boot))
        return {"efi": has_efi, "secure_boot": bool(secure_boot) and has_efi, "setup_mode": False, "enrolled": [],
                "pending": [], "pending_confirmed": False}

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
        apply = nvidia_function(self.lab.nvidia_backend, "mok.apply_staged_keys", self.lab.log)
        if apply is not None:
            efi, enrolled = apply(efi)
        else:
            enrolled = [key for key in efi["pending"] if confirmed and key not in efi["enrolled"]]
            efi = dict(efi, enrolled=efi["enrolled"] + enrolled, pending=[], pending_confirmed=False)
        if confirmed:
            self.lab.events.emit(self.name, "mok-enrolled", keys=len(enrolled))
        else:
            self.lab.events.emit(self.name, "mok-timeout", dropped="staged keys not confirmed at the console")
        return efi

    def boot_request(self, efi, boot_id: str) -> dict:
        return {
            "name": self.name, "ip": self.ip, "boot_id": boot_id, "machine_id": self.state["machine_id"],
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
        request_path = os.path.join(self.dir, "boot-request.json")
        write_json(request_path, self.boot_request(efi, boot_id))
        self.clear_control_requests()
        log_file = open(os.path.join(self.dir, "boot.log"), "a")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([LAB_DIR] + self.lab.extra_pythonpath))
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--uts", "--pid", "--fork", "--propagation", "private", "--",
             sys.executable, "-m", "gpulab.nsinit", request_path],
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

    def wait_ssh(self) -> bool:
        deadline = time.monotonic() + SSH_WAIT_S
        while time.monotonic() < deadline:
            if port_accepts(self.ip):
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
        if self.process:
            # unshare reaps the node's PID 1 and exits; killing it first would leave PID 1 a zombie for the
            # host's init to reap (seconds, on some container inits)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if namespace:
            wait_namespace_empty(namespace)
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
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(["nsenter", "-t", str(self.holder_pid), "-m", "-u", "-p", "-r", "-w", "--"]
                                  + list(argv), capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as error:
            return (124, error.stdout or "", "timed out after %ss" % timeout)
        return (done.returncode, done.stdout, done.stderr)

    def root_path(self, path: str) -> str:
        """A path inside the running node, seen from the host (through its PID 1's root)."""
        return "/proc/%d/root/%s" % (self.holder_pid, path.lstrip("/"))

    def take_control_request(self):
        """The reboot/poweroff request the node's fake shutdown wrote, if any (consumed)."""
        path = os.path.join(self.control_dir, "request")
        try:
            with open(path) as stream:
                text = stream.read()
            os.unlink(path)
        except FileNotFoundError:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return {"action": "reboot", "when": "now", "program": "unknown"}

    def clear_control_requests(self) -> None:
        for name in ("request", "request.tmp"):
            try:
                os.unlink(os.path.join(self.control_dir, name))
            except FileNotFoundError:
                pass

    def node_pids(self) -> list:
        namespace = pid_namespace(self.holder_pid) if self.holder_pid else None
        return pids_in_namespace(namespace) if namespace else []

    def seconds_since_boot(self) -> float:
        boot = read_json(os.path.join(self.run_dir, "boot.json"), {})
        return max(0.0, time.time() - boot.get("booted_at", time.time()))

    def append_kmsg(self, messages: list) -> None:
        path = os.path.join(self.run_dir, "kmsg")
        append = nvidia_function(self.lab.nvidia_backend, "kmsg.append")
        if append is not None:
            append(path, messages)
            return
        uptime_s = self.seconds_since_boot()
        with open(path, "a") as stream:
            for message in messages:
                stream.write("[%12.6f] %s\n" % (uptime_s, message))

    # ---- faults -------------------------------------------------------------------------------------------
    def apply_fault(self, kind: str) -> dict:
        parsed = parse_fault(kind)
        with self.lock:
            if parsed[0] == "xid":
                details = self._apply_xid(parsed[1], parsed[2])
            else:
                details = getattr(self, "_apply_" + kind.replace("-", "_"), lambda: {})()
            if kind not in self.faults:
                self.faults.append(kind)
            self.write_faults_file()
            self.save()
            self.lab.events.emit(self.name, "fault", fault=kind, **details)
            return details

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
                if parsed[0] == "xid":
                    self._clear_xid(parsed[1], parsed[2])
                else:
                    getattr(self, "_clear_" + one.replace("-", "_"), lambda: None)()
                cleared.append(one)
                self.write_faults_file()
                self.save()
                self.lab.events.emit(self.name, "clear", fault=one)
            return cleared

    def _apply_xid(self, code: int, gpu_index: int) -> dict:
        hw = self.hw()
        gpus = hw.get("gpus") or []
        if gpus and gpu_index >= len(gpus):
            raise FaultError("node %s has %d GPUs; no GPU index %d" % (self.name, len(gpus), gpu_index))
        apply_xid = nvidia_function(self.lab.nvidia_backend, "boot.apply_xid", self.lab.log)
        if apply_xid is not None and gpus:
            new_hw, messages = apply_xid(hw, code, gpu_index)
        else:
            new_hw, messages = self._fallback_xid(hw, code, gpu_index)
        if self.holder_pid:
            self.append_kmsg(messages)
        self.write_hw(new_hw)
        if self.holder_pid and code == 79:
            self.reapply_device_views(new_hw)
        return {"gpu_index": gpu_index, "kmsg": messages}

    def _fallback_xid(self, hw: dict, code: int, gpu_index: int) -> tuple:
        gpus = hw.get("gpus") or []
        address = gpus[gpu_index]["pci_address"] if gpus else "0000:%02x:00.0" % (0x18 + gpu_index)
        text = XID_TEXTS.get(code, "Unknown Xid event")
        if code == 79 and gpus:
            hw = copy.deepcopy(hw)
            hw["gpus"][gpu_index]["on_bus"] = False
        return hw, ["NVRM: Xid (PCI:%s): %d, pid='<unknown>', name=<unknown>, %s"
                    % (address.rsplit(".", 1)[0], code, text)]

    def _clear_xid(self, code: int, gpu_index: int) -> None:
        """A GPU reset: the GPU is back on the bus, volatile error state cleared."""
        hw = self.hw()
        if not hw.get("gpus"):
            return
        reset = nvidia_function(self.lab.nvidia_backend, "boot.clear_gpu_faults", self.lab.log)
        if reset is not None:
            hw = reset(hw, gpu_index)
        else:
            hw["gpus"][gpu_index]["on_bus"] = True
        self.write_hw(hw)
        if self.holder_pid and code == 79:
            self.reapply_device_views(hw)

    def reapply_device_views(self, hw: dict) -> None:
        """PCI functions of the running node after the hardware changed (Xid 79 and its clear)."""
        compute = nvidia_function(self.lab.nvidia_backend, "boot.compute_boot_state", self.lab.log)
        if compute is None:
            return
        state = compute(root=self.root_path("/"), hw=hw, efi=copy.deepcopy(self.booted_efi),
                        faults=list(self.faults))
        pci_dir = self.root_path("/sys/bus/pci/devices")
        wanted = {device["address"] for device in state.get("pci_devices") or []}
        for address in os.listdir(pci_dir):
            if address not in wanted and address != "0000:00:00.0":
                shutil.rmtree(os.path.join(pci_dir, address), ignore_errors=True)
        from gpulab import nsinit
        nsinit.make_pci_devices(self.root_path("/"), [d for d in state.get("pci_devices") or []
                                                      if not os.path.exists(os.path.join(pci_dir, d["address"]))])
        # /dev/nvidia* stay as they were (device files outlive a GPU that fell off the bus); add missing ones
        nsinit.make_nvidia_dev_nodes(self.root_path("/"), [node for node in state.get("dev_nodes") or []
                                                           if not os.path.lexists(self.root_path(node["path"]))])

    def _apply_driver_mismatch(self) -> dict:
        """A half-done upgrade: the loaded module is the previous build while the userspace on disk is the new
        one. A running node shows it at once (its /proc and /sys driver files change); a booting one gets it
        from compute_boot_state."""
        self.reapply_driver_files(list(self.faults) + ["driver-mismatch"])
        return {}

    def _clear_driver_mismatch(self) -> None:
        self.reapply_driver_files(list(self.faults))

    def reapply_driver_files(self, faults: list) -> None:
        """Rewrite the running node's kernel-driver files (/proc/driver/nvidia, /sys/module) for ``faults``."""
        compute = nvidia_function(self.lab.nvidia_backend, "boot.compute_boot_state", self.lab.log)
        if compute is None or not self.holder_pid or not self.state.get("module_loaded"):
            return
        state = compute(root=self.root_path("/"), hw=self.hw(), efi=copy.deepcopy(self.booted_efi), faults=faults)
        if not state.get("module_loaded"):
            return
        from gpulab import nsinit
        for path, text in sorted((state.get("files") or {}).items()):
            if path.startswith(("/proc/driver/nvidia/", "/sys/module/")):
                nsinit.write_file(self.root_path(path), text)
        self.state["kernel_driver_version"] = state.get("kernel_driver_version")

    def _apply_disk_full(self) -> dict:
        """Shrink the disk to what is used and fill the rest: every write to / fails with ENOSPC."""
        fill = os.path.join(self.tmpfs_dir, DISK_FILL_FILE)
        stats = os.statvfs(self.tmpfs_dir)
        used_bytes = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        subprocess.run(["mount", "-o", "remount,size=%d" % (used_bytes + (1 << 20)), self.tmpfs_dir], check=True)
        with open(fill, "wb") as stream:
            try:
                while True:
                    stream.write(b"\0" * (1 << 16))
                    stream.flush()
            except OSError:
                pass
        return {"disk_free_bytes": os.statvfs(self.tmpfs_dir).f_bavail * stats.f_frsize}

    def _clear_disk_full(self) -> None:
        try:
            os.unlink(os.path.join(self.tmpfs_dir, DISK_FILL_FILE))
        except FileNotFoundError:
            pass
        subprocess.run(["mount", "-o", "remount,size=%s" % DISK_SIZE, self.tmpfs_dir], check=True)

    def _apply_ssh_drop(self) -> dict:
        killed = [pid for pid in self.node_pids() if process_name(pid) == "sshd"]
        kill_pids(killed, signal.SIGKILL)
        return {"sshd_killed": len(killed)}

    def _clear_ssh_drop(self) -> None:
        if self.holder_pid:
            rc, _out, err = self.run(["/usr/sbin/sshd", "-f", "/run/sshd-gpulab/sshd_config",
                                      "-E", "/run/sshd-gpulab/sshd.log"])
            if rc != 0:
                self.lab.log("%s: sshd did not start again: %s" % (self.name, err.strip()))
            self.wait_ssh()

    def _apply_secure_boot_no_key(self) -> dict:
        if self.state.get("efi_before_fault") is None:
            self.state["efi_before_fault"] = self.efi()
        return {"effective": "next boot"}

    def _clear_secure_boot_no_key(self) -> None:
        saved = self.state.get("efi_before_fault")
        if saved is not None:
            write_json(self.efi_path(), saved)
        self.state["efi_before_fault"] = None

    def _clear_reboot_hang(self) -> None:
        if self.status == "hung":
            self.lab.schedule_boot(self, delay_s=0)

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
                "module_loaded": self.state["module_loaded"],
                "kernel_driver_version": self.state["kernel_driver_version"],
                "last_boot_s": self.state["last_boot_s"], "pid": self.holder_pid,
                "ssh": port_accepts(self.ip) if self.status == "up" else False}


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
        if self.driver_version() is None or "driver-mismatch" in self._node.faults:
            return []
        node = self._node
        load_hw = nvidia_function(node.lab.nvidia_backend, "smi.load_node_hw")
        as_views = nvidia_function(node.lab.nvidia_backend, "smi.visible_gpus")
        if load_hw is not None and as_views is not None and node.holder_pid:
            try:
                # what NVML shows, MIG changes made with nvidia-smi included
                return as_views(load_hw(node.root_path("/")))
            except OSError:
                pass  # the node went down meanwhile
        gpus = []
        for gpu in self._node.hw().get("gpus") or []:
            if not gpu.get("on_bus", True):
                continue
            mig_enabled = bool(gpu.get("mig_mode_current"))
            gpus.append({"index": gpu["index"], "uuid": gpu["uuid"], "name": gpu["name"],
                         "memory_mib": gpu["memory_total_mib"], "mig_enabled": mig_enabled,
                         "mig_devices": [{"profile": mig.get("profile"), "uuid": mig.get("uuid")}
                                         for mig in (gpu.get("mig_devices") or [])] if mig_enabled else []})
        return gpus

    def pci_gpu_count(self) -> int:
        """NVIDIA GPUs on the node's PCI bus (an Xid 79 GPU is off the bus), driver or not."""
        return sum(1 for gpu in self._node.hw().get("gpus") or [] if gpu.get("on_bus", True))

    def mig_capable(self) -> bool:
        return any(gpu.get("mig_capable") for gpu in self._node.hw().get("gpus") or [])

    def run(self, argv: list, timeout: float = 30) -> tuple:
        return self._node.run(argv, timeout)

    def subscribe(self, callback) -> None:
        name = self.name
        self._node.lab.events.subscribe(
            lambda event: callback(name, event["kind"]) if event.get("node") == name else None)
