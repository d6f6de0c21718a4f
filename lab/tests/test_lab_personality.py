"""Node personalities: the fleet gets the distributions asked for in turn, and a Rocky node's disk says Rocky
(identity files, dnf set up on the twin's mirror) and hides the host's Debian files with overlay whiteouts."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
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


def test_each_distribution_names_its_headers_package_and_the_key_pair_its_dkms_signs_with():
    assert personality.headers_package("rocky9", "6.1.0-57-amd64") == "kernel-devel-6.1.0-57-amd64"
    assert personality.headers_package("ubuntu2204", "6.1.0-57-amd64") == "linux-headers-6.1.0-57-amd64"
    assert personality.dkms_mok("ubuntu2204") == ("/var/lib/shim-signed/mok/MOK.priv",
                                                  "/var/lib/shim-signed/mok/MOK.der")
    assert personality.dkms_mok("rocky9") == personality.dkms_mok("debian12") == ("/var/lib/dkms/mok.key",
                                                                                 "/var/lib/dkms/mok.pub")
    if os.path.isfile("/etc/dkms/framework.conf"):
        # the host's (Debian 12's dkms 3.x) framework.conf names dkms's own defaults, which Rocky's dkms 3.x shares
        with open("/etc/dkms/framework.conf") as handle:
            conf = handle.read()
        assert "mok_signing_key=/var/lib/dkms/mok.key" in conf and "mok_certificate=/var/lib/dkms/mok.pub" in conf


@pytest.mark.skipif(os.geteuid() != 0, reason="an overlay whiteout is a character device: needs root")
def test_an_ubuntu_disk_points_dkms_at_shim_signed_mok(tmp_path):
    upper = str(tmp_path / "upper")
    personality.write_identity(upper, "ubuntu2204")
    with open(os.path.join(upper, "etc/dkms/framework.conf")) as handle:
        conf = handle.read()
    assert "mok_signing_key=/var/lib/shim-signed/mok/MOK.priv\nmok_certificate=/var/lib/shim-signed/mok/MOK.der\n" in conf


def test_the_twins_kernel_release_becomes_an_rpm_version_and_release():
    from gpulab.nvidia import rpms
    assert rpms.kernel_rpm_version("6.18.44-fc-v1252") == ("6.18.44", "fc_v1252")
    assert rpms.kernel_rpm_version("6.1.0-57-amd64") == ("6.1.0", "57_amd64")


@pytest.mark.skipif(not shutil.which("rpmbuild"), reason="needs rpmbuild (Debian's rpm)")
def test_rockys_kernel_devel_puts_the_build_tree_at_usr_src_kernels_and_provides_the_name_the_role_asks(tmp_path):
    from gpulab.nvidia import rpms
    release = "6.1.0-57-amd64"
    built = rpms.build_kernel_devel_rpms(str(tmp_path), release, "/usr/src/linux-headers-6.1.0-57-amd64")
    assert [os.path.basename(path) for path in built] == ["kernel-devel-6.1.0-57_amd64.x86_64.rpm",
                                                          "kernel-headers-6.1.0-57_amd64.x86_64.rpm"]

    def query(*args):
        return subprocess.run(["rpm", "-qp"] + list(args) + [built[0]], capture_output=True, text=True,
                              check=True).stdout
    assert query("-l").split() == ["/usr/src/kernels/%s" % release]
    assert query("--dump").split()[-1] == "/usr/src/linux-headers-6.1.0-57-amd64"   # the link's target
    assert "kernel-devel-%s" % release in query("--provides").split()
    assert "ln -s /usr/src/kernels/%s /lib/modules/%s/build" % (release, release) in query("--scripts")
