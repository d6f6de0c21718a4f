"""Host side of a driver loaded or unloaded while a node runs (the GPU Operator's driver container): the node
core applies what the NVIDIA layer's ``driverctr`` computed to the running node's views, as a boot would —
``/proc/driver/nvidia``, ``/sys/module/nvidia*``, ``/dev/nvidia*``, the PCI driver links, ``lsmod``'s list and
the kernel log — and records the loaded version in ``node.json`` (what ``NodeView.driver_version`` reads)."""
from __future__ import annotations

import os
import shutil
import stat

from gpulab.devviews import make_nvidia_dev_nodes
from gpulab.osutil import write_file, write_json

MODULE_NAMES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")


def _set_pci_driver(node, driver) -> None:
    base = node.root_path("/sys/bus/pci/devices")
    for gpu in node.hw().get("gpus") or []:
        path = os.path.join(base, gpu.get("pci_address", ""))
        if not gpu.get("pci_address") or not os.path.isdir(path):
            continue
        link = os.path.join(path, "driver")
        if os.path.lexists(link):
            os.unlink(link)
        if driver:
            os.symlink("../../../../bus/pci/drivers/%s" % driver, link)


def apply_loaded(node, state: dict) -> None:
    """The modules of ``state`` (``compute_boot_state`` form) are now loaded in the running node."""
    for path, text in sorted((state.get("files") or {}).items()):
        if path.startswith(("/proc/driver/nvidia/", "/sys/module/")):
            write_file(node.root_path(path), text)
    make_nvidia_dev_nodes(node.root_path("/"), [dev for dev in state.get("dev_nodes") or []
                                                if not os.path.lexists(node.root_path(dev["path"]))])
    _set_pci_driver(node, "nvidia")
    write_json(os.path.join(node.run_dir, "modules.json"), state.get("modules") or [])
    node.append_kmsg(state.get("kmsg") or [])
    node.state.update(module_loaded=True, kernel_driver_version=state.get("kernel_driver_version"))
    node.save()


def _holds_nvidia_device(pid: int) -> bool:
    """An open /dev/nvidia* of the process (read from the host: the link names the file from the node's mounts,
    so the device is known by its name and by being a character device)."""
    try:
        names = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for name in names:
        link = "/proc/%d/fd/%s" % (pid, name)
        try:
            if os.path.basename(os.readlink(link)).startswith("nvidia") and stat.S_ISCHR(os.stat(link).st_mode):
                return True
        except OSError:
            continue
    return False


def _is_persistenced(pid: int) -> bool:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as stream:
            argv = stream.read().split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(arg.decode(errors="replace")) == "nvidia-persistenced" for arg in argv[:2])


def module_users(pids: list) -> list:
    """What keeps the NVIDIA modules loaded, as the kernel counts it: ``pid N`` for each process (host PIDs of the
    node's namespace) with a /dev/nvidia* device open, or running nvidia-persistenced (which keeps them open)."""
    return ["pid %d" % pid for pid in sorted(pids) if _holds_nvidia_device(pid) or _is_persistenced(pid)]


def unload(node, ended_by_unload: tuple) -> dict:
    """``modprobe -r`` of the NVIDIA modules in the running node (the node core's lock held): refused while in use
    (a process holds /dev/nvidia*, or nvidia-persistenced runs), as the kernel refuses; else unloaded, and the faults
    of ``ended_by_unload`` end (driver-skew: the next ``modprobe nvidia`` loads the module on disk, as a boot would)."""
    if not node.state["module_loaded"]:
        return {"ok": True}
    users = module_users(node.node_pids())
    if users:
        node.lab.events.emit(node.name, "modprobe-remove-refused", users=users)
        return {"ok": False, "module": "nvidia", "reason": "in use by %s" % ", ".join(users)}
    apply_unloaded(node)
    ended = [kind for kind in node.faults if kind in ended_by_unload]
    for kind in ended:
        node.faults.remove(kind)
    if ended:
        node.write_faults_file()
    return {"ok": True}


def apply_unloaded(node) -> None:
    """``rmmod`` of every NVIDIA module: their /proc and /sys entries go (device files stay, as on a host)."""
    shutil.rmtree(node.root_path("/proc/driver/nvidia"), ignore_errors=True)
    for name in MODULE_NAMES:
        shutil.rmtree(node.root_path("/sys/module/%s" % name), ignore_errors=True)
    _set_pci_driver(node, None)
    write_json(os.path.join(node.run_dir, "modules.json"), [])
    node.append_kmsg(["nvidia-modeset: Unloading", "nvidia-uvm: Unloaded the UVM driver.",
                      "nvidia-nvlink: Unregistered Nvlink Core, major device number 239"])
    node.state.update(module_loaded=False, kernel_driver_version=None)
    node.save()
