# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The nvidia_driver role's per-OS package names and paths, rendered by Ansible's templar for each supported OS
(the twin's Debian nodes stand in for the others in the integration tests)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.tests.unit.roles.test_role_rendering import role_vars

ROLE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "nvidia_driver"))
VERSION = "580.95.05"


def first_found(facts):
    """The vars file the role's include_vars picks (distribution-major, distribution, os_family)."""
    for name in ("%s-%s.yml" % (facts["distribution"], facts["distribution_major_version"]),
                 "%s.yml" % facts["distribution"], "%s.yml" % facts["os_family"]):
        if os.path.exists(os.path.join(ROLE_DIR, "vars", name)):
            return "vars/" + name
    raise AssertionError("no vars file for %s" % facts)


def render(facts, **overrides):
    """Every nvidia_driver_* variable as the role sees it on a host with these facts."""
    templar = role_vars("nvidia_driver", first_found(facts), "vars/main.yml", ansible_facts=facts,
                        **dict({"nvidia_driver_version": VERSION, "nvidia_driver_runfile_dir": "/r"}, **overrides))
    return {name: templar.template(value) for name, value in templar.available_variables.items()
            if name.startswith("nvidia_driver_")}


UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_major_version": "22", "distribution_version": "22.04",
               "os_family": "Debian", "kernel": "5.15.0-126-generic", "architecture": "x86_64"}
UBUNTU_2404 = dict(UBUNTU_2204, distribution_major_version="24", distribution_version="24.04",
                   kernel="6.8.0-49-generic")
ROCKY_9 = {"distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.5",
           "os_family": "RedHat",
           "kernel": "5.14.0-503.14.1.el9_5.x86_64", "architecture": "x86_64"}
DEBIAN_12 = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.8",
             "os_family": "Debian",
             "kernel": "6.1.0-27-amd64", "architecture": "x86_64"}
UBUNTU_ARM = dict(UBUNTU_2404, architecture="aarch64")


@pytest.mark.parametrize("facts", [UBUNTU_2204, UBUNTU_2404])
def test_ubuntu_uses_canonicals_server_packages_of_the_branch(facts):
    rendered = render(facts)
    assert rendered["nvidia_driver_os_packages"]["open"] == [
        "nvidia-headless-580-server-open", "nvidia-utils-580-server", "libnvidia-compute-580-server"]
    assert rendered["nvidia_driver_os_packages"]["proprietary"][0] == "nvidia-headless-580-server"
    # Canonical's revision is 0ubuntu0.<release>.N
    assert rendered["nvidia_driver_os_package_version"] == "580.95.05-*"
    assert rendered["nvidia_driver_os_headers_package"] == "linux-headers-%s" % facts["kernel"]
    assert rendered["nvidia_driver_os_initramfs_command"][0] == "/usr/sbin/update-initramfs"
    assert rendered["nvidia_driver_os_package_lock"] == "dpkg"


@pytest.mark.parametrize("facts, repo_dir", [(UBUNTU_2204, "ubuntu2204"), (UBUNTU_2404, "ubuntu2404")])
def test_ubuntu_with_the_cuda_repository_uses_nvidias_names_of_the_branch(facts, repo_dir):
    rendered = render(facts, nvidia_driver_cuda_repo=True)
    assert rendered["nvidia_driver_os_packages"]["open"] == [
        "nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580", "libnvidia-compute-580",
        "nvidia-kernel-common-580"]
    assert rendered["nvidia_driver_os_packages"]["proprietary"][:2] == ["nvidia-driver-580", "nvidia-dkms-580"]
    # NVIDIA's releases there are <version>-0ubuntu1 (570) or -1ubuntu1 (580.159.04, 615.71.09): any revision
    assert rendered["nvidia_driver_os_package_version"] == "580.95.05-*"
    assert rendered["nvidia_driver_os_cuda_repo_dir"] == repo_dir
    assert rendered["nvidia_driver_os_cuda_repo_key"] == "3bf863cc.pub"
    assert rendered["nvidia_driver_cuda_repo_base_url"] == "https://developer.download.nvidia.com/compute/cuda/repos"


@pytest.mark.parametrize("facts", [UBUNTU_2204, UBUNTU_2404])
def test_ubuntu_with_the_cuda_repository_from_branch_590_uses_the_names_without_the_branch(facts):
    rendered = render(facts, nvidia_driver_cuda_repo=True, nvidia_driver_version="615.71.09")
    assert rendered["nvidia_driver_os_packages"]["open"] == [
        "nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils", "libnvidia-compute", "nvidia-kernel-common"]
    assert rendered["nvidia_driver_os_packages"]["proprietary"][:2] == ["nvidia-driver", "nvidia-dkms"]
    assert rendered["nvidia_driver_os_package_version"] == "615.71.09-*"
    assert render(facts, nvidia_driver_cuda_repo=True, nvidia_driver_version="590.44.01")[
        "nvidia_driver_os_packages"]["open"][0] == "nvidia-driver-open"


def test_rocky_9_picks_the_module_stream_of_the_branch_and_flavour():
    rendered = render(ROCKY_9, nvidia_driver_cuda_repo=True)
    assert rendered["nvidia_driver_os_module_streams"] == {"open": "580-open", "proprietary": "580-dkms"}
    assert rendered["nvidia_driver_os_cuda_repo_dir"] == "rhel9"
    assert rendered["nvidia_driver_os_cuda_repo_key"] == "D42D0685.pub"
    assert "nvidia-persistenced" in rendered["nvidia_driver_os_packages"]["open"]


def test_rocky_9_uses_the_cuda_repository_dkms_packages_and_dnf_versionlock():
    rendered = render(ROCKY_9)
    assert "kmod-nvidia-open-dkms" in rendered["nvidia_driver_os_packages"]["open"]
    assert "kmod-nvidia-latest-dkms" in rendered["nvidia_driver_os_packages"]["proprietary"]
    assert rendered["nvidia_driver_os_package_version"] == VERSION
    assert rendered["nvidia_driver_os_headers_package"] == "kernel-devel-5.14.0-503.14.1.el9_5.x86_64"
    assert rendered["nvidia_driver_os_build_packages"] == ["dkms", "gcc", "make"]
    assert rendered["nvidia_driver_os_initramfs_command"] == ["/usr/bin/dracut", "--force", "--regenerate-all"]
    assert rendered["nvidia_driver_os_package_lock"] == "dnf-versionlock"


def test_debian_12_matches_the_cuda_repository_layout_the_twin_serves():
    rendered = render(DEBIAN_12)
    assert rendered["nvidia_driver_os_packages"]["open"][:2] == ["nvidia-driver", "nvidia-kernel-open-dkms"]
    assert rendered["nvidia_driver_os_package_version"] == "580.95.05-*"


@pytest.mark.parametrize("facts, name", [
    (UBUNTU_2404, "NVIDIA-Linux-x86_64-580.95.05.run"), (UBUNTU_ARM, "NVIDIA-Linux-aarch64-580.95.05.run")])
def test_runfile_name_path_and_default_url(facts, name):
    rendered = render(facts)
    assert rendered["nvidia_driver_runfile_path"] == "/r/" + name
    assert rendered["nvidia_driver_default_url"] == "https://us.download.nvidia.com/tesla/580.95.05/" + name
