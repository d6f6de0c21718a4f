# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""host/precheck_facts.py, the reading behind node_precheck_facts, on real files and fake tools (shell scripts on
PATH) through a real CommandRunner. The module-level tests (tests/unit/plugins/modules/test_node_precheck_facts.py)
run it whole on a fake host tree."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host import precheck_facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


@pytest.fixture
def runner(bin_dir):
    with patch_module_args({}):
        yield CommandRunner(AnsibleModule(argument_spec={}), 10)


def script(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n%s\n" % body)
    path.chmod(0o755)


def test_containerd_version_comes_from_its_version_output(runner, bin_dir):
    assert precheck_facts.gather_containerd(runner) == {"present": False, "version": None}
    script(bin_dir, "containerd", "echo 'containerd github.com/containerd/containerd v2.0.0 207ad711e'")
    assert precheck_facts.gather_containerd(runner) == {"present": True, "version": "2.0.0"}
    script(bin_dir, "containerd", "exit 1")
    assert precheck_facts.gather_containerd(runner) == {"present": True, "version": None}


def test_the_kubelet_root_dir_option_wins_over_the_flag_files(tmp_path, monkeypatch):
    flags = tmp_path / "kubeadm-flags.env"
    flags.write_text('KUBELET_KUBEADM_ARGS="--root-dir=%s"\n' % (tmp_path / "data"))
    monkeypatch.setattr(precheck_facts, "KUBELET_FLAG_FILES", (str(tmp_path / "absent"), str(flags)))
    (tmp_path / "data" / "device-plugins").mkdir(parents=True)
    assert precheck_facts.gather_kubelet(None) == {
        "root_dir": str(tmp_path / "data"), "device_plugin_dir": str(tmp_path / "data" / "device-plugins"),
        "device_plugin_dir_present": True}
    assert precheck_facts.gather_kubelet(str(tmp_path / "other"))["device_plugin_dir_present"] is False
    flags.unlink()
    assert precheck_facts.gather_kubelet(None)["root_dir"] == "/var/lib/kubelet"


def test_a_path_not_created_yet_is_measured_on_its_nearest_existing_parent(tmp_path):
    wanted = str(tmp_path / "not" / "yet")
    disk = precheck_facts.gather_disks({wanted: 1})[0]
    stats = os.statvfs(str(tmp_path))
    assert disk["path"] == wanted and disk["min_free_mib"] == 1
    assert disk["mount"] == precheck_facts.mount_point(str(tmp_path)) and os.path.ismount(disk["mount"])
    assert abs(disk["free_mib"] - stats.f_bavail * stats.f_frsize // precheck_facts.MIB) < 64


def test_the_staged_key_is_found_by_the_certificate_fingerprint(runner, bin_dir, tmp_path):
    certificate = tmp_path / "MOK.der"
    certificate.write_bytes(b"not really DER, only hashed")
    fingerprint = hashlib.sha1(certificate.read_bytes()).hexdigest()
    script(bin_dir, "mokutil", 'case "$1" in --test-key) echo "$2 is not enrolled" ;; --list-new) '
                               'echo "[key 1]"; echo "SHA1 Fingerprint: %s" ;; esac' % ":".join(
                                   fingerprint[i:i + 2] for i in range(0, 40, 2)))
    mok = precheck_facts.gather_mok(runner, str(bin_dir / "mokutil"), {"efi": True}, str(certificate),
                                    str(tmp_path / "MOK.priv"))
    assert (mok["enrolled"], mok["pending"], mok["key_present"]) == (False, True, False)
    assert mok["tools"] == {"openssl": False, "mokutil": True}
    assert precheck_facts.certificate_sha1(str(tmp_path / "absent.der")) is None


def test_a_bare_host_gets_a_verdict_that_follows_the_requirement_options(tmp_path, monkeypatch, runner):
    for constant in ("SYSFS_PCI", "SYSFS_MODULE", "SYSFS_EFI", "PROC_MODULES", "PROC_SWAPS", "PROC_MEMINFO",
                     "BOOT_DIR", "LIB_MODULES"):
        monkeypatch.setattr(precheck_facts, constant, str(tmp_path / "host" / constant.lower()))
    monkeypatch.setattr(precheck_facts, "KUBELET_FLAG_FILES", ())
    options = {"mok_certificate": str(tmp_path / "MOK.der"), "mok_private_key": str(tmp_path / "MOK.priv"),
               "kubelet_root_dir": str(tmp_path / "kubelet"), "min_free_mib": {str(tmp_path): 1},
               "driver_version": None, "cuda_version": None, "kernel_module_type": "auto", "secure_boot_sign": "auto",
               "allow_key_creation": True, "allow_key_enrollment": True, "require_kubelet": True,
               "require_containerd": True, "container_runtime_path": "auto", "gpu_operator": False, "swap_off": True,
               "hugepages_total": None}
    facts = precheck_facts.gather_facts(runner, options)
    assert [finding["code"] for finding in facts["verdict"]["unmet"]] == [
        "no_nvidia_gpu", "kernel_headers_missing", "containerd_missing", "kubelet_device_plugin_dir_missing"]
    assert "does not meet 4 requirement(s)" in facts["failure_message"]
    relaxed = precheck_facts.gather_facts(runner, dict(options, require_containerd=False, require_kubelet=False))
    assert [finding["code"] for finding in relaxed["verdict"]["unmet"]] == ["no_nvidia_gpu", "kernel_headers_missing"]
