"""The fake `nvidia-ctk` of the twin's `nvidia-container-toolkit-base` package: `cdi generate` writes the CDI spec
NVIDIA's tool writes for the node's driver and GPUs.

What `cdi generate` reads is what the real tool reads through NVML and the filesystem: the GPUs NVML shows
(`smi.load_node_hw` / `smi.visible_gpus`), the NVML init errors of a driver that is absent, not loaded or
mismatched, the device nodes present in `/dev`, and the driver's libraries, binaries and GSP firmware of the
userspace version. The spec's shape follows nvidia-ctk 1.17 (`cmd/nvidia-ctk/cdi/generate/generate_test.go`,
`tests/unit/fixtures/cdi/`): device names `index` and `uuid` plus `all`, common edits with
`NVIDIA_VISIBLE_DEVICES=void`, the control device nodes, the `nvidia-cdi-hook` createContainer hooks and read-only
bind mounts. MIG devices are not listed. Output: YAML (default) or JSON, on stdout or `--output FILE`.

Runs inside nodes (`python3 -m gpulab.nvidia.ctk`, the package's `/usr/bin/nvidia-ctk` wrapper); imports only
`gpulab.nvidia.smi` from gpulab.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

from gpulab.nvidia import smi

CTK_VERSION = "1.17.8"
CTK_COMMIT = "gpulab"
CDI_VERSION = "0.5.0"
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
CDI_HOOK = "/usr/bin/nvidia-cdi-hook"
CONTROL_DEVICES = ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]
DRIVER_BINARIES = ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump", "/usr/bin/nvidia-persistenced",
                   "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server"]
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]


class CtkError(Exception):
    """A failure the real tool reports as `level=error msg=...` with exit status 1."""


def nvml_error(root: str) -> str | None:
    """Why NVML would not initialise on the node (the real tool's error name), None when it would."""
    userspace = smi.userspace_driver_version(root)
    if userspace is None:
        return "ERROR_LIBRARY_NOT_FOUND"
    kernel = smi.kernel_driver_version(smi._read_text(smi._node_path(smi.PROC_VERSION_PATH, root)))
    if kernel is None:
        return "ERROR_DRIVER_NOT_LOADED"
    if kernel != userspace:
        return "ERROR_LIB_RM_VERSION_MISMATCH"
    return None


def _exists(root: str, path: str) -> bool:
    return os.path.exists(os.path.join(root, path.lstrip("/")))


def _hook(*args: str) -> dict:
    return {"hookName": "createContainer", "path": CDI_HOOK, "args": ["nvidia-cdi-hook"] + list(args)}


def _mount(driver_root: str, path: str) -> dict:
    return {"hostPath": driver_root.rstrip("/") + path, "containerPath": path, "options": list(MOUNT_OPTIONS)}


def _device_node(driver_root: str, path: str) -> dict:
    return {"path": path, "hostPath": driver_root.rstrip("/") + path}


def driver_files(root: str, version: str) -> list:
    """The driver's files a container gets: libraries of this version, binaries, GSP firmware (sorted)."""
    libraries = sorted(path[len(root.rstrip("/")):] if root != "/" else path
                       for path in glob.glob(os.path.join(root, LIB_DIR.lstrip("/"), "lib*.so.%s" % version)))
    binaries = [path for path in DRIVER_BINARIES if _exists(root, path)]
    firmware_dir = os.path.join(root, "lib/firmware/nvidia", version)
    firmware = sorted("/lib/firmware/nvidia/%s/%s" % (version, name)
                      for name in (os.listdir(firmware_dir) if os.path.isdir(firmware_dir) else []))
    return libraries + binaries + firmware


def generate_spec(root: str = "/", vendor: str = "nvidia.com", device_class: str = "gpu",
                  driver_root: str = "/", name_strategies: tuple = ("index", "uuid")) -> dict:
    """The spec `nvidia-ctk cdi generate` writes for the node under `root`; CtkError when NVML cannot start."""
    error = nvml_error(root)
    if error:
        raise CtkError("failed to generate CDI spec: failed to create device CDI specs: failed to initialize "
                       "NVML: %s" % error)
    version = smi.userspace_driver_version(root)
    devices = []
    every_gpu_node = []
    for gpu in sorted(smi.visible_gpus(smi.load_node_hw(root)), key=lambda item: item["index"]):
        node = _device_node(driver_root, "/dev/nvidia%d" % gpu["index"])
        every_gpu_node.append(node)
        for strategy in name_strategies:
            name = str(gpu["index"]) if strategy == "index" else gpu["uuid"]
            devices.append({"name": name, "containerEdits": {"deviceNodes": [dict(node)]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [dict(node) for node in every_gpu_node]}})
    edits = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [_device_node(driver_root, path) for path in CONTROL_DEVICES if _exists(root, path)],
        "hooks": [_hook("create-symlinks", "--link", "libcuda.so.1::%s/libcuda.so" % LIB_DIR),
                  _hook("enable-cuda-compat", "--host-driver-version=%s" % version),
                  _hook("update-ldcache", "--folder", LIB_DIR)],
        "mounts": [_mount(driver_root, path) for path in driver_files(root, version)],
    }
    return {"cdiVersion": CDI_VERSION, "kind": "%s/%s" % (vendor, device_class), "devices": devices,
            "containerEdits": edits}


def _yaml_scalar(value) -> str:
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./:=,+-]+", text) and not re.fullmatch(r"[0-9.]+|true|false|null|~", text):
        return text
    return json.dumps(text)


def _yaml_lines(value, indent: int) -> list:
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines += ["%s%s:" % (pad, key)] + _yaml_lines(item, indent + 4)
            else:
                lines.append("%s%s: %s" % (pad, key, "[]" if item == [] else _yaml_scalar(item)))
        return lines
    for item in value:
        if isinstance(item, dict):
            body = _yaml_lines(item, indent + 2)
            lines += [pad + "- " + body[0][indent + 2:]] + body[1:]
        else:
            lines.append("%s- %s" % (pad, _yaml_scalar(item)))
    return lines


def to_yaml(value) -> str:
    """Block-style YAML of dicts, lists and strings (what a spec holds), laid out as go-yaml v3 writes it."""
    return "".join(line + "\n" for line in _yaml_lines(value, 0))


def _option(argv: list, name: str, default=None):
    """`--name VALUE` or `--name=VALUE` (last one wins), removed from argv."""
    value = default
    for index in range(len(argv) - 1, -1, -1):
        if argv[index] == name and index + 1 < len(argv):
            value = argv[index + 1]
            del argv[index:index + 2]
        elif argv[index].startswith(name + "="):
            value = argv[index].split("=", 1)[1]
            del argv[index]
    return value


def _options(argv: list, name: str) -> list:
    values = []
    while True:
        value = _option(argv, name)
        if value is None:
            return values[::-1]
        values.append(value)


def cdi_generate(argv: list, root: str) -> int:
    fmt = _option(argv, "--format", "yaml")
    output = _option(argv, "--output")
    vendor = _option(argv, "--vendor", "nvidia.com")
    device_class = _option(argv, "--class", "gpu")
    driver_root = _option(argv, "--driver-root", "/")
    strategies = tuple(_options(argv, "--device-name-strategy")) or ("index", "uuid")
    if argv:
        raise CtkError("flag provided but not defined: %s" % argv[0])
    if fmt not in ("yaml", "json"):
        raise CtkError("invalid output format: %s" % fmt)
    if output and output.endswith(".json"):
        fmt = "json"
    spec = generate_spec(root, vendor, device_class, driver_root, strategies)
    text = json.dumps(spec, indent=2) + "\n" if fmt == "json" else "---\n" + to_yaml(spec)
    if not output:
        sys.stdout.write(text)
        return 0
    target = os.path.join(root, output.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(target + ".tmp", 0o644)
    os.replace(target + ".tmp", target)
    sys.stderr.write('level=info msg="Generated CDI spec with version %s"\n' % CDI_VERSION)
    return 0


def main(argv: list | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("GPULAB_NODE_ROOT", "/")
    try:
        if argv in (["--version"], ["-v"], ["version"]):
            sys.stdout.write("NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (CTK_VERSION, CTK_COMMIT))
            return 0
        if argv[:2] == ["cdi", "generate"]:
            return cdi_generate(argv[2:], root)
        raise CtkError("the twin's nvidia-ctk has %s (not modelled: %s)"
                       % ("--version and cdi generate", " ".join(argv) or "no command"))
    except CtkError as error:
        sys.stderr.write('level=error msg="%s"\n' % error)
        return 1


if __name__ == "__main__":
    sys.exit(main())
