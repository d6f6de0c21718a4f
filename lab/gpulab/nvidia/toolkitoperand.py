"""What the GPU Operator's container-toolkit operand leaves on a node's disk (`gpulab up --gpu-operator`).

The toolkit container (`nvidia-container-toolkit-daemonset`, NVIDIA Container Toolkit 1.18 in the Operator's
recent releases) installs its binaries on the host under ``/usr/local/nvidia/toolkit`` and configures containerd
with a drop-in, ``/etc/containerd/conf.d/99-nvidia.toml`` (RUNTIME_DROP_IN_CONFIG; nvidia-container-toolkit #1260,
#1407), adding the drop-in's directory to the ``imports`` of ``/etc/containerd/config.toml``. The drop-in holds
the runtimes ``nvidia``, ``nvidia-cdi`` and ``nvidia-legacy`` and makes ``nvidia`` the default runtime. Its
per-boot state sits under ``/run/nvidia`` (``toolkit/``, ``validations/``).

The twin models the state a node is in after the Operator went away without the toolkit container's clean-up
(its pod force-deleted, or the clean-up's known gaps: the binaries stay by design, nvidia-container-toolkit #494;
``default_runtime_name`` not restored, #1328; gpu-operator #188): every file is on the node's disk from ``up``,
and nothing in the twin removes them. ``/run`` is per boot, so ``install_run(root)`` lays the ``/run/nvidia`` part
down again when the node boots (``nsinit`` calls it through the layer when the node has the toolkit installed).

Runs on the host side at ``up`` (``install(upper, lower)``), and inside a node at boot (``install_run("/")``);
standard library only.
"""
from __future__ import annotations

import os

TOOLKIT_DIR = "/usr/local/nvidia/toolkit"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
MAIN_CONFIG = "/etc/containerd/config.toml"
RUN_DIR = "/run/nvidia"
RUNTIMES = (("nvidia", "nvidia-container-runtime"), ("nvidia-cdi", "nvidia-container-runtime.cdi"),
            ("nvidia-legacy", "nvidia-container-runtime.legacy"))
BINARIES = ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy",
            "nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-ctk", "nvidia-container-toolkit")
MARKER = ".gpulab-toolkit-operand"      # in TOOLKIT_DIR: install_run lays /run/nvidia down only where it exists
CRI = 'plugins."io.containerd.grpc.v1.cri"'


def _host_path(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def drop_in_text() -> str:
    """The drop-in for config version 2 (containerd 1.6/1.7, whose imports replace a whole plugin table: the CRI
    table carries the main config's CNI settings along, as nvidia-ctk copies the main config's CRI table)."""
    lines = ["version = 2", "", "[plugins]", "  [%s]" % CRI, "    [%s.cni]" % CRI,
             '      bin_dir = "/usr/lib/cni"', '      conf_dir = "/etc/cni/net.d"',
             "    [%s.containerd]" % CRI, '      default_runtime_name = "nvidia"',
             "      [%s.containerd.runtimes]" % CRI]
    for name, binary in RUNTIMES:
        table = '%s.containerd.runtimes."%s"' % (CRI, name) if "-" in name else "%s.containerd.runtimes.%s" % (
            CRI, name)
        lines += ["        [%s]" % table, '          runtime_type = "io.containerd.runc.v2"',
                  "          [%s.options]" % table, '            BinaryName = "%s/%s"' % (TOOLKIT_DIR, binary)]
    return "\n".join(lines) + "\n"


def with_import(main_text: str) -> str:
    """The main config with the drop-in's directory imported (an ``imports`` line after ``version``)."""
    line = 'imports = ["%s/*.toml"]' % os.path.dirname(DROP_IN)
    if line in main_text:
        return main_text
    out, added = [], False
    for text in main_text.splitlines():
        out.append(text)
        if not added and text.strip().startswith("version"):
            out.append(line)
            added = True
    if not added:
        out = [line, "version = 2"] + out
    return "\n".join(out) + "\n"


def install(root: str, lower: str = "/") -> list:
    """Write the toolkit operand's files on a node's disk (``root``: the overlay's upper dir; ``lower``: the
    overlay's lower dir, where the node's own main config is when its disk has none). Returns the paths."""
    written = []
    for binary in BINARIES:
        path = _host_path(root, "%s/%s" % (TOOLKIT_DIR, binary))
        _write(path, "#!/bin/sh\n# NVIDIA Container Toolkit (GPU Operator toolkit operand), gpulab stand-in\n"
                     'exec runc "$@"\n', 0o755)
        written.append(path)
    _write(_host_path(root, "%s/%s" % (TOOLKIT_DIR, MARKER)), "")
    _write(_host_path(root, DROP_IN), drop_in_text())
    written.append(_host_path(root, DROP_IN))
    main = _host_path(root, MAIN_CONFIG)
    source = main if os.path.exists(main) else _host_path(lower, MAIN_CONFIG)
    try:
        with open(source, encoding="utf-8") as handle:
            main_text = handle.read()
    except FileNotFoundError:
        main_text = "version = 2\n"
    _write(main, with_import(main_text))
    written.append(main)
    return written


def install_run(root: str = "/") -> bool:
    """At boot: the toolkit container's per-boot state under /run/nvidia, where the toolkit is installed."""
    if not os.path.exists(_host_path(root, "%s/%s" % (TOOLKIT_DIR, MARKER))):
        return False
    _write(_host_path(root, RUN_DIR + "/toolkit/nvidia-container-toolkit.pid"), "1\n")
    _write(_host_path(root, RUN_DIR + "/validations/toolkit-ready"), "")
    return True
