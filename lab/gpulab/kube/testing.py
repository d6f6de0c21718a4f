"""`FakeNodeView`: a pure-Python stand-in for the node twin's NodeView (no namespaces, no ssh).

It keeps the same surface as the daemon's NodeView (see lab/ARCHITECTURE.md) and adds the knobs a
test needs to act like the node twin: power off/on, reboot into another driver, drop the driver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid

from gpulab.nvidia.profiles import H100_MEMORY_MIB, H100_NAME

NVIDIA_SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n")



def make_gpus(count: int, name: str = H100_NAME, memory_mib: int = H100_MEMORY_MIB,
              mig_profiles=None) -> list:
    """GPU dicts shaped like NodeView.visible_gpus(); `mig_profiles` (e.g. ["3g.40gb", "1g.10gb"])
    turns MIG on for every GPU with those devices."""
    gpus = []
    for index in range(count):
        mig_devices = [{"profile": profile, "uuid": "MIG-%s" % uuid.uuid4()} for profile in mig_profiles or []]
        gpus.append({"index": index, "uuid": "GPU-%s" % uuid.uuid4(), "name": name, "memory_mib": memory_mib,
                     "mig_enabled": bool(mig_profiles), "mig_devices": mig_devices})
    return gpus


class FakeNodeView:
    """A node twin as the Kubernetes twin sees it. Thread-safe; callbacks run synchronously."""

    def __init__(self, name: str, gpus=None, driver_version="550.54.15", mig_capable=True,
                 kernel_release="6.1.0-18-amd64", host_processes=False):
        self.name = name
        self.host_processes = host_processes
        self.kernel_release = kernel_release
        self._lock = threading.Lock()
        self._up = True
        self._boot_id = str(uuid.uuid4())
        self._hardware_gpus = list(gpus if gpus is not None else make_gpus(8))
        self._driver_version = driver_version
        self._mig_capable = mig_capable
        self._callbacks = []
        self.commands_run = []

    # --- NodeView interface -------------------------------------------------------------------
    def is_up(self) -> bool:
        with self._lock:
            return self._up

    def boot_id(self) -> str:
        with self._lock:
            return self._boot_id

    def driver_version(self):
        with self._lock:
            return self._driver_version if self._up else None

    def visible_gpus(self) -> list:
        with self._lock:
            if not self._up or not self._driver_version:
                return []
            return [dict(gpu) for gpu in self._hardware_gpus]

    def mig_capable(self) -> bool:
        return self._mig_capable

    def pci_gpu_count(self) -> int:
        """GPUs on the PCI bus whether or not a driver binds them (what NFD's pci-10de label sees)."""
        return len(self._hardware_gpus)

    def start_process(self, argv, env=None):
        """With `host_processes`, a container's command runs as a host process (this fake node's namespaces
        are the host's), as the node twin runs it in its own; else None (the node runs no processes)."""
        if not self.host_processes or not self.is_up() or not argv or shutil.which(argv[0]) is None:
            return None
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        environment.update(env or {})
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=environment, start_new_session=True, cwd="/")

    def run(self, argv, timeout: float = 30):
        self.commands_run.append(list(argv))
        if not self.is_up():
            return 255, "", "ssh: connect to host %s port 22: Connection refused\n" % self.name
        if argv[:1] == ["nvidia-smi"]:
            return self._nvidia_smi(list(argv[1:]))
        return 127, "", "%s: command not found\n" % argv[0]

    def subscribe(self, callback) -> None:
        self._callbacks.append(callback)

    # --- test controls ------------------------------------------------------------------------
    def power_off(self) -> None:
        with self._lock:
            self._up = False
        self._notify("down")

    def power_on(self, driver_version="unchanged") -> None:
        """Boot (a new boot_id); optionally with another loaded driver (None = driver not loaded)."""
        with self._lock:
            self._up = True
            self._boot_id = str(uuid.uuid4())
            if driver_version != "unchanged":
                self._driver_version = driver_version
        self._notify("up")

    def reboot(self, driver_version="unchanged") -> None:
        self.power_off()
        self.power_on(driver_version)

    def set_gpus(self, gpus: list, notify: bool = True) -> None:
        """``notify=False``: a change no node event announces (MIG devices made with nvidia-smi)."""
        with self._lock:
            self._hardware_gpus = list(gpus)
        if notify:
            self._notify("gpus")

    def _notify(self, event_kind: str) -> None:
        for callback in list(self._callbacks):
            callback(self.name, event_kind)

    def _nvidia_smi(self, args: list):
        gpus = self.visible_gpus()
        if not gpus:
            return 9, NVIDIA_SMI_NO_DRIVER, ""
        if args == ["-L"]:
            return 0, "".join(_nvidia_smi_list_lines(gpu) for gpu in gpus), ""
        return 0, "NVIDIA-SMI %s  Driver Version: %s\n" % (self.driver_version(), self.driver_version()), ""


def _nvidia_smi_list_lines(gpu: dict) -> str:
    lines = ["GPU %d: %s (UUID: %s)\n" % (gpu["index"], gpu["name"], gpu["uuid"])]
    for mig_index, device in enumerate(gpu.get("mig_devices") or []):
        lines.append("  MIG %-13s Device %2d: (UUID: %s)\n" % (device["profile"], mig_index, device["uuid"]))
    return "".join(lines)


def wait_for(predicate, timeout_s=10.0, what="condition"):
    """``predicate()``'s first truthy value, polled every 50 ms; AssertionError naming ``what`` and the last value
    after ``timeout_s``."""
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout_s, what, last))
