"""The stub driver as NVIDIA's CUDA repository for RHEL 9 lays it out: epoch-3 `<version>-1.el9` rpms grouped by
modular metadata into the `nvidia-driver` module's `<branch>-open` / `<branch>-dkms` streams; the real dnf (in a
private install root) lists the streams and, once a stream is enabled, offers only that stream's kernel module."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import rocky_driver_rpms  # noqa: E402

OLD, NEW = "570.124.06", "570.133.20"

pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("rpmbuild", "createrepo_c", "modifyrepo_c",
                                                                         "dnf")),
                                reason="needs rpmbuild, createrepo_c, modifyrepo_c and dnf")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("rocky-driver")
    built = rocky_driver_rpms.build_repo(str(base / "repo"), [OLD, NEW])
    repos_dir = base / "root/etc/yum.repos.d"
    repos_dir.mkdir(parents=True)
    (repos_dir / "cuda-rhel9.repo").write_text(
        "[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=file://%s\nenabled=1\ngpgcheck=0\n" % built["dir"])

    def dnf(*args):
        argv = ["dnf", "-q", "-y", "--disableplugin=local", "--installroot=%s" % (base / "root"), "--releasever=9",
                "--setopt=reposdir=%s" % repos_dir, "--setopt=module_platform_id=platform:el9",
                "--setopt=cachedir=%s" % (base / "cache"), "--nogpgcheck"] + list(args)
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return {"built": built, "dnf": dnf}


def test_rpms_are_named_and_versioned_as_nvidias(repo):
    names = sorted(os.path.basename(path) for path in repo["built"]["rpms"])
    assert "kmod-nvidia-open-dkms-%s-1.el9.x86_64.rpm" % NEW in names
    assert "kmod-nvidia-latest-dkms-%s-1.el9.x86_64.rpm" % OLD in names
    assert len(names) == 14
    query = subprocess.run(["rpm", "-qp", "--qf", "%{EPOCH}:%{VERSION}-%{RELEASE} [%{REQUIRES} ]",
                            os.path.join(repo["built"]["dir"], "nvidia-driver-%s-1.el9.x86_64.rpm" % NEW)],
                           capture_output=True, text=True, check=True).stdout
    assert query.startswith("3:%s-1.el9" % NEW) and "nvidia-kmod-common" in query


def test_dnf_lists_the_module_streams(repo):
    listing = repo["dnf"]("module", "list", "nvidia-driver")
    assert listing.returncode == 0, listing.stderr
    streams = {line.split()[1] for line in listing.stdout.splitlines() if line.startswith("nvidia-driver ")}
    assert streams == {"570-open", "570-dkms"}


def test_an_enabled_stream_offers_only_its_kernel_module(repo):
    for stream, offered, hidden in (("570-dkms", "kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"),
                                    ("570-open", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms")):
        assert repo["dnf"]("module", "reset", "nvidia-driver").returncode == 0
        enable = repo["dnf"]("module", "enable", "nvidia-driver:%s" % stream)
        assert enable.returncode == 0, enable.stderr
        query = repo["dnf"]("repoquery", "--qf", "%{name}-%{epoch}:%{version}-%{release}", offered, hidden)
        assert query.returncode == 0, query.stderr
        assert query.stdout.split() == ["%s-3:%s-1.el9" % (offered, OLD), "%s-3:%s-1.el9" % (offered, NEW)]
