"""The fake runfile's option table (the real installer's options, unknown ones refused) and the lab's loopback
HTTP mirror of its runfiles with a SHA256SUMS, whose URLs `up` writes into the inventory."""
from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import start_lab, stop_lab
from gpulab.nvidia import installer

VERSION = "615.71.09"


@pytest.mark.parametrize("argv, expected", [
    (["--silent", "--dkms", "--no-dkms"], {"dkms": False}),
    (["--dkms"], {"dkms": True}),
    (["-M", "proprietary"], {"flavor": "proprietary"}),
    (["-M=open"], {"flavor": "open"}),
    (["--kernel-module-type", "proprietary"], {"flavor": "proprietary"}),
    (["-K"], {"userspace": False, "kernel_modules": True}),
    (["--kernel-module-only"], {"userspace": False}),
    (["--no-kernel-modules"], {"kernel_modules": False}),
    (["-k", "6.8.0-49-generic"], {"kernel_name": "6.8.0-49-generic"}),
    (["--no-nouveau-check"], {"no_nouveau_check": True}),
    (["-z"], {"no_nouveau_check": True}),
    (["--rebuild-initramfs", "--skip-module-load", "--module-signing-hash", "sha256",
      "--module-signing-x509-hash=sha256", "--allow-installation-with-running-driver"], {"dkms": False}),
])
def test_the_runfile_accepts_the_real_installers_options(argv, expected):
    opts = installer.parse_args(argv, VERSION)
    assert {key: getattr(opts, key) for key in expected} == expected


@pytest.mark.parametrize("argv, message", [
    (["--no-such-option"], "Unrecognized option: '--no-such-option'"),
    (["-M", "closed"], "Invalid kernel module type 'closed'"),
    (["--module-signing-secret-key=/k"], "Both --module-signing-secret-key and --module-signing-public-key"),
])
def test_the_runfile_refuses_what_the_real_installer_refuses(argv, message):
    with pytest.raises(installer.InstallerError, match=message.replace("(", "\\(")):
        installer.parse_args(argv, VERSION)


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("mirror") / "state")
    lab = start_lab(state_dir, "--nodes", "1", "--boot-delay", "0.3")
    yield lab
    stop_lab(lab)


def fetch(url: str) -> tuple:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_up_serves_the_runfiles_with_their_sha256sums(mirrored):
    url = mirrored.info["runfile_mirror"]
    assert url.startswith("http://127.0.0.1:")
    status, sums = fetch(url + "/SHA256SUMS")
    assert status == 200
    runfiles_dir = os.path.join(mirrored.state_dir, "runfiles")
    for line in sums.decode().splitlines():
        digest, name = line.split("  ")
        with open(os.path.join(runfiles_dir, name), "rb") as stream:
            assert hashlib.sha256(stream.read()).hexdigest() == digest
    status, body = fetch("%s/NVIDIA-Linux-x86_64-%s.run" % (url, VERSION))
    assert status == 200 and body.startswith(b"#!/bin/sh")
    assert fetch(url + "/NVIDIA-Linux-x86_64-999.99.99.run")[0] == 404


def test_the_inventory_points_the_driver_role_at_the_mirror(mirrored):
    with open(os.path.join(mirrored.state_dir, "inventory.yml")) as stream:
        variables = yaml.safe_load(stream)["all"]["vars"]
    url = mirrored.info["runfile_mirror"]
    assert variables["nvidia_driver_runfile_url"] == url + "/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run"
    assert variables["nvidia_driver_runfile_checksum"] == "sha256:%s/SHA256SUMS" % url


def test_a_node_reaches_the_mirror_over_loopback(mirrored):
    url = mirrored.info["runfile_mirror"] + "/SHA256SUMS"
    done = mirrored.ssh("gpu-node-01", "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"%s\").read()"
                                       ".decode())'" % url)
    assert "NVIDIA-Linux-x86_64-%s.run" % VERSION in done.stdout
