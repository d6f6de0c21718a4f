"""Faults of a node twin: the kinds `gpulab fault` accepts and what applying and clearing each does on the host side.

``NODE_FAULTS`` maps a kind to ``(apply(node) -> details, clear(node))``; Xid faults (``xid:CODE[:GPU]``) have
``apply_xid``/``clear_xid``. Faults that act at boot (``reboot-hang``, ``slow-boot``, ``dkms-fail``,
``secure-boot-no-key``) are read by the daemon and by ``compute_boot_state`` from the node's fault list; cluster
kinds change nothing on the node: the daemon forwards them to the Kubernetes twin.
"""
from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import subprocess

from gpulab.devviews import make_nvidia_dev_nodes, make_pci_devices
from gpulab.osutil import kill_pids, process_name, write_file, write_json

CLUSTER_FAULTS = ("stale-device-plugin", "kubelet-restart", "device-plugin-crash", "pdb-block", "kubelet-down",
                  "device-plugin-mig-mismatch")
# faults a reboot ends (driver-skew: the module on disk is loaded at boot, kernel and userspace agree again)
CLEARED_BY_BOOT = ("driver-skew",)
# faults that act at boot by themselves: `--at-next-boot` would add nothing
BOOT_TIME_FAULTS = ("reboot-hang", "slow-boot", "dkms-fail", "secure-boot-no-key")
DISK_FILL_FILE = "disk-full.fill"
# tests the twin's dcgmi fails under `dcgm-fail:TEST[:GPU]` (their DCGM names: gpulab/nvidia/dcgmi.py TESTS)
DCGM_TESTS = ("software", "nvml", "cuda", "permissions", "persistence", "environment", "page_retirement",
              "graphics_processes", "inforom", "pcie", "memory", "diagnostic", "sm_stress", "targeted_stress",
              "targeted_power", "memory_bandwidth")


class FaultError(ValueError):
    pass


# ---- Xid ----------------------------------------------------------------------------------------------------
def apply_xid(node, code: int, gpu_index: int) -> dict:
    hw = node.hw()
    gpus = hw.get("gpus") or []
    if gpus and gpu_index >= len(gpus):
        raise FaultError("node %s has %d GPUs; no GPU index %d" % (node.name, len(gpus), gpu_index))
    if gpus:
        new_hw, messages = node.nvidia("boot.apply_xid")(hw, code, gpu_index)
    else:
        # a node without GPUs: the driver's line, for a made-up PCI address
        made_up = {"gpus": [{"index": gpu_index, "pci_address": "0000:%02x:00.0" % (0x18 + gpu_index)}]}
        new_hw, messages = hw, node.nvidia("kmsg.xid_lines")(made_up, gpu_index, code)
    if node.holder_pid:
        node.append_kmsg(messages)
    node.write_hw(new_hw)
    if node.holder_pid and code == 79:
        reapply_device_views(node, new_hw)
    return {"gpu_index": gpu_index, "kmsg": messages}


def clear_xid(node, code: int, gpu_index: int) -> None:
    """A GPU reset: the GPU is back on the bus, volatile error state cleared."""
    hw = node.hw()
    if not hw.get("gpus"):
        return
    hw = node.nvidia("boot.clear_gpu_faults")(hw, gpu_index)
    node.write_hw(hw)
    if node.holder_pid and code == 79:
        reapply_device_views(node, hw)


def reapply_device_views(node, hw: dict) -> None:
    """PCI functions of the running node after the hardware changed (Xid 79 and its clear)."""
    state = node.nvidia("boot.compute_boot_state")(root=node.root_path("/"), hw=hw,
                                                    efi=copy.deepcopy(node.booted_efi), faults=list(node.faults))
    pci_dir = node.root_path("/sys/bus/pci/devices")
    wanted = {device["address"] for device in state.get("pci_devices") or []}
    for address in os.listdir(pci_dir):
        if address not in wanted and address != "0000:00:00.0":
            shutil.rmtree(os.path.join(pci_dir, address), ignore_errors=True)
    make_pci_devices(node.root_path("/"), [d for d in state.get("pci_devices") or []
                                           if not os.path.exists(os.path.join(pci_dir, d["address"]))])
    # /dev/nvidia* stay as they were (device files outlive a GPU that fell off the bus); add missing ones
    make_nvidia_dev_nodes(node.root_path("/"), [dev for dev in state.get("dev_nodes") or []
                                                if not os.path.lexists(node.root_path(dev["path"]))])


# ---- driver-mismatch ------------------------------------------------------------------------------------------
def apply_driver_mismatch(node) -> dict:
    """A half-done upgrade: the loaded module is the previous build while the userspace on disk is the new
    one. A running node shows it at once (its /proc and /sys driver files change); a booting one gets it
    from compute_boot_state."""
    reapply_driver_files(node, list(node.faults) + ["driver-mismatch"])
    return {}


def clear_driver_mismatch(node) -> None:
    reapply_driver_files(node, list(node.faults))


def reapply_driver_files(node, faults: list) -> None:
    """Rewrite the running node's kernel-driver files (/proc/driver/nvidia, /sys/module) for ``faults``."""
    if not node.holder_pid or not node.state.get("module_loaded"):
        return
    faults = ["driver-mismatch" if kind == "driver-skew" else kind for kind in faults]
    state = node.nvidia("boot.compute_boot_state")(root=node.root_path("/"), hw=node.hw(),
                                                    efi=copy.deepcopy(node.booted_efi), faults=faults)
    if not state.get("module_loaded"):
        return
    for path, text in sorted((state.get("files") or {}).items()):
        if path.startswith(("/proc/driver/nvidia/", "/sys/module/")):
            write_file(node.root_path(path), text)
    node.state["kernel_driver_version"] = state.get("kernel_driver_version")


# ---- case 3: what makes the device plugin crash on the node's side -----------------------------------------------
# driver-skew: driver-mismatch until the next boot (a half-done upgrade that a reboot finishes: CLEARED_BY_BOOT).
# plugin-socket-stale: a socket file nobody serves at the plugin's path (the plugin's bind fails: address in use);
# kubelet-socket-dead: the kubelet's registration socket refuses (its file replaced by a dead one) until the kubelet
# restarts (`systemctl restart kubelet`: the stand-in binds a new one). The Kubernetes twin reads both files through
# NodeView.device_plugin_blocker when the plugin starts.
PLUGIN_SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


def _dead_socket(path: str) -> None:
    """A unix socket file at ``path`` that nobody listens on (connect: connection refused)."""
    if os.path.lexists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        dead.bind(path)
    finally:
        dead.close()


def apply_plugin_socket_stale(node) -> dict:
    if node.holder_pid:
        _dead_socket(node.root_path(PLUGIN_SOCKET))
    return {"socket": PLUGIN_SOCKET}


def clear_plugin_socket_stale(node) -> None:
    if node.holder_pid and os.path.lexists(node.root_path(PLUGIN_SOCKET)):
        os.unlink(node.root_path(PLUGIN_SOCKET))


def apply_kubelet_socket_dead(node) -> dict:
    if node.holder_pid:
        _dead_socket(node.root_path(KUBELET_SOCKET))
    return {"socket": KUBELET_SOCKET}


def clear_kubelet_socket_dead(node) -> None:
    if node.holder_pid:
        node.run(["systemctl", "restart", "kubelet"], timeout=30)


def socket_refuses(path: str) -> bool:
    """True when a unix socket file is at ``path`` and connecting to it is refused (nobody listens)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()


# ---- disk-full --------------------------------------------------------------------------------------------------
def apply_disk_full(node) -> dict:
    """Shrink the disk to what is used and fill the rest: every write to / fails with ENOSPC."""
    fill = os.path.join(node.tmpfs_dir, DISK_FILL_FILE)
    stats = os.statvfs(node.tmpfs_dir)
    used_bytes = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    subprocess.run(["mount", "-o", "remount,size=%d" % (used_bytes + (1 << 20)), node.tmpfs_dir], check=True)
    with open(fill, "wb") as stream:
        try:
            while True:
                stream.write(b"\0" * (1 << 16))
                stream.flush()
        except OSError:
            pass
    return {"disk_free_bytes": os.statvfs(node.tmpfs_dir).f_bavail * stats.f_frsize}


def clear_disk_full(node) -> None:
    try:
        os.unlink(os.path.join(node.tmpfs_dir, DISK_FILL_FILE))
    except FileNotFoundError:
        pass
    subprocess.run(["mount", "-o", "remount,size=%s" % node.disk_size, node.tmpfs_dir], check=True)


# ---- ssh-drop ---------------------------------------------------------------------------------------------------
def apply_ssh_drop(node) -> dict:
    killed = [pid for pid in node.node_pids() if process_name(pid) == "sshd"]
    kill_pids(killed, signal.SIGKILL)
    return {"sshd_killed": len(killed)}


def clear_ssh_drop(node) -> None:
    if node.holder_pid:
        rc, _out, err = node.run(["/usr/sbin/sshd", "-f", "/run/sshd-gpulab/sshd_config",
                                  "-E", "/run/sshd-gpulab/sshd.log"])
        if rc != 0:
            node.lab.log("%s: sshd did not start again: %s" % (node.name, err.strip()))
        node.wait_ssh()


# ---- secure-boot-no-key, reboot-hang ----------------------------------------------------------------------------
def apply_secure_boot_no_key(node) -> dict:
    if node.state.get("efi_before_fault") is None:
        node.state["efi_before_fault"] = node.efi()
    return {"effective": "next boot"}


def clear_secure_boot_no_key(node) -> None:
    saved = node.state.get("efi_before_fault")
    if saved is not None:
        write_json(node.efi_path(), saved)
    node.state["efi_before_fault"] = None


def clear_reboot_hang(node) -> None:
    if node.status == "hung":
        node.lab.schedule_boot(node, delay_s=0)


def _no_details(node) -> dict:
    return {}


def _nothing_to_undo(node) -> None:
    pass


# kind -> (apply(node) -> event details, clear(node)); the order is the one `gpulab fault` lists
NODE_FAULTS = {
    "reboot-hang": (_no_details, clear_reboot_hang),
    "slow-boot": (_no_details, _nothing_to_undo),
    "dkms-fail": (_no_details, _nothing_to_undo),
    "disk-full": (apply_disk_full, clear_disk_full),
    "secure-boot-no-key": (apply_secure_boot_no_key, clear_secure_boot_no_key),
    "ssh-drop": (apply_ssh_drop, clear_ssh_drop),
    "driver-mismatch": (apply_driver_mismatch, clear_driver_mismatch),
    # GPU Operator mode: the driver container's module build fails on this node (read by nvidia/driverctr.py)
    "operator-driver-fail": (_no_details, _nothing_to_undo),
    "driver-skew": (apply_driver_mismatch, clear_driver_mismatch),
    "plugin-socket-stale": (apply_plugin_socket_stale, clear_plugin_socket_stale),
    "kubelet-socket-dead": (apply_kubelet_socket_dead, clear_kubelet_socket_dead),
    # `nvidia-smi mig -cgi` fails with NVML's Unknown Error (as after an upgrade whose GSP firmware times out,
    # Xid 119), read inside the node by the twin's nvidia-smi from /run/gpulab/faults.json; survives reboots
    "mig-create-fail": (_no_details, _nothing_to_undo),
}
SIMPLE_FAULTS = tuple(NODE_FAULTS)


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
    if kind.startswith("dcgm-fail:"):
        # read inside the node by the twin's dcgmi (`up --dcgm`) from /run/gpulab/faults.json
        parts = kind.split(":")
        if len(parts) not in (2, 3) or parts[1] not in DCGM_TESTS or (len(parts) == 3 and not parts[2].isdigit()):
            raise FaultError("fault %r: expected dcgm-fail:TEST[:GPU], TEST one of %s" % (kind, ", ".join(DCGM_TESTS)))
        return ("dcgm", parts[1], int(parts[2]) if len(parts) == 3 else 0)
    raise FaultError("unknown fault %r; known: %s, xid:CODE[:GPU], dcgm-fail:TEST[:GPU]"
                     % (kind, ", ".join(SIMPLE_FAULTS + CLUSTER_FAULTS)))


def check_armable(kind: str) -> tuple:
    """The parsed fault, if ``gpulab fault NODE KIND --at-next-boot`` can arm it; FaultError otherwise (the
    Kubernetes twin says which cluster kinds a boot can bring)."""
    parsed = parse_fault(kind)
    if parsed[0] == "simple" and kind in BOOT_TIME_FAULTS:
        raise FaultError("fault %s already takes effect at the next boot: set it without --at-next-boot" % kind)
    return parsed


def apply(node, parsed: tuple) -> dict:
    """Apply a parsed fault to ``node``; the event details."""
    if parsed[0] == "xid":
        return apply_xid(node, parsed[1], parsed[2])
    return NODE_FAULTS.get(parsed[1], (_no_details, _nothing_to_undo))[0](node)


def clear(node, parsed: tuple) -> None:
    if parsed[0] == "xid":
        clear_xid(node, parsed[1], parsed[2])
    else:
        NODE_FAULTS.get(parsed[1], (_no_details, _nothing_to_undo))[1](node)
