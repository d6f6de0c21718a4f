# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real nvidia_driver_runfile main() against a fake host: the module's path constants point into
tmp_path, `modinfo` and `nvidia-smi` are scripts printing real fixture outputs, and the "runfile" is a script
that records its command line and creates what a runfile install leaves (libnvidia-ml.so.1 -> .so.<version>,
the module modinfo then reports). The refusals must leave the host as it was."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import nvidia_driver_runfile
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))
VERSION = "590.44.01"
MODINFO = os.path.join(FIXTURES, "kernel", "modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt")
PROCESSES_XML = os.path.join(FIXTURES, "nvidia_smi", "telegraf_dual_a5000-v13.xml")


class FakeHost:
    def __init__(self, tmp_path, monkeypatch):
        self.tmp = tmp_path
        self.lib = tmp_path / "usr/lib/x86_64-linux-gnu"
        self.bin = tmp_path / "bin"
        self.state = tmp_path / "var/lib/gpuops"
        self.installed_flag = tmp_path / "installed"
        self.argv_log = tmp_path / "runfile.argv"
        for directory in (self.lib, self.bin, tmp_path / "sys/bus/pci/devices/0000:81:00.0", tmp_path / "sys/module"):
            directory.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x2231"), ("class", "0x030200")):
            (tmp_path / "sys/bus/pci/devices/0000:81:00.0" / name).write_text(value + "\n")
        monkeypatch.setattr(nvidia_driver_runfile, "NVML_LIBRARY_DIRS", (str(self.lib),))
        monkeypatch.setattr(nvidia_driver_runfile, "SYSFS_PCI", str(tmp_path / "sys/bus/pci/devices"))
        monkeypatch.setattr(nvidia_driver_runfile, "SYSFS_NVIDIA_VERSION", str(tmp_path / "sys/module/nvidia/version"))
        monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % self.bin)
        self.script("modinfo", 'if [ -e "%s" ]; then cat "%s"; else echo "modinfo: ERROR: Module nvidia not found." >&2;'
                               ' exit 1; fi' % (self.installed_flag, MODINFO))
        self.runfile = tmp_path / ("NVIDIA-Linux-x86_64-%s.run" % VERSION)
        self.runfile.write_text('echo "$@" >> "%s"\ntouch "%s" "%s/libnvidia-ml.so.%s"\n'
                                'ln -sf libnvidia-ml.so.%s "%s/libnvidia-ml.so.1"\n'
                                % (self.argv_log, self.installed_flag, self.lib, VERSION, VERSION, self.lib))

    def script(self, name, body):
        path = self.bin / name
        path.write_text("#!/bin/sh\n%s\n" % body)
        path.chmod(0o755)

    def loaded(self, version, processes=False):
        (self.tmp / "sys/module/nvidia").mkdir(exist_ok=True)
        (self.tmp / "sys/module/nvidia/version").write_text(version + "\n")
        xml = PROCESSES_XML if processes else os.path.join(FIXTURES, "nvidia_smi", "telegraf_a100-sxm4-v12.xml")
        self.script("nvidia-smi", 'cat "%s"' % xml)

    def run(self, capsys, **args):
        args.setdefault("version", VERSION)
        args.setdefault("runfile", str(self.runfile))
        args.setdefault("state_dir", str(self.state))
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                nvidia_driver_runfile.main()
        return json.loads(capsys.readouterr().out)

    def runfile_calls(self):
        return self.argv_log.read_text().splitlines() if self.argv_log.exists() else []


@pytest.fixture
def host(tmp_path, monkeypatch):
    return FakeHost(tmp_path, monkeypatch)


def test_a_bare_node_gets_the_runbook_install_then_a_rerun_changes_nothing(host, capsys):
    digest = hashlib.sha256(host.runfile.read_bytes()).hexdigest()
    first = host.run(capsys, sha256=digest)
    assert first["changed"] and first["reboot_required"]
    assert host.runfile_calls() == ["--silent --dkms --no-drm --kernel-module-type=open"]
    assert first["installed"] == {"version": VERSION, "method": "runfile", "kernel_module_type": "open", "signer": None}
    record = json.loads((host.state / "nvidia_driver.json").read_text())
    assert record["version"] == VERSION and record["runfile_sha256"] == digest and record["previous"] is None
    second = host.run(capsys, sha256=digest)
    assert second["changed"] is False and second["installer_argv"] == [] and len(host.runfile_calls()) == 1


def test_a_checksum_mismatch_is_refused_before_anything(host, capsys):
    result = host.run(capsys, sha256="ab" * 32)
    assert result["failed"] and "checksum mismatch" in result["msg"] and "nothing was changed" in result["msg"]
    assert host.runfile_calls() == [] and not host.state.exists()


def test_processes_on_the_gpus_stop_an_in_place_change(host, capsys):
    host.loaded("580.95.05", processes=True)
    result = host.run(capsys)
    assert result["failed"] and "2 process(es) use the GPUs" in result["msg"] and "llama-server[100477]" in result["msg"]
    assert host.runfile_calls() == []
    allowed = host.run(capsys, allow_gpu_processes=True)
    assert allowed["changed"] and len(allowed["gpu_processes"]) == 2


def test_a_module_signed_by_another_key_is_reinstalled_signed(host, capsys):
    host.run(capsys)
    result = host.run(capsys, signing_key="/k/MOK.priv", signing_certificate="/k/MOK.der", signer="node key")
    assert result["failed"], "the fake runfile cannot sign: the module must say the node is still not at the request"
    assert "kernel module is signed by no key, not node key" in result["msg"]
    assert host.runfile_calls()[-1].endswith("--module-signing-secret-key=/k/MOK.priv "
                                             "--module-signing-public-key=/k/MOK.der")


def test_check_mode_reports_the_install_it_would_run(host, capsys):
    result = host.run(capsys, _ansible_check_mode=True)
    assert result["changed"] and result["installer_argv"][:3] == ["sh", str(host.runfile), "--silent"]
    assert host.runfile_calls() == [] and not host.state.exists()


def test_a_malformed_version_and_a_flavour_the_gpus_cannot_run_are_refused(host, capsys):
    assert "not a full NVIDIA driver version" in host.run(capsys, version="latest")["msg"]
    (host.tmp / "sys/bus/pci/devices/0000:81:00.0/device").write_text("0x1db1\n")   # a V100
    result = host.run(capsys, kernel_module_type="open")
    assert result["failed"] and "open kernel modules do not support this node's GPUs (volta)" in result["msg"]
    assert host.runfile_calls() == []
