"""The GPU Operator's driver container (NVIDIA/gpu-driver-container, `nvidia-driver init`) on a node twin.

What the container does on start, as its script does it: stop the persistence daemon, **unload** the NVIDIA
modules that are loaded (refused while anything holds them: "Could not unload NVIDIA driver kernel modules,
driver is in use", and the container exits 1), unmount its old rootfs, compile the modules for the running
kernel and install the driver into its own root, which the host sees at ``/run/nvidia/driver``, then load
the modules and wait for a signal. On SIGTERM it unloads the modules again (failing the same way while they
are in use: then they stay loaded) and unmounts its rootfs. ``/run`` is per boot: a node boots with no driver
until its driver pod has loaded one again.

``start(...)`` and ``stop(...)`` return plain data; the node core runs them inside the node
(``python3 -m gpulab.nvidia.driverctr start VERSION [--loaded V] [--in-use]``, JSON on stdout: the hardware,
EFI state and faults are read from ``/run/gpulab``) and applies the views (``gpulab/driverload.py``).
The fault ``operator-driver-fail`` makes the module build fail (the container exits 1 before loading).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from gpulab.nvidia import boot, installer
from gpulab.nvidia.kmodbuild import InstallerError

CONTAINER_ROOT = "/run/nvidia/driver"
BUILD_FAIL_FAULT = "operator-driver-fail"
IN_USE_TEXT = "Could not unload NVIDIA driver kernel modules, driver is in use"


def container_root(root: str) -> str:
    return root.rstrip("/") + CONTAINER_ROOT


def _unload(loaded_version, modules_in_use: bool, log: list) -> bool:
    """The script's _unload_driver: True when nothing is loaded any more."""
    log += ["Stopping NVIDIA persistence daemon...", "Unloading NVIDIA driver kernel modules..."]
    if loaded_version and modules_in_use:
        log.append(IN_USE_TEXT)
        return False
    return True


def start(root: str, version: str, hw: dict, efi, faults: list, loaded_version, modules_in_use: bool,
          cache_dir=None) -> dict:
    """The container starting on a node whose root (seen from the caller) is ``root``.

    Returns ``{"ok", "log", "unloaded", "state"}``: ``unloaded`` when a loaded module went (the node core
    removes its views), ``state`` the loaded views (``compute_boot_state`` form) when ``ok``."""
    release = boot.kernel_release(hw)
    log = ["", "========== NVIDIA Software Installer ==========", "",
           "Starting installation of NVIDIA driver version %s for Linux kernel version %s" % (version, release), ""]
    result = {"ok": False, "log": log, "unloaded": False, "state": None}
    if not _unload(loaded_version, modules_in_use, log):
        return result
    result["unloaded"] = bool(loaded_version)
    log.append("Unmounting NVIDIA driver rootfs...")
    target = container_root(root)
    shutil.rmtree(target, ignore_errors=True)
    log += ["Checking NVIDIA driver packages...", "Updating the package cache...", "Resolving Linux kernel version...",
            "Proceeding with Linux kernel version %s" % release, "Installing Linux kernel headers...",
            "Installing Linux kernel module files...", "Generating Linux kernel version string...",
            "Compiling NVIDIA driver kernel modules..."]
    if BUILD_FAIL_FAULT in (faults or []):
        log += ["/usr/src/nvidia-%s/kernel/nvidia/nv.c: error: implicit declaration of function 'pci_enable_msi'"
                % version,
                "make[2]: *** [scripts/Makefile.build:243: /usr/src/nvidia-%s/kernel/nvidia/nv.o] Error 1" % version,
                "make: *** [Makefile:82: modules] Error 2",
                "Could not compile NVIDIA driver kernel modules"]
        return result
    try:
        installer.preinstall(target, version, cache_dir)
    except InstallerError as error:
        log += str(error).splitlines() + ["Could not install NVIDIA driver"]
        return result
    log += ["Relinking NVIDIA driver kernel modules...",
            "Building NVIDIA driver package nvidia-modules-%s..." % release,
            "Installing NVIDIA driver kernel modules...", "Loading ipmi and i2c_core kernel modules...",
            "Loading NVIDIA driver kernel modules...", "+ modprobe nvidia", "+ modprobe nvidia-uvm",
            "+ modprobe nvidia-modeset"]
    passed = [fault for fault in faults or [] if fault == "driver-mismatch"]
    state = boot.compute_boot_state(root=target, hw=hw, efi=efi, faults=passed)
    if not state.get("module_loaded"):
        reason = "Key was rejected by service" if state.get("module_rejected") else "No such device"
        log.append("modprobe: ERROR: could not insert 'nvidia': %s" % reason)
        return result
    log += ["Starting NVIDIA persistence daemon...", "Mounting NVIDIA driver rootfs...",
            "Done, now waiting for signal"]
    result.update(ok=True, state=state)
    return result


def stop(root: str, loaded_version, modules_in_use: bool) -> dict:
    """SIGTERM: ``{"ok", "log", "unloaded"}``; while the modules are in use they stay loaded."""
    log = ["Caught signal"]
    if not _unload(loaded_version, modules_in_use, log):
        return {"ok": False, "log": log, "unloaded": False}
    log.append("Unmounting NVIDIA driver rootfs...")
    shutil.rmtree(container_root(root), ignore_errors=True)
    return {"ok": True, "log": log, "unloaded": bool(loaded_version)}


def _read_json(path: str, default):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return default


def main(argv=None) -> int:
    """Inside a node: `start VERSION` or `stop`, `--loaded VERSION` (what is loaded now), `--in-use`."""
    parser = argparse.ArgumentParser(prog="python3 -m gpulab.nvidia.driverctr")
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("version", nargs="?")
    parser.add_argument("--loaded")
    parser.add_argument("--in-use", action="store_true")
    args = parser.parse_args(argv)
    if args.action == "stop":
        result = stop("/", args.loaded, args.in_use)
    else:
        cache_dir = "/opt/gpulab/cache" if os.path.isdir("/opt/gpulab/cache") else None
        result = start("/", args.version, _read_json("/run/gpulab/hw.json", {"gpus": []}),
                       _read_json("/run/gpulab-firmware/efi.json", {}) or {},
                       _read_json("/run/gpulab/faults.json", []), args.loaded, args.in_use, cache_dir)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
