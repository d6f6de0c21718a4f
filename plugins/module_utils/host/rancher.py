# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where k3s and RKE2 keep their containerd configuration, and what of it may be touched.

Both regenerate `<data dir>/agent/etc/containerd/config.toml` at every start, so it is never edited. What they read
instead: drop-ins in `config-v3.toml.d/` (containerd 2.x) or `config.toml.d/` when the generated config imports
them (recent releases), and `/etc/rancher/<flavor>/config.yaml.d/*.yaml` for their own flags (`default-runtime`).
They add an `nvidia` runtime themselves when `nvidia-container-runtime` is installed.
"""

from __future__ import annotations

import posixpath

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import containerd_config as cc

DROP_IN_NAME = "99-nvidia.toml"
FLAGS_NAME = "99-gpuops-nvidia.yaml"
# Unit file locations of the install scripts (k3s: /etc/systemd/system; RKE2 tarball: /usr/local/lib; RPM: /usr/lib).
_UNIT_DIRS = ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
              "/lib/systemd/system")
_SERVICES = {"k3s": ("k3s-agent", "k3s"), "rke2": ("rke2-agent", "rke2-server")}


def layout(flavor, data_dir=None, config_dir=None):
    """The paths of one flavor (data_dir: their --data-dir, default /var/lib/rancher/<flavor>; config_dir: the
    directory of their config.yaml, default /etc/rancher/<flavor>)."""
    data_dir = data_dir or "/var/lib/rancher/" + flavor
    containerd_dir = posixpath.join(data_dir, "agent", "etc", "containerd")
    return {
        # k3s unpacks its binaries to data/current/bin, RKE2 links the runtime image's to bin.
        "containerd_binaries": [posixpath.join(data_dir, "data", "current", "bin", "containerd"),
                                posixpath.join(data_dir, "bin", "containerd")],
        "generated_config": posixpath.join(containerd_dir, "config.toml"),
        # Newest schema first: k3s reads config-v3.toml.tmpl before config.toml.tmpl, and so its drop-in dirs.
        "drop_in_dirs": [posixpath.join(containerd_dir, "config-v3.toml.d"),
                         posixpath.join(containerd_dir, "config.toml.d")],
        "flags_file": posixpath.join(config_dir or "/etc/rancher/" + flavor, "config.yaml.d", FLAGS_NAME),
    }


def imported_drop_in(generated, paths):
    """The drop-in path the generated config imports, or None when it imports no drop-in directory."""
    imports = generated.get("imports") or []
    for directory in paths["drop_in_dirs"]:
        candidate = posixpath.join(directory, DROP_IN_NAME)
        if cc.is_imported(imports, candidate):
            return candidate
    return None


def containerd_version_for(config_version):
    """The containerd release a k3s/RKE2 generated config implies when its embedded binary cannot be asked."""
    return (2, 0, 0) if config_version >= 3 else (1, 7, 0)


def service(flavor, exists):
    """The unit that runs this node's k3s/RKE2 (agent first: a server node has no agent unit)."""
    for name in _SERVICES[flavor]:
        if any(exists(posixpath.join(directory, name + ".service")) for directory in _UNIT_DIRS):
            return name
    return _SERVICES[flavor][0]


def flags_text(runtime_name):
    """The config.yaml.d file that makes the NVIDIA runtime the default."""
    return ("# Managed by gpuops.nvidia.container_runtime: pods without a runtimeClassName run under %s.\n"
            "default-runtime: %s\n" % (runtime_name, runtime_name))
