# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real dcgm_diag main() with a stand-in dcgmi on PATH (a shell script that records its arguments and
prints a fixture report, exiting as dcgmi does: non-zero when a test failed). Running and parsing are the real code.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import dcgm_diag
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "dcgm"))


@pytest.fixture
def dcgmi(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argfile = tmp_path / "args"

    def install(fixture, rc=0):
        script = bindir / "dcgmi"
        script.write_text("#!/bin/sh\necho \"$@\" >> %s\ncat %s\nexit %d\n" % (
            argfile, os.path.join(FIXTURES, fixture), rc))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return argfile

    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "")))
    return install


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dcgm_diag.main()
    return json.loads(capsys.readouterr().out)


def test_passing_diagnostics_return_every_test(dcgmi, capsys):
    args = dcgmi("diag-r2_dcgm3_pass_CONSTRUCTED.txt")
    result = run(capsys, level=2)
    assert not result.get("failed")
    assert result["passed"] is True and result["changed"] is False
    assert len(result["tests"]) == 5
    assert args.read_text().split() == ["diag", "-r", "2", "-j"]


def test_failing_test_fails_the_module_naming_it(dcgmi, capsys):
    dcgmi("diag-r3_dcgm3_memory-fail_CONSTRUCTED.txt", rc=226)
    result = run(capsys, level=3)
    assert result["failed"] is True
    assert result["failed_tests"] == ["GPU Memory"]
    assert "GPU Memory failed on GPU 1" in result["msg"]


def test_failing_test_is_returned_without_failing_when_asked(dcgmi, capsys):
    dcgmi("diag-r3_dcgm3_memory-fail_CONSTRUCTED.txt", rc=226)
    result = run(capsys, level=3, fail_on_failure=False)
    assert not result.get("failed")
    assert result["passed"] is False and result["failed_tests"] == ["GPU Memory"]


def test_check_mode_runs_nothing(dcgmi, capsys):
    args = dcgmi("diag-r2_dcgm3_pass_CONSTRUCTED.txt")
    result = run(capsys, level=1, _ansible_check_mode=True)
    assert result["command"][1:] == ["diag", "-r", "1", "-j"]
    assert "tests" not in result
    assert not args.exists()


def test_no_report_fails_with_dcgmi_error(dcgmi, capsys):
    dcgmi("PROVENANCE.md", rc=1)
    result = run(capsys, level=2)
    assert result["failed"] is True
    assert "dcgmi diag failed (rc 1)" in result["msg"]
