# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""DCGM diagnostics (dcgmi diag -r N -j): the argument list, and the JSON report read into per-test results.

DCGM 3 writes an object under C(DCGM GPU Diagnostic) holding C(test_categories), each with a C(category) and
C(tests); DCGM 4 puts C(tests) at the top level. A test has a C(name) and C(results), one per GPU (C(gpu_ids) in
DCGM 3, C(entity_id) in DCGM 4), each with a C(status) (PASS, FAIL, WARN, SKIPPED in any case) and C(warnings)
(strings, or objects with C(warning)/C(message)).
Pure code, no I/O.
"""

from __future__ import annotations

import json

DIAG_LEVELS = (1, 2, 3, 4)
REPORT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
STATUS_NAMES = {"pass": "Pass", "fail": "Fail", "failed": "Fail", "error": "Fail", "warn": "Warn",
                "warning": "Warn", "skip": "Skip", "skipped": "Skip", "not run": "Skip"}


class DcgmReportError(ValueError):
    """The output is not a dcgmi diag JSON report."""


def diag_argv(dcgmi, level):
    """The argument list for one diagnostic run at level (1 quick .. 4 extended), JSON output."""
    if int(level) not in DIAG_LEVELS:
        raise ValueError("dcgmi diag level must be one of %s, not %r" % (", ".join(map(str, DIAG_LEVELS)), level))
    return [dcgmi, "diag", "-r", str(int(level)), "-j"]


def _json_text(text):
    """The JSON object in text (dcgmi may print a line before it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DcgmReportError("no JSON object in the dcgmi output")
    try:
        return json.loads(text[start:end + 1])
    except ValueError as error:
        raise DcgmReportError("the dcgmi output is not valid JSON: %s" % error)


def _warnings(entry):
    out = []
    for warning in entry.get("warnings") or []:
        if isinstance(warning, dict):
            warning = warning.get("warning") or warning.get("message") or ""
        if str(warning).strip():
            out.append(str(warning).strip())
    return out


def _gpu(entry):
    for key in ("gpu_id", "gpu_ids", "entity_id"):
        if key in entry:
            return str(entry[key])
    return ""


def parse_diag_report(text):
    """Per-test results of a dcgmi diag JSON report.

    Returns a list of dicts: category, name, status (the worst over the GPUs: Fail > Warn > Pass > Skip),
    failed_gpus (list of str), warnings (list of str), and results (per GPU: gpu, status, warnings).
    """
    data = _json_text(text)
    report = None
    for key in REPORT_KEYS:
        if isinstance(data.get(key), dict):
            report = data[key]
            break
    if report is None and isinstance(data.get("tests"), list):
        report = dict(test_categories=[dict(category="", tests=data["tests"])])
    if report is None or not isinstance(report.get("test_categories"), list):
        raise DcgmReportError("no test_categories in the dcgmi report (keys: %s)" % ", ".join(sorted(data)))
    rank = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
    tests = []
    for category in report["test_categories"]:
        for test in category.get("tests") or []:
            results = []
            for entry in test.get("results") or []:
                status = STATUS_NAMES.get(str(entry.get("status", "")).strip().lower(), "Unknown")
                results.append(dict(gpu=_gpu(entry), status=status, warnings=_warnings(entry)))
            worst = max((r["status"] for r in results), key=lambda s: rank.get(s.lower(), 1), default="Skip")
            tests.append(dict(
                category=str(test.get("category") or category.get("category", "")),
                name=str(test.get("name", "")),
                status=worst,
                failed_gpus=[r["gpu"] for r in results if r["status"] == "Fail"],
                warnings=[w for r in results for w in r["warnings"]],
                results=results,
            ))
    return tests


def failed_tests(tests):
    """The tests of parse_diag_report that failed."""
    return [test for test in tests if test["status"] == "Fail"]


def failure_message(tests, node=""):
    """One line naming each failing test, its GPUs and its first warning; empty when none failed."""
    parts = []
    for test in failed_tests(tests):
        part = "%s failed on GPU %s" % (test["name"], ",".join(test["failed_gpus"]) or "?")
        if test["warnings"]:
            part += " (%s)" % test["warnings"][0]
        parts.append(part)
    if not parts:
        return ""
    return "DCGM diagnostics%s: %s" % (" on %s" % node if node else "", "; ".join(parts))
