"""What the NVIDIA container runtime injects into a GPU container on a node twin: the driver root the toolkit
uses, the device nodes, and the driver's files bind-mounted at their paths in the container (the `containerEdits`
of the CDI spec `nvidia-ctk cdi generate --driver-root ROOT` writes, `ctk.py`; the legacy `nvidia-container-cli`
mounts the same files).

The driver root is the one the GPU Operator's driver validation hands the toolkit and the device plugin
(`/run/nvidia/validations/driver-ready`, `NVIDIA_DRIVER_ROOT=`, sourced by their entrypoints) when that file is
there; otherwise the validation's own rule: a driver installed on the host (`/usr/bin/nvidia-smi` and NVML under
`/`) first, else the Operator driver container's root `/run/nvidia/driver` (mounted there by the container once
it has installed the driver). No driver under either: None (the runtime's NVML would not load; the twin then
injects nothing). Device nodes come from the host's `/dev` (`NVIDIA_DEV_ROOT=/` in both cases).

`container_edits(root)` is called by the node core through the layer (`Node.gpu_container_edits`) with
`root=/proc/<pid1>/root`; it only reads files. Imports only `ctk` and `smi`.
"""
from __future__ import annotations

import glob
import os
import re

from gpulab.nvidia import ctk, smi

DRIVER_READY = "/run/nvidia/validations/driver-ready"
CONTAINER_DRIVER_ROOT = "/run/nvidia/driver"
HOST_DRIVER_ROOT = "/"


def _in_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def nvml_version(base: str):
    """The version of the NVML library under the root ``base`` (where its `libnvidia-ml.so.1` link leads), None when
    there is none. The links are followed inside ``base``: seen from the host through `/proc/<pid1>/root`, a
    node's `/run` is a mount of its own that `os.path.realpath` would leave."""
    path = _in_root(base, smi.NVML_LIBRARY_LINK)
    for _hop in range(8):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        path = _in_root(base, target) if target.startswith("/") else os.path.join(os.path.dirname(path), target)
    match = re.search(r"libnvidia-ml\.so\.(\d+(?:\.\d+)+)$", path)
    return match.group(1) if match and os.path.isfile(path) else None


def _holds_driver(root: str, driver_root: str) -> bool:
    """NVML and nvidia-smi of a driver under ``driver_root`` (what the validation's `nvidia-smi` run needs)."""
    base = _in_root(root, driver_root)
    return nvml_version(base) is not None and os.path.isfile(_in_root(base, "/usr/bin/nvidia-smi"))


def validation_driver_root(text: str):
    """``NVIDIA_DRIVER_ROOT`` of a `driver-ready` file's ``KEY=value`` lines, None when it names none."""
    for line in (text or "").splitlines():
        key, _, value = line.strip().partition("=")
        if key == "NVIDIA_DRIVER_ROOT" and value.strip():
            return value.strip()
    return None


def driver_root(root: str = "/"):
    """The driver root the toolkit uses on the node under ``root``, or None when no driver is there."""
    try:
        with open(_in_root(root, DRIVER_READY), encoding="utf-8") as stream:
            named = validation_driver_root(stream.read())
    except OSError:
        named = None
    candidates = [named] if named else [HOST_DRIVER_ROOT, CONTAINER_DRIVER_ROOT]
    return next((candidate for candidate in candidates if _holds_driver(root, candidate)), None)


def container_edits(root: str = "/"):
    """``{"driverRoot", "driverVersion", "deviceNodes", "mounts"}`` for a GPU container on the node under ``root``
    (``mounts``: ``hostPath`` under the driver root, ``containerPath`` where the container sees it), or None."""
    driver = driver_root(root)
    if driver is None:
        return None
    base = _in_root(root, driver)
    version = nvml_version(base)
    prefix = "" if driver == HOST_DRIVER_ROOT else driver.rstrip("/")
    mounts = [{"hostPath": prefix + path, "containerPath": path, "options": list(ctk.MOUNT_OPTIONS)}
              for path in ctk.driver_files(base, version)]
    gpu_nodes = sorted((os.path.basename(path) for path in glob.glob(_in_root(root, "/dev/nvidia[0-9]*"))),
                       key=lambda name: int(name[len("nvidia"):]) if name[len("nvidia"):].isdigit() else -1)
    nodes = [path for path in ctk.CONTROL_DEVICES if os.path.exists(_in_root(root, path))] + \
        ["/dev/" + name for name in gpu_nodes]
    return {"driverRoot": driver, "driverVersion": version,
            "deviceNodes": [{"path": path, "hostPath": path} for path in nodes], "mounts": mounts}
