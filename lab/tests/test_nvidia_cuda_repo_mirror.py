"""The twin's package mirror, given driver versions, also serves NVIDIA's CUDA repositories for Ubuntu 22.04 and
RHEL 9 at NVIDIA's paths, signed by the mirror's key; without them it serves what it served before."""
from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.request

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import nvrepos  # noqa: E402

VERSION = "570.133.20"


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    served = nvrepos.PackageMirror(str(tmp_path_factory.mktemp("nvidia-repos")), driver_versions=(VERSION,)).start()
    yield served
    served.stop()


def test_the_ubuntu_cuda_repository_is_served_signed(mirror):
    repo = mirror.cuda_repos()["ubuntu2204"]
    assert repo["url"] == mirror.url + "/compute/cuda/repos/ubuntu2204/x86_64/"
    assert repo["key_url"].endswith("/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub")
    assert b"-----BEGIN PGP SIGNED MESSAGE-----" in fetch(repo["url"] + "InRelease")
    assert b"BEGIN PGP PUBLIC KEY BLOCK" in fetch(repo["key_url"])
    assert b"Package: nvidia-driver-570-open\n" in fetch(repo["url"] + "Packages")
    deb = "nvidia-dkms-570-open_%s-0ubuntu1_amd64.deb" % VERSION
    assert fetch(repo["url"] + deb)[:8] == b"!<arch>\n"


@pytest.mark.skipif(not shutil.which("modifyrepo_c"), reason="needs the rpm tools")
def test_the_rhel9_cuda_repository_is_served_signed_with_its_module_streams(mirror):
    repo = mirror.cuda_repos()["rhel9"]
    assert repo["url"] == mirror.url + "/compute/cuda/repos/rhel9/x86_64/"
    repomd = fetch(repo["url"] + "repodata/repomd.xml")
    assert b'<data type="modules">' in repomd
    assert b"BEGIN PGP SIGNATURE" in fetch(repo["url"] + "repodata/repomd.xml.asc")
    assert b"BEGIN PGP PUBLIC KEY BLOCK" in fetch(repo["key_url"])


def test_without_driver_versions_there_is_no_cuda_tree(tmp_path):
    served = nvrepos.PackageMirror(str(tmp_path / "nvidia-repos")).start()
    try:
        assert served.cuda_repos() == {}
        with pytest.raises(urllib.error.HTTPError):
            fetch(served.url + "/compute/cuda/repos/ubuntu2204/x86_64/InRelease")
    finally:
        served.stop()
