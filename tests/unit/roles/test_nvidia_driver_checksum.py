# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The nvidia_driver role's request validation of the runfile checksum (tasks/validate.yml), rendered by
ansible-core's own templating with the role's defaults and vars: a checksum the runfile's mirror could change
(a URL on the runfile's own host) is refused unless trusted explicitly, and malformed checksums are refused
naming the variable."""

from __future__ import annotations

import os

import pytest
from ansible.parsing.dataloader import DataLoader

from ansible_collections.gpuops.nvidia.tests.unit.roles.test_role_rendering import (
    ROLES_DIR, _load_trusted, render, role_vars)

PINNED = "sha256:" + "2d8e1b0a7c6b4f5e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c"
MIRROR_RUNFILE = "https://mirror.example.com/nvidia/NVIDIA-Linux-x86_64-580.95.05.run"
SAME_HOST = "checksum is a URL on the runfile's own host"


def request_errors(**given):
    """The error list validate.yml's fail task would print for these role variables."""
    task = _load_trusted(DataLoader(), os.path.join(ROLES_DIR, "nvidia_driver", "tasks", "validate.yml"))[0]
    variables = dict(task["vars"], nvidia_driver_version="580.95.05", ansible_facts={"architecture": "x86_64"}, **given)
    templar = role_vars("nvidia_driver", "vars/main.yml", **variables)
    return render(templar, "{{ nvidia_driver_request_errors }}")


@pytest.mark.parametrize("given", [
    dict(nvidia_driver_runfile_checksum=PINNED),
    dict(nvidia_driver_runfile_checksum=PINNED, nvidia_driver_runfile_url=MIRROR_RUNFILE),
    dict(nvidia_driver_runfile_checksum="sha256:https://sums.example.org/nvidia/SHA256SUMS",
         nvidia_driver_runfile_url=MIRROR_RUNFILE),
    dict(nvidia_driver_runfile_checksum="sha256:https://mirror.example.com/nvidia/SHA256SUMS",
         nvidia_driver_runfile_url=MIRROR_RUNFILE, nvidia_driver_runfile_checksum_trust_mirror=True),
    # copied from the controller: the URL form is not what verifies it
    dict(nvidia_driver_runfile_checksum="sha256:https://mirror.example.com/nvidia/SHA256SUMS",
         nvidia_driver_runfile_url=MIRROR_RUNFILE, nvidia_driver_runfile_src="/srv/NVIDIA-Linux-x86_64-580.95.05.run"),
])
def test_checksums_the_mirror_cannot_change_are_accepted(given):
    assert request_errors(**given) == []


@pytest.mark.parametrize("checksum, runfile_url, host", [
    ("sha256:https://mirror.example.com/nvidia/SHA256SUMS", MIRROR_RUNFILE, "mirror.example.com"),
    ("sha256:http://mirror.example.com:8080/SHA256SUMS", MIRROR_RUNFILE, "mirror.example.com"),      # another port
    ("sha256:https://MIRROR.example.com/SHA256SUMS", MIRROR_RUNFILE, "mirror.example.com"),          # case
    ("sha256:http://127.0.0.1:8000/SHA256SUMS", "http://127.0.0.1:8000/NVIDIA-Linux-x86_64-580.95.05.run",
     "127.0.0.1"),
    # NVIDIA's default download URL and a sums file on the same download host
    ("sha256:https://us.download.nvidia.com/tesla/580.95.05/SHA256SUMS", "", "us.download.nvidia.com"),
    ("sha256:file:///mnt/mirror/SHA256SUMS", "file:///mnt/mirror/NVIDIA-Linux-x86_64-580.95.05.run", "a local file"),
])
def test_a_checksum_url_on_the_runfiles_own_host_is_refused_naming_the_risk(checksum, runfile_url, host):
    errors = request_errors(nvidia_driver_runfile_checksum=checksum, nvidia_driver_runfile_url=runfile_url)
    assert len(errors) == 1
    assert errors[0].startswith("nvidia_driver_runfile_checksum is a URL on the runfile's own host (%s): " % host)
    assert "can replace the runfile and its SHA256SUMS together" in errors[0]
    assert "nvidia_driver_runfile_checksum_trust_mirror: true" in errors[0]


@pytest.mark.parametrize("checksum", [
    "2d8e1b0a7c6b4f5e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c",          # no algorithm
    "md5:0123456789abcdef0123456789abcdef",
    "sha1:" + "a" * 40,
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "sha256:" + "g" * 64,
    "sha256: " + "a" * 64,
    "sha256:ftp://mirror.example.com/SHA256SUMS",
    "sha256:mirror.example.com/SHA256SUMS",
    "SHA256:" + "a" * 64,
])
def test_a_malformed_checksum_is_refused_naming_the_variable(checksum):
    errors = request_errors(nvidia_driver_runfile_checksum=checksum, nvidia_driver_runfile_url=MIRROR_RUNFILE)
    assert errors == ["nvidia_driver_runfile_checksum '%s' is neither sha256:<64 hex digits> nor sha256:<URL>"
                      % checksum]


def test_a_downloaded_runfile_without_a_checksum_is_refused():
    assert request_errors(nvidia_driver_runfile_url=MIRROR_RUNFILE) == [
        "nvidia_driver_runfile_checksum is required when the runfile is downloaded: sha256:<hex> or "
        "sha256:<URL of a SHA256SUMS file>"]
