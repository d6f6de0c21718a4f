"""The NVIDIA container runtime's injection as the twin applies it to a pod container's process.

A container that gets GPUs (it asks for `nvidia.com/gpu` or `nvidia.com/mig-*`, or runs with
`runtimeClassName: nvidia`) gets the node's driver injected: the runtime bind-mounts the driver's binaries,
libraries and firmware from the driver root its toolkit uses (`/` for a host-installed driver,
`/run/nvidia/driver` for the GPU Operator's driver container) at their usual paths and adds the device nodes
(the node's `containerEdits`, `NodeView.gpu_container_edits()`, `nvidia/ctrinject.py`). A container without GPUs
gets none of it, so on an Operator node it finds no `nvidia-smi`.

The twin's containers share their node's root, so "mounting" is resolving: the container's program is looked up
through the mounts along its PATH (`nvidia-smi` -> `/run/nvidia/driver/usr/bin/nvidia-smi`), and the directories
the mounted binaries and libraries come from are added to its PATH and LD_LIBRARY_PATH (the update-ldcache hook's
part). Device nodes need nothing: the node's `/dev` is the container's. Files mounted from `/` are where the
container looks anyway: with a host-installed driver nothing changes.
"""
from __future__ import annotations

import os

from .scheduler import pod_requests

CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"   # a container image's usual PATH
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
RUNTIME_CLASS = "nvidia"


def gets_gpus(pod: dict) -> bool:
    """Whether the NVIDIA runtime injects the driver into the pod's containers."""
    if (pod.get("spec") or {}).get("runtimeClassName") == RUNTIME_CLASS:
        return True
    return any(name.startswith(GPU_RESOURCE_PREFIXES) and amount > 0 for name, amount in pod_requests(pod).items())


def _moved(edits) -> list:
    """Mounts whose file is not where the container sees it (a driver root other than `/`)."""
    return [mount for mount in (edits or {}).get("mounts") or [] if mount["hostPath"] != mount["containerPath"]]


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def resolve_program(program: str, edits, path: str = CONTAINER_PATH) -> str:
    """Where the container's ``program`` comes from: the mount's host path when a mount provides it (directly or
    along ``path``), else ``program`` unchanged (the node's own)."""
    mounted = {mount["containerPath"]: mount["hostPath"] for mount in _moved(edits)}
    if "/" in program:
        return mounted.get(os.path.normpath(program), program)
    for directory in path.split(":"):
        found = mounted.get(os.path.join(directory, program))
        if found:
            return found
    return program


def injected(argv: list, env: dict, edits) -> tuple:
    """(argv, env) of a GPU container's process with the runtime's ``edits`` applied (unchanged when None)."""
    argv, env = list(argv), dict(env)
    moved = _moved(edits)
    if not moved or not argv:
        return argv, env
    path = env.get("PATH") or CONTAINER_PATH
    argv[0] = resolve_program(argv[0], edits, path)
    directories = path.split(":")
    binaries = _unique(os.path.dirname(mount["hostPath"]) for mount in moved
                       if os.path.dirname(mount["containerPath"]) in directories)
    libraries = _unique(os.path.dirname(mount["hostPath"]) for mount in moved if ".so" in mount["containerPath"])
    if binaries:
        env["PATH"] = ":".join(_unique(directories + binaries))
    if libraries:
        env["LD_LIBRARY_PATH"] = ":".join(_unique(libraries + [d for d in env.get("LD_LIBRARY_PATH", "").split(":")
                                                                if d]))
    return argv, env
