"""Node personalities: the fleet gets the distributions asked for in turn, and a Rocky node's disk says Rocky
(identity files, dnf set up on the twin's mirror) and hides the host's Debian files with overlay whiteouts."""
from __future__ import annotations

import os
import stat
import sys

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab import personality  # noqa: E402


def test_the_fleet_gets_the_distributions_in_turn_and_debian_by_default():
    assert personality.fleet_os(["ubuntu2204", "rocky9"], 5) == ["ubuntu2204", "rocky9", "ubuntu2204", "rocky9",
                                                                  "ubuntu2204"]
    assert personality.fleet_os([], 2) == ["debian12", "debian12"]
    with pytest.raises(ValueError, match="unknown --os centos7"):
        personality.fleet_os(["centos7"], 1)
    assert [personality.package_manager(name) for name in personality.OS_NAMES] == ["apt", "apt", "dnf"]


@pytest.mark.skipif(os.geteuid() != 0, reason="an overlay whiteout is a character device: needs root")
def test_a_rocky_disk_says_rocky_uses_the_mirror_and_hides_the_hosts_debian_files(tmp_path):
    upper = str(tmp_path / "upper")
    personality.write_identity(upper, "rocky9", {"baseurl": "http://127.0.0.1:1/rocky/$releasever/BaseOS/$basearch/os/",
                                                 "key": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"})
    with open(os.path.join(upper, "etc/os-release")) as handle:
        assert 'ID="rocky"' in handle.read()
    with open(os.path.join(upper, "etc/redhat-release")) as handle:
        assert handle.read() == "Rocky Linux release 9.4 (Blue Onyx)\n"
    with open(os.path.join(upper, "etc/yum.repos.d/rocky.repo")) as handle:
        repo = handle.read()
    assert "baseurl=http://127.0.0.1:1/rocky/$releasever/BaseOS/$basearch/os/" in repo and "gpgcheck=1" in repo
    hidden = os.lstat(os.path.join(upper, "etc/debian_version"))
    assert stat.S_ISCHR(hidden.st_mode) and hidden.st_rdev == os.makedev(0, 0)
    assert os.path.isdir(os.path.join(upper, "var/lib/rpm"))


@pytest.mark.skipif(os.geteuid() != 0, reason="an overlay whiteout is a character device: needs root")
def test_an_ubuntu_disk_keeps_debian_version_and_adds_lsb_release(tmp_path):
    upper = str(tmp_path / "upper")
    personality.write_identity(upper, "ubuntu2204")
    with open(os.path.join(upper, "etc/lsb-release")) as handle:
        assert "DISTRIB_RELEASE=22.04" in handle.read()
    with open(os.path.join(upper, "etc/debian_version")) as handle:
        assert handle.read() == "bookworm/sid\n"
    assert not os.path.exists(os.path.join(upper, "etc/yum.repos.d"))
