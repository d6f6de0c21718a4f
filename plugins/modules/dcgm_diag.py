#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: dcgm_diag
short_description: Run NVIDIA DCGM diagnostics on a GPU node and report each test's result
version_added: 0.1.0
description:
  - Runs C(dcgmi diag -r <level> -j) on the host and reads its JSON report into one result per test (the worst
    status over the GPUs, the GPUs that failed, the warnings).
  - Fails naming each failing test and its GPUs, so a gate that uses it says why the node is not healthy.
  - Needs DCGM (C(dcgmi) and a running C(nv-hostengine)) on the host.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reports the command it would run and runs nothing (diagnostics load the GPUs for minutes).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  level:
    description: The diagnostic level (1 quick, 2 medium, 3 long, 4 extended).
    type: int
    default: 2
    choices: [1, 2, 3, 4]
  dcgmi:
    description: Path or name of the C(dcgmi) program.
    type: str
    default: dcgmi
  timeout:
    description: Seconds the diagnostic may run before it is stopped (level 3 takes about half an hour).
    type: int
    default: 3600
  fail_on_failure:
    description: Fail when a test failed; V(false) returns the results without failing.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Medium DCGM diagnostics must pass before the node goes back
  gpuops.nvidia.dcgm_diag:
    level: 2
  become: true

- name: Long diagnostics after a repair, results kept for the report
  gpuops.nvidia.dcgm_diag:
    level: 3
    fail_on_failure: false
  register: diag
"""

RETURN = r"""
command:
  description: The command run (or that would run in check mode).
  returned: always
  type: list
  elements: str
passed:
  description: Whether no test failed.
  returned: when the diagnostics ran
  type: bool
tests:
  description: One entry per test.
  returned: when the diagnostics ran
  type: list
  elements: dict
  contains:
    category:
      description: The test's category (for example C(Deployment), C(Hardware)).
      type: str
    name:
      description: The test's name.
      type: str
    status:
      description: The worst status over the GPUs (C(Fail), C(Warn), C(Pass), C(Skip)).
      type: str
    failed_gpus:
      description: The GPUs on which the test failed.
      type: list
      elements: str
    warnings:
      description: The test's warnings over all GPUs.
      type: list
      elements: str
    results:
      description: Per GPU, C(gpu), C(status) and C(warnings).
      type: list
      elements: dict
failed_tests:
  description: Names of the tests that failed.
  returned: when the diagnostics ran
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.dcgm import (
    DcgmReportError, diag_argv, failed_tests, failure_message, parse_diag_report)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type="int", default=2, choices=[1, 2, 3, 4]),
            dcgmi=dict(type="str", default="dcgmi"),
            timeout=dict(type="int", default=3600),
            fail_on_failure=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    runner = CommandRunner(module, params["timeout"])
    dcgmi = params["dcgmi"] if "/" in params["dcgmi"] else runner.find(params["dcgmi"], required=True)
    argv = diag_argv(dcgmi, params["level"])
    if module.check_mode:
        module.exit_json(changed=False, command=argv)
    result = runner.run(argv)
    if result.timed_out:
        module.fail_json(msg="dcgmi diag -r %d ran past %ds" % (params["level"], params["timeout"]), command=argv)
    try:
        tests = parse_diag_report(result.stdout)
    except DcgmReportError as error:
        # dcgmi exits non-zero on a failed test and still prints the report: only a missing report is an error
        module.fail_json(msg="dcgmi diag failed (rc %d): %s; %s" % (result.rc, result.first_error_line(), error),
                         command=argv, rc=result.rc)
    failed = failed_tests(tests)
    out = dict(changed=False, command=argv, passed=not failed, tests=tests,
               failed_tests=[test["name"] for test in failed])
    if failed and params["fail_on_failure"]:
        module.fail_json(msg=failure_message(tests), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
