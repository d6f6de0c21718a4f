# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""driver_upgrade_plan refuses bad inputs before it reads the cluster, each named by its option."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import driver_upgrade_plan
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args


def run_module(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            driver_upgrade_plan.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_bad_inputs_are_refused_by_option_before_the_cluster_is_read(capsys, monkeypatch):
    def no_cluster(_module):
        raise AssertionError("the cluster was read before the inputs were checked")

    monkeypatch.setattr(driver_upgrade_plan, "api_client_from_module", no_cluster)
    rc, result = run_module(capsys, driver_version="615.71.09", cluster_name="lab", nodes=["gpu-node-01"],
                            batches=[1, "２5%"], drain_timeout="２5", max_fail_percentage="５0",
                            wait_for_pods_selector="app=(x", pre_node_tasks=["drain.sh"])
    assert rc == 1 and result["failed"]
    assert [error["option"] for error in result["invalid"]] == [
        "batches", "max_fail_percentage", "wait_for_pods_selector", "pre_node_tasks", "drain_timeout"]
    assert result["errors"][0].startswith("batches: entries must be counts >= 1")
    assert result["msg"].startswith("refused before anything was touched: batches: ")
