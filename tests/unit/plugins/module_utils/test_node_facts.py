# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""nvidia/node_facts.py, the gathering behind nvidia_driver_facts, with a real CommandRunner and fake tools on PATH
(shell scripts). The module-level tests (tests/unit/plugins/modules/test_nvidia_driver_facts.py) run it whole on
a fake host tree; these pin the pieces the module does not show one by one."""

from __future__ import annotations

import shutil

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import node_facts
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    if shutil.which("timeout", path="/usr/bin:/bin"):
        (directory / "timeout").symlink_to(shutil.which("timeout", path="/usr/bin:/bin"))
    return directory


@pytest.fixture
def sources(bin_dir):
    with patch_module_args({}):
        yield node_facts.Sources(CommandRunner(AnsibleModule(argument_spec={}), 1))


def script(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n%s\n" % body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.skipif(not shutil.which("timeout", path="/usr/bin:/bin"), reason="coreutils timeout not installed")
def test_a_tool_that_hangs_is_noted_unavailable_on_its_layer(sources, bin_dir):
    dmesg = script(bin_dir, "dmesg", "exec /bin/sleep 30")
    modinfo = script(bin_dir, "modinfo", "exec /bin/sleep 30")
    assert sources.run([dmesg]).timed_out and sources.run([modinfo]).timed_out
    assert sources.unavailable == [{"source": "dmesg", "layer": 2, "reason": "timed out after 1 seconds"},
                                   {"source": "modinfo", "layer": 1, "reason": "timed out after 1 seconds"}]


def test_a_missing_tool_is_noted_only_when_its_absence_matters(sources):
    # names no host has: get_bin_path also searches the sbin directories, where dkms and lsmod live
    assert sources.run_tool("gpuops-absent-dkms", ["status"], 1, None) is None
    assert sources.run_tool("gpuops-absent-lsmod", [], 1, "lsmod not found") is None
    assert sources.unavailable == [{"source": "gpuops-absent-lsmod", "layer": 1, "reason": "lsmod not found"}]


def test_a_failing_mok_list_is_unknown_not_empty(sources, bin_dir):
    mokutil = script(bin_dir, "mokutil", "echo 'Failed to read MokListRT' >&2; exit 255")
    assert node_facts.mok_keys(sources, mokutil, "--list-enrolled") == []
    assert sources.unavailable == [{"source": "mokutil", "layer": 1, "reason": "mokutil --list-enrolled failed "
                                    "(rc 255: Failed to read MokListRT): MOK keys unknown"}]


def test_the_kernel_log_is_the_first_command_that_works(sources, bin_dir):
    script(bin_dir, "dmesg", 'if [ "$1" = "--time-format=iso" ]; then exit 1; fi; echo plain dmesg')
    script(bin_dir, "journalctl", "echo journal")
    assert node_facts.read_kernel_log(sources, since_boot=True) == "plain dmesg\n"
    assert node_facts.read_kernel_log(sources, since_boot=False) == "journal\n"


def test_the_journal_is_read_first_only_for_all_boots():
    assert node_facts.kernel_log_commands(True)[0] == ["dmesg", "--time-format=iso"]
    assert node_facts.kernel_log_commands(True)[-1][-1] == "-b"
    assert node_facts.kernel_log_commands(False)[0] == ["journalctl", "-k", "--no-pager", "-o", "short-iso"]


def test_build_tools_missing_names_each_tool_and_one_compiler(tmp_path, monkeypatch):
    monkeypatch.setattr(node_facts, "C_LIBRARY_HEADER", str(tmp_path / "stdio.h"))
    assert node_facts.missing_build_tools(lambda name: None) == ["dkms", "make", "gcc", "C library headers"]
    (tmp_path / "stdio.h").write_text("")
    assert node_facts.missing_build_tools(lambda name: "/usr/bin/" + name if name != "gcc" else None) == []


def test_nothing_gathered_is_the_empty_contract_undiagnosed(sources, bin_dir):
    facts = node_facts.gather_facts(sources.runner, set())
    assert facts == node_facts.empty_facts()
    assert facts["diagnosis"] == []


def test_an_nvidia_smi_option_that_is_not_executable_is_not_found(sources, tmp_path):
    facts = node_facts.empty_facts()
    node_facts.gather_nvml(sources, facts, str(tmp_path / "nvidia-smi"))
    assert facts["userspace"]["error_kind"] == "not_found"
    assert facts["userspace"]["error"] == "nvidia-smi not found or not executable (%s)" % (tmp_path / "nvidia-smi")
