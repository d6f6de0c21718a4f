"""The stub driver as NVIDIA's CUDA repository for Ubuntu 22.04 lays it out: the branch in the names and the
`-0ubuntu1` versions up to 580, names without the branch and `-1ubuntu1` from 590, exact dependencies inside a
release, so apt pins a whole release by its full version."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, LAB_DIR)

from gpulab.nvidia import nvrepos, ubuntu_driver_debs  # noqa: E402

OLD, NEW = "570.124.06", "570.133.20"


def dpkg_field(deb: str, field: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", deb, field], capture_output=True, text=True, check=True)\
        .stdout.strip()


def contents(deb: str) -> list:
    listing = subprocess.run(["dpkg-deb", "--contents", deb], capture_output=True, text=True, check=True).stdout
    return [line.split()[5].lstrip(".") for line in listing.splitlines()]


def test_names_and_versions_are_nvidias(tmp_path):
    repo = ubuntu_driver_debs.build_repo(str(tmp_path / "apt"), [OLD, NEW])
    with open(os.path.join(repo["dir"], "Packages")) as handle:
        index = handle.read()
    names = sorted({line.split(": ")[1] for line in index.splitlines() if line.startswith("Package: ")})
    assert names == ["libnvidia-compute-570", "nvidia-dkms-570", "nvidia-dkms-570-open", "nvidia-driver-570",
                     "nvidia-driver-570-open", "nvidia-kernel-common-570", "nvidia-utils-570"]
    assert index.count("Version: %s-0ubuntu1\n" % OLD) == 7 and index.count("Version: %s-0ubuntu1\n" % NEW) == 7
    assert os.path.basename(repo["debs"][0]).endswith("_%s-0ubuntu1_amd64.deb" % OLD)
    assert ubuntu_driver_debs.package_names(NEW)["open"][:2] == ["nvidia-driver-570-open", "nvidia-dkms-570-open"]


def test_from_branch_590_the_names_lose_the_branch(tmp_path):
    version = "615.71.09"
    paths = {os.path.basename(p).split("_")[0]: p for p in ubuntu_driver_debs.build_packages(str(tmp_path), version)}
    assert sorted(paths) == ["libnvidia-compute", "nvidia-dkms", "nvidia-dkms-open", "nvidia-driver",
                             "nvidia-driver-open", "nvidia-kernel-common", "nvidia-utils"]
    assert ubuntu_driver_debs.package_names(version)["open"] == [
        "nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils", "libnvidia-compute", "nvidia-kernel-common"]
    assert dpkg_field(paths["nvidia-driver-open"], "Version") == "615.71.09-1ubuntu1"
    assert "nvidia-dkms-open (= 615.71.09-1ubuntu1)" in dpkg_field(paths["nvidia-driver-open"], "Depends")


def test_the_metapackage_pins_every_part_of_its_release(tmp_path):
    paths = {os.path.basename(p).split("_")[0]: p for p in ubuntu_driver_debs.build_packages(str(tmp_path), NEW)}
    depends = dpkg_field(paths["nvidia-driver-570-open"], "Depends")
    exact = "(= %s-0ubuntu1)" % NEW
    for part in ("nvidia-dkms-570-open", "nvidia-utils-570", "libnvidia-compute-570", "nvidia-kernel-common-570"):
        assert "%s %s" % (part, exact) in depends
    assert "nvidia-dkms-570 " not in depends
    assert dpkg_field(paths["nvidia-utils-570"], "Depends") == "libnvidia-compute-570 " + exact


def test_the_payloads_are_the_stub_driver_and_dkms_builds_it(tmp_path):
    paths = {os.path.basename(p).split("_")[0]: p for p in ubuntu_driver_debs.build_packages(str(tmp_path), NEW)}
    assert "/usr/bin/nvidia-smi" in contents(paths["nvidia-utils-570"])
    assert "/usr/src/nvidia-%s/dkms.conf" % NEW in contents(paths["nvidia-dkms-570-open"])
    assert any(path.startswith("/lib/firmware/nvidia/%s/" % NEW) for path in contents(paths["nvidia-kernel-common-570"]))
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", paths["nvidia-dkms-570-open"]], capture_output=True,
                             check=True).stdout
    assert b"postinst" in control
    assert "dkms" in dpkg_field(paths["nvidia-dkms-570-open"], "Depends")


DKMS_STATUS = ("Package: dkms\nStatus: install ok installed\nPriority: optional\nSection: kernel\n"
               "Maintainer: gpulab <gpulab@localhost>\nArchitecture: all\nVersion: 2.8.7-2ubuntu2\nDescription: stub\n\n")


def apt_simulate(tmp_path, *names, source: str = "") -> tuple:
    """The real apt resolver (`apt-get -s install`) on a private state whose only source is the repository and
    where only dkms is installed (a fresh one each call); returns (rc, {package: version to install})."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="apt-root-", dir=str(tmp_path)))
    for sub in ("state/lists/partial", "cache/archives/partial", "etc"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "state/status").write_text(DKMS_STATUS)
    (root / "etc/sources.list").write_text((source or "deb [trusted=yes] file:%s ./" % (tmp_path / "apt")) + "\n")
    options = []
    for key, value in (("Dir::State", root / "state"), ("Dir::State::status", root / "state/status"),
                       ("Dir::Cache", root / "cache"), ("Dir::Etc::SourceList", root / "etc/sources.list"),
                       ("Dir::Etc::SourceParts", root / "none"), ("Debug::NoLocking", "1"),
                       ("APT::Architecture", "amd64")):
        options += ["-o", "%s=%s" % (key, value)]
    update = subprocess.run(["apt-get"] + options + ["-q", "update"], capture_output=True, text=True)
    if update.returncode != 0 or "W: GPG error" in update.stderr or "is not signed" in update.stderr:
        return update.returncode or 100, {"update": update.stdout + update.stderr}
    run = subprocess.run(["apt-get"] + options + ["-s", "install"] + list(names), capture_output=True, text=True)
    plan = {line.split()[1]: line.split()[2].lstrip("(") for line in run.stdout.splitlines()
            if line.startswith("Inst ")}
    return run.returncode, plan


def test_apt_installs_a_whole_release_pinned_by_its_full_version(tmp_path):
    ubuntu_driver_debs.build_repo(str(tmp_path / "apt"), [OLD, NEW])
    names = ubuntu_driver_debs.package_names(OLD)["open"]
    rc, plan = apt_simulate(tmp_path, *["%s=%s-0ubuntu1" % (name, OLD) for name in names])
    assert rc == 0 and plan == {name: "%s-0ubuntu1" % OLD for name in names}, plan
    # unpinned, apt takes the newest release, whole
    rc, plan = apt_simulate(tmp_path, "nvidia-driver-570-open")
    assert rc == 0 and set(plan.values()) == {"%s-0ubuntu1" % NEW} and len(plan) == 5
    # the metapackage alone pinned to the older release cannot mix it with the newer parts
    rc, plan = apt_simulate(tmp_path, "nvidia-driver-570-open=%s-0ubuntu1" % OLD)
    assert rc != 0 and not plan


def test_the_mirror_tree_is_nvidias_and_apt_checks_its_signature(tmp_path):
    key = nvrepos.SigningKey()
    try:
        repo = ubuntu_driver_debs.build_cuda_repo(str(tmp_path / "mirror"), key, [NEW])
    finally:
        key.close()
    assert repo["dir"] == str(tmp_path / "mirror/compute/cuda/repos/ubuntu2204/x86_64")
    assert {"Packages", "Release", "InRelease", "Release.gpg", "3bf863cc.pub"} <= set(os.listdir(repo["dir"]))
    keyring = tmp_path / "cuda-archive-keyring.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(keyring), repo["key"]], check=True)
    names = ubuntu_driver_debs.package_names(NEW)["open"]
    pinned = ["%s=%s-0ubuntu1" % (name, NEW) for name in names]
    rc, plan = apt_simulate(tmp_path, *pinned, source="deb [signed-by=%s] file:%s /" % (keyring, repo["dir"]))
    assert rc == 0 and plan == {name: "%s-0ubuntu1" % NEW for name in names}
    # another key: apt refuses the repository
    other = nvrepos.SigningKey()
    try:
        other.export(str(tmp_path / "other.asc"))
    finally:
        other.close()
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(tmp_path / "other.gpg"),
                    str(tmp_path / "other.asc")], check=True)
    rc, plan = apt_simulate(tmp_path, *pinned, source="deb [signed-by=%s] file:%s /" % (tmp_path / "other.gpg",
                                                                                           repo["dir"]))
    assert rc != 0 and ("NO_PUBKEY" in plan["update"] or "is not signed" in plan["update"]), plan
