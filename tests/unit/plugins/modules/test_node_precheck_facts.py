# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real node_precheck_facts main() on a fake host: a tmp_path tree for /sys, /proc, /boot, /lib/modules
and the kubelet flag files (the path constants of host/precheck_facts.py point there) and scripts on PATH printing
what mokutil, containerd and openssl print. Gathering and judging are the real code."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import precheck_facts
from ansible_collections.gpuops.nvidia.plugins.modules import node_precheck_facts
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

HOST_FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "host"))
RELEASE = os.uname()[2]


def host_fixture(name):
    with open(os.path.join(HOST_FIXTURES, name)) as stream:
        return stream.read()


class FakeHost:
    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path / "host"
        self.bin = tmp_path / "bin"
        self.root.mkdir()
        self.bin.mkdir()
        monkeypatch.setenv("PATH", str(self.bin))
        for constant, relative in (("SYSFS_PCI", "sys/bus/pci/devices"), ("SYSFS_MODULE", "sys/module"),
                                   ("SYSFS_EFI", "sys/firmware/efi"), ("PROC_MODULES", "proc/modules"),
                                   ("PROC_SWAPS", "proc/swaps"), ("PROC_MEMINFO", "proc/meminfo"),
                                   ("BOOT_DIR", "boot"), ("LIB_MODULES", "lib/modules")):
            monkeypatch.setattr(precheck_facts, constant, str(self.root / relative))
        monkeypatch.setattr(precheck_facts, "KUBELET_FLAG_FILES",
                            (str(self.root / "var/lib/kubelet/kubeadm-flags.env"),))
        for directory in ("sys/bus/pci/devices", "sys/module", "boot", "proc"):
            (self.root / directory).mkdir(parents=True)
        self.write("proc/swaps", host_fixture("proc-swaps_none_debian12.txt"))
        self.write("proc/meminfo", host_fixture("proc-meminfo_debian12-vm.txt"))
        self.write("proc/modules", "")

    def write(self, relative, text):
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def gpu(self, address, device_id, driver):
        device_dir = self.root / "sys/bus/pci/devices" / address
        device_dir.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", device_id), ("class", "0x030200")):
            (device_dir / name).write_text(value + "\n")
        driver_dir = self.root / "sys/bus/pci/drivers" / driver
        driver_dir.mkdir(parents=True, exist_ok=True)
        os.symlink(str(driver_dir), str(device_dir / "driver"))

    def headers(self, release):
        self.write("lib/modules/%s/build/Makefile" % release, "")

    def tool(self, name, cases):
        """A script printing a prepared text per argument string."""
        lines = ["#!/bin/sh", 'case "$*" in']
        for args, (text, rc) in cases.items():
            lines.append("  %s) printf '%%s' '%s'; exit %d ;;" % (args, text.replace("'", "'\\''"), rc))
        lines += ["  *) exit 0 ;;", "esac"]
        script = self.bin / name
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)

    def run(self, capsys, **args):
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                node_precheck_facts.main()
        return json.loads(capsys.readouterr().out)


@pytest.fixture
def host(tmp_path, monkeypatch):
    return FakeHost(tmp_path, monkeypatch)


def fresh_secure_boot_h100_node(host):
    """Two H100 still on nouveau, Secure Boot on, no MOK yet, containerd 1.7, kubelet with a custom root dir."""
    for bus in ("18", "2a"):
        host.gpu("0000:%s:00.0" % bus, "0x2330", "nouveau")
    (host.root / "sys/module/nouveau").mkdir()
    host.headers(RELEASE)
    host.write("var/lib/kubelet/kubeadm-flags.env", 'KUBELET_KUBEADM_ARGS="--root-dir=%s"\n'
               % (host.root / "data/kubelet"))
    (host.root / "data/kubelet/device-plugins").mkdir(parents=True)
    host.tool("mokutil", {"--sb-state": ("SecureBoot enabled\n", 0)})
    host.tool("containerd", {"--version": ("containerd containerd.io 1.7.20 8fc6bcff51318944179630522a095cc9dbf9f353\n",
                                           0)})
    host.tool("openssl", {})


def test_a_fresh_secure_boot_node_is_fit_and_the_report_says_what_comes_next(host, capsys, tmp_path):
    fresh_secure_boot_h100_node(host)
    result = host.run(capsys, driver_version="580.95.05", cuda_version="13.0", mok_certificate=str(tmp_path / "no.der"),
                      mok_private_key=str(tmp_path / "no.priv"), min_free_mib={str(tmp_path): 1})
    report = result["ansible_facts"]["gpu_node_precheck"]
    assert result["changed"] is False
    assert report["verdict"]["ok"] is True, report["verdict"]
    assert [device["generation"] for device in report["pci_devices"]] == ["hopper", "hopper"]
    assert report["nouveau_loaded"] is True
    assert report["secure_boot"] == {"enabled": True, "efi": True}
    assert report["mok"]["key_present"] is False and report["mok"]["tools"] == {"openssl": True, "mokutil": True}
    assert report["kubelet"]["device_plugin_dir"] == str(host.root / "data/kubelet/device-plugins")
    assert report["containerd"] == {"present": True, "version": "1.7.20"}
    assert report["swap"] == [] and report["hugepages"]["size_kib"] == 2048
    assert report["verdict"]["kernel_module_type"] == "open" and report["verdict"]["container_runtime_path"] == "cdi"
    assert [note["code"] for note in report["verdict"]["notes"]] == ["nouveau_loaded", "mok_to_stage"]
    assert report["failure_message"] == ""


def test_every_problem_of_a_broken_node_is_reported_at_once(host, capsys, tmp_path):
    fresh_secure_boot_h100_node(host)
    (host.root / "lib/modules" / RELEASE / "build/Makefile").unlink()
    host.write("boot/vmlinuz-99.0.0-1-amd64", "")
    host.write("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/swap.img  file\t4194300\t0\t-2\n")
    (host.bin / "openssl").unlink()
    result = host.run(capsys, driver_version="580.95.05", mok_certificate=str(tmp_path / "no.der"),
                      mok_private_key=str(tmp_path / "no.priv"), min_free_mib={str(tmp_path): 10 ** 9},
                      hugepages_total=512, gpu_operator=True)
    verdict = result["ansible_facts"]["gpu_node_precheck"]["verdict"]
    assert [finding["code"] for finding in verdict["unmet"]] == [
        "secure_boot_tools_missing", "kernel_headers_missing", "kernel_headers_missing_next_boot",
        "containerd_too_old_for_gpu_operator", "disk_free_low", "swap_on", "hugepages_mismatch"]
    message = result["ansible_facts"]["gpu_node_precheck"]["failure_message"]
    assert "does not meet 7 requirement(s)" in message and "Kernel 99.0.0-1-amd64 is installed" in message


def test_threshold_paths_must_be_absolute_with_whole_mib(host, capsys):
    with patch_module_args({"min_free_mib": {"var": 10}}):
        with pytest.raises(SystemExit):
            node_precheck_facts.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and "min_free_mib maps absolute paths to MiB" in result["msg"]
