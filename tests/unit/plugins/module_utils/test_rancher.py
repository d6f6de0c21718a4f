# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import rancher as _rancher


def test_default_layout_of_k3s_and_rke2():
    k3s = _rancher.layout("k3s")
    assert k3s["generated_config"] == "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    assert k3s["flags_file"] == "/etc/rancher/k3s/config.yaml.d/99-gpuops-nvidia.yaml"
    assert k3s["containerd_binaries"][0] == "/var/lib/rancher/k3s/data/current/bin/containerd"
    assert _rancher.layout("rke2")["drop_in_dirs"] == ["/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d",
                                                       "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.d"]


@pytest.mark.parametrize("imports, expected", [
    ([], None),
    (["/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/*.toml"],
     "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/99-nvidia.toml"),
    (["/var/lib/rancher/k3s/agent/etc/containerd/config.toml.d/*.toml"],
     "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.d/99-nvidia.toml"),
    (["/elsewhere/*.toml"], None),
])
def test_drop_in_only_where_the_generated_config_imports_it(imports, expected):
    assert _rancher.imported_drop_in({"imports": imports}, _rancher.layout("k3s")) == expected


def test_agent_unit_is_preferred_and_server_found_on_servers():
    assert _rancher.service("k3s", lambda path: path == "/etc/systemd/system/k3s.service") == "k3s"
    assert _rancher.service("rke2", lambda path: True) == "rke2-agent"
    assert _rancher.service("rke2", lambda path: path.endswith("rke2-server.service")) == "rke2-server"


def test_generated_config_version_implies_the_containerd_release():
    assert _rancher.containerd_version_for(3) == (2, 0, 0) and _rancher.containerd_version_for(2) == (1, 7, 0)
