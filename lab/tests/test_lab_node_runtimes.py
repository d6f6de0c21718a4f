"""`up --containerd` and `up --rancher` without a lab: who gets what, and the k3s/RKE2 install a new node's disk gets
(the real binaries and the role run in test_containerd_cdi.py and test_rancher_layouts.py)."""
from __future__ import annotations

import os

import pytest

from gpulab import noderuntime, rancherlayout


def test_containerd_lines_are_given_to_the_nodes_in_turn_and_default_to_the_hosts():
    assert noderuntime.fleet_containerd([], 2) == ["1.6", "1.6"]
    assert noderuntime.fleet_containerd(["1.7", "2.1"], 3) == ["1.7", "2.1", "1.7"]
    assert noderuntime.containerd_deb("1.6") is None, "1.6 is the host's own: nothing to fetch"
    with pytest.raises(ValueError, match="unknown --containerd 2.0"):
        noderuntime.fleet_containerd(["2.0"], 1)


def test_the_private_apt_dir_names_only_debians_archive_for_the_suite(tmp_path):
    apt_dir = noderuntime.private_apt_dir(str(tmp_path), "trixie")
    with open(os.path.join(apt_dir, "etc", "sources.list")) as stream:
        assert stream.read() == ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                                 "http://deb.debian.org/debian trixie main\n")
    options = noderuntime._apt_options(apt_dir)
    assert "Dir::State::status=%s/state/status" % apt_dir in options and "Dir::Etc=%s/etc" % apt_dir in options


def test_rancher_layouts_put_unit_program_and_embedded_containerd_where_the_installers_do(tmp_path):
    upper = str(tmp_path)
    assert rancherlayout.fleet_rancher([], 2) == [None, None]
    assert rancherlayout.fleet_rancher(["k3s-agent", "rke2-server"], 3) == ["k3s-agent", "rke2-server", "k3s-agent"]
    with pytest.raises(ValueError, match="unknown --rancher rke2"):
        rancherlayout.fleet_rancher(["rke2"], 1)

    assert rancherlayout.write_layout(upper, "rke2-server") == {"flavor": "rke2", "service": "rke2-server",
                                                               "data_dir": "/var/lib/rancher/rke2"}
    unit = tmp_path / "usr/local/lib/systemd/system/rke2-server.service"
    assert "ExecStart=/usr/local/bin/rke2 server\n" in unit.read_text()
    assert os.readlink(str(tmp_path / "var/lib/rancher/rke2/bin/containerd")) == "/usr/bin/containerd"
    rancherlayout.write_layout(upper, "k3s-agent")
    assert "ExecStart=/usr/local/bin/k3s agent\n" in (tmp_path / "etc/systemd/system/k3s-agent.service").read_text()
    assert os.readlink(str(tmp_path / "var/lib/rancher/k3s/data/current/bin/containerd")) == "/usr/bin/containerd"
    assert (tmp_path / "var/lib/gpulab-systemd/started").read_text() == "k3s-agent.service\nrke2-server.service\n"
