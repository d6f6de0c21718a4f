# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the dcgmi diag JSON reader (tests/unit/fixtures/dcgm, constructed from DCGM's documented layout)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.dcgm import (
    DcgmReportError, diag_argv, failed_tests, failure_message, parse_diag_report)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "dcgm")


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def by_name(tests):
    return {test["name"]: test for test in tests}


def test_argv_runs_the_level_with_json_output():
    assert diag_argv("/usr/bin/dcgmi", 3) == ["/usr/bin/dcgmi", "diag", "-r", "3", "-j"]


@pytest.mark.parametrize("level", [0, 5, "x"])
def test_argv_refuses_unknown_levels(level):
    with pytest.raises(ValueError):
        diag_argv("dcgmi", level)


def test_passing_report_has_every_test_passed_after_the_leading_line():
    tests = parse_diag_report(read_fixture("diag-r2_dcgm3_pass_CONSTRUCTED.txt"))
    assert [t["name"] for t in tests] == ["Denylist", "NVML Library", "Persistence Mode", "PCIe", "GPU Memory"]
    assert {t["status"] for t in tests} == {"Pass"}
    assert by_name(tests)["PCIe"]["category"] == "Integration"
    assert [r["gpu"] for r in by_name(tests)["GPU Memory"]["results"]] == ["0", "1"]
    assert failed_tests(tests) == []
    assert failure_message(tests, "gpu-node-01") == ""


def test_failing_report_names_the_test_gpu_and_warning():
    tests = by_name(parse_diag_report(read_fixture("diag-r3_dcgm3_memory-fail_CONSTRUCTED.txt")))
    memory = tests["GPU Memory"]
    assert memory["status"] == "Fail"
    assert memory["failed_gpus"] == ["1"]
    assert memory["warnings"] == ["Detected 1 double bit ECC error(s) on GPU 1."]
    assert tests["Targeted Power"]["status"] == "Skip"
    assert tests["Diagnostic"]["status"] == "Warn"  # a warning is not a failure
    assert [t["name"] for t in failed_tests(list(tests.values()))] == ["GPU Memory"]
    message = failure_message(list(tests.values()), "gpu-node-01")
    assert message == ("DCGM diagnostics on gpu-node-01: GPU Memory failed on GPU 1 "
                       "(Detected 1 double bit ECC error(s) on GPU 1.)")


def test_dcgm4_layout_with_top_level_tests_and_lowercase_statuses():
    tests = by_name(parse_diag_report(read_fixture("diag-r2_dcgm4_pcie-fail_CONSTRUCTED.json")))
    assert tests["software"]["status"] == "Pass"
    assert tests["pcie"]["status"] == "Fail"
    assert tests["pcie"]["category"] == "Integration"
    assert tests["pcie"]["failed_gpus"] == ["0"]
    assert "pcie failed on GPU 0 (PCIe link width is x8" in failure_message(list(tests.values()))


@pytest.mark.parametrize("text", [
    "", "Error: unable to establish a connection to the specified host: localhost\n", "{not json}",
    '{"version": "3.3.9"}',
])
def test_no_report_is_an_error(text):
    with pytest.raises(DcgmReportError):
        parse_diag_report(text)


def test_truncated_report_is_an_error():
    text = read_fixture("diag-r2_dcgm3_pass_CONSTRUCTED.txt")
    with pytest.raises(DcgmReportError):
        parse_diag_report(text[:len(text) // 2])
