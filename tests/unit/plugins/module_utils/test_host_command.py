# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The host wing's CommandRunner on real processes (echo, env, sleep, sh) through a real AnsibleModule."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

pytestmark = pytest.mark.skipif(not shutil.which("timeout"), reason="coreutils timeout not installed")


@pytest.fixture
def module():
    with patch_module_args({}):
        yield AnsibleModule(argument_spec={})


@pytest.fixture
def path_without_timeout(tmp_path, monkeypatch):
    """PATH of a directory holding only sh and sleep: get_bin_path finds no timeout(1) there nor in the sbin dirs."""
    for program in ("sh", "sleep"):
        os.symlink(shutil.which(program), str(tmp_path / program))
    monkeypatch.setenv("PATH", str(tmp_path))


def test_a_command_gives_its_rc_and_output(module):
    result = CommandRunner(module, 10).run(["echo", "hello", "world"])
    assert (result.rc, result.stdout, result.stderr) == (0, "hello world\n", "")
    assert result.ok is True and result.timed_out is False
    assert result.argv == ["echo", "hello", "world"] and result.name == "echo"


def test_a_failing_command_is_not_ok_and_keeps_its_stderr(module):
    result = CommandRunner(module, 10).run(["sh", "-c", "echo out; echo 'first\nsecond' >&2; exit 3"])
    assert (result.rc, result.ok, result.timed_out) == (3, False, False)
    assert result.stdout == "out\n" and result.first_error_line() == "first"


def test_the_c_locale_is_forced_whatever_the_host_locale(module, monkeypatch):
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    environment = CommandRunner(module, 10).run(["env"]).stdout.splitlines()
    assert "LC_ALL=C" in environment and "LANG=C" in environment


def test_a_command_past_its_time_limit_is_stopped_and_marked_timed_out(module):
    started = time.monotonic()
    result = CommandRunner(module, 1).run(["sleep", "30"])
    assert time.monotonic() - started < 10
    assert (result.rc, result.timed_out, result.ok, result.timeout) == (124, True, False, 1)
    assert result.argv == ["sleep", "30"]  # as asked, without the timeout(1) wrapper


def test_a_call_may_give_its_own_time_limit(module):
    runner = CommandRunner(module, 1)
    assert runner.run(["sleep", "2"], timeout=20).timed_out is False
    assert runner.run(["sleep", "30"], timeout=1).timed_out is True


def test_without_timeout_installed_commands_run_unbounded_and_never_count_as_timed_out(module, path_without_timeout):
    runner = CommandRunner(module, 1)
    assert runner.find("timeout") is None
    assert runner.run(["sleep", "2"]).rc == 0
    exit_124 = runner.run(["sh", "-c", "exit 124"])
    assert (exit_124.rc, exit_124.timed_out) == (124, False)


def test_data_goes_to_stdin_and_cwd_is_honoured(module, tmp_path):
    runner = CommandRunner(module, 10)
    assert runner.run(["cat"], data="from stdin").stdout == "from stdin\n"  # run_command ends data with a newline
    assert runner.run(["pwd"], cwd=str(tmp_path)).stdout.strip() == os.path.realpath(str(tmp_path))


def test_a_shell_string_is_refused(module):
    with pytest.raises(TypeError):
        CommandRunner(module, 10).run("echo hello")


def test_find_gives_the_path_or_none(module):
    runner = CommandRunner(module, 10)
    assert os.path.basename(runner.find("sh")) == "sh"
    assert runner.find("gpuops-no-such-program") is None


def test_run_or_fail_fails_the_module_naming_what_failed(module, capsys):
    runner = CommandRunner(module, 10)
    assert runner.run_or_fail(["echo", "fine"], what="echo").stdout == "fine\n"
    with pytest.raises(SystemExit):
        runner.run_or_fail(["sh", "-c", "echo boom >&2; exit 3"], what="making the key")
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and result["msg"] == "making the key failed (rc 3): boom"
