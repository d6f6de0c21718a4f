"""Device views of a node twin: NVIDIA character devices under /dev and PCI functions under /sys/bus/pci/devices.

nsinit makes them at boot; the daemon re-makes them in a running node when its hardware changes (Xid 79)."""
from __future__ import annotations

import os

from gpulab.osutil import in_root


def make_nvidia_dev_nodes(root: str, dev_nodes: list) -> None:
    for node in dev_nodes:
        path = in_root(root, node["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mknod(path, 0o666 | 0o020000, os.makedev(int(node["major"]), int(node["minor"])))
        os.chmod(path, 0o666)


def make_pci_devices(root: str, pci_devices: list) -> None:
    """NVIDIA functions (and the host bridge every machine has) as /sys/bus/pci/devices/<address>/ entries."""
    base = in_root(root, "/sys/bus/pci/devices")
    host_bridge = {"address": "0000:00:00.0", "vendor": "0x8086", "device": "0x09a2", "class": "0x060000",
                   "driver": None}
    for device in [host_bridge] + list(pci_devices):
        path = os.path.join(base, device["address"])
        os.makedirs(path, exist_ok=True)
        for key in ("vendor", "device", "class"):
            with open(os.path.join(path, key), "w") as stream:
                stream.write(device[key] + "\n")
        for key in ("subsystem_vendor", "subsystem_device"):
            if device.get(key):
                with open(os.path.join(path, key), "w") as stream:
                    stream.write(device[key] + "\n")
        if device.get("driver"):
            os.symlink("../../../../bus/pci/drivers/%s" % device["driver"], os.path.join(path, "driver"))
