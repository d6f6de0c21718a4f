"""The local apt repository of the stub driver is a real one: dpkg-deb reads the packages, the index lists them
with the dependencies of NVIDIA's Debian packaging, and the dkms package registers the module with dkms."""
from __future__ import annotations

import os
import subprocess
import sys

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import debs  # noqa: E402

VERSION = "570.124.06"


def dpkg_field(deb: str, field: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", deb, field], capture_output=True, text=True, check=True)\
        .stdout.strip()


def contents(deb: str) -> list:
    listing = subprocess.run(["dpkg-deb", "--contents", deb], capture_output=True, text=True, check=True).stdout
    return [line.split()[5].lstrip(".") for line in listing.splitlines()]


def test_repository_index_lists_every_package_of_the_driver_version(tmp_path):
    repo = debs.build_repo(str(tmp_path / "apt"), [VERSION])
    with open(os.path.join(repo["dir"], "Packages")) as handle:
        index = handle.read()
    names = [line.split(": ")[1] for line in index.splitlines() if line.startswith("Package: ")]
    assert sorted(names) == ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "nvidia-driver",
                             "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", "nvidia-smi"]
    assert index.count("Version: %s-1" % VERSION) == 7
    assert os.path.exists(os.path.join(repo["dir"], "Release"))
    assert repo["source_line"] == "deb [trusted=yes] file:/opt/gpulab/cache/apt ./"


def test_metapackage_pins_every_part_to_the_same_version(tmp_path):
    paths = {os.path.basename(p).split("_")[0]: p for p in debs.build_packages(str(tmp_path), VERSION)}
    depends = dpkg_field(paths["nvidia-driver"], "Depends")
    for part in ("nvidia-kernel-dkms-any", "nvidia-smi", "libcuda1", "firmware-nvidia-gsp"):
        assert "%s (= %s-1)" % (part, VERSION) in depends
    assert dpkg_field(paths["nvidia-kernel-open-dkms"], "Provides") == "nvidia-kernel-dkms-any (= %s-1)" % VERSION
    assert dpkg_field(paths["nvidia-smi"], "Depends") == "libnvidia-ml1 (= %s-1)" % VERSION


def test_dkms_packages_ship_module_sources_the_nouveau_blacklist_and_register_with_dkms(tmp_path):
    paths = {os.path.basename(p).split("_")[0]: p for p in debs.build_packages(str(tmp_path), VERSION)}
    files = contents(paths["nvidia-kernel-open-dkms"])
    assert "/usr/src/nvidia-%s/dkms.conf" % VERSION in files and "/usr/src/nvidia-%s/nvidia.c" % VERSION in files
    assert "/etc/modprobe.d/nvidia-blacklists-nouveau.conf" in files
    extracted = tmp_path / "control"
    subprocess.run(["dpkg-deb", "--control", paths["nvidia-kernel-open-dkms"], str(extracted)], check=True)
    postinst = (extracted / "postinst").read_text()
    assert "dkms install -m nvidia -v %s" % VERSION in postinst
    source = subprocess.run(["dpkg-deb", "--fsys-tarfile", paths["nvidia-kernel-open-dkms"]], capture_output=True,
                            check=True).stdout
    assert b'MODULE_LICENSE("Dual MIT/GPL")' in source
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % VERSION in contents(paths["libnvidia-ml1"])
    assert "/usr/bin/nvidia-smi" in contents(paths["nvidia-smi"])
