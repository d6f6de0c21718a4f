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

from gpulab.nvidia import nvrepos, rocky_driver_rpms  # noqa: E402

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

    return {"built": built, "dnf": dnf_in(base, repos_dir)}


def dnf_in(base, repos_dir, gpgcheck: bool = False):
    def dnf(*args):
        argv = ["dnf", "-q", "-y", "--disableplugin=local", "--installroot=%s" % (base / "root"), "--releasever=9",
                "--setopt=reposdir=%s" % repos_dir, "--setopt=module_platform_id=platform:el9",
                "--setopt=cachedir=%s" % (base / "cache")] + ([] if gpgcheck else ["--nogpgcheck"]) + list(args)
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return dnf


def test_rpms_are_named_and_versioned_as_nvidias(repo):
    names = sorted(os.path.basename(path) for path in repo["built"]["rpms"])
    assert "kmod-nvidia-open-dkms-%s-1.el9.x86_64.rpm" % NEW in names
    assert "kmod-nvidia-latest-dkms-%s-1.el9.x86_64.rpm" % OLD in names
    assert len(names) == 16
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


def test_the_signed_mirror_tree_is_nvidias_and_dnf_checks_it(tmp_path):
    key = nvrepos.SigningKey()
    try:
        built = rocky_driver_rpms.build_cuda_repo(str(tmp_path / "mirror"), key, [NEW])
    finally:
        key.close()
    assert built["dir"] == str(tmp_path / "mirror/compute/cuda/repos/rhel9/x86_64")
    assert os.path.exists(built["key"]) and built["key"].endswith("/D42D0685.pub")
    assert os.path.exists(os.path.join(built["dir"], "repodata/repomd.xml.asc"))
    repos_dir = tmp_path / "root/etc/yum.repos.d"
    repos_dir.mkdir(parents=True)
    (repos_dir / "cuda-rhel9.repo").write_text(
        "[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=file://%s\nenabled=1\ngpgcheck=1\n"
        "repo_gpgcheck=1\ngpgkey=file://%s\n" % (built["dir"], built["key"]))
    dnf = dnf_in(tmp_path, repos_dir, gpgcheck=True)
    listing = dnf("module", "list", "nvidia-driver")
    assert listing.returncode == 0, listing.stderr
    assert {line.split()[1] for line in listing.stdout.splitlines() if line.startswith("nvidia-driver ")} == {
        "570-open", "570-dkms"}
    checked = subprocess.run(["rpm", "-K", "--nosignature"] + built["rpms"][:1], capture_output=True, text=True)
    assert checked.returncode == 0
    header = subprocess.run(["rpm", "-qp", "--qf", "%{RSAHEADER:pgpsig}%{DSAHEADER:pgpsig}", built["rpms"][0]],
                            capture_output=True, text=True, check=True).stdout
    assert "Key ID" in header
    # another key: dnf refuses the repository's metadata
    other = nvrepos.SigningKey()
    try:
        other.export(str(tmp_path / "other.pub"))
    finally:
        other.close()
    (repos_dir / "cuda-rhel9.repo").write_text(
        "[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=file://%s\nenabled=1\ngpgcheck=1\n"
        "repo_gpgcheck=1\ngpgkey=file://%s\n" % (built["dir"], tmp_path / "other.pub"))
    refused = dnf_in(tmp_path, repos_dir, gpgcheck=True)("--setopt=cachedir=%s" % (tmp_path / "cache2"), "module",
                                                         "list", "nvidia-driver")
    assert refused.returncode != 0 and "nvidia-driver " not in refused.stdout
