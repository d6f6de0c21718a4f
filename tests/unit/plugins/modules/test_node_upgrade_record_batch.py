# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""node_upgrade_record's batch mode (records:): each record's fields, the top-level options filling the gaps, and
the options it cannot be combined with refused before any request."""

from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import node_upgrade_record
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

pytest.importorskip("kubernetes")


def test_a_record_takes_what_it_leaves_out_from_the_top_level_options():
    defaults = {"from_version": "595.91.07", "to_version": "615.71.09", "run_id": "r1", "boot_id_before": None,
                "cordoned_by_us": None, "reason": "top", "mig_layout": None, "rollback_to": None}
    fields = node_upgrade_record.record_fields({"name": "gpu-node-01", "state": "failed", "reason": "own",
                                                "cordoned_by_us": False}, defaults)
    assert fields == {"state": "failed", "from": "595.91.07", "to": "615.71.09", "run_id": "r1",
                      "boot_id_before": None, "cordoned_by_us": False, "reason": "own", "mig_layout": None,
                      "rollback_to": None}


def test_a_record_without_a_target_version_is_refused_unless_it_removes_the_record():
    defaults = dict((option, None) for _field, option in node_upgrade_record.FIELDS)
    with pytest.raises(ValueError, match="node gpu-node-01: to_version is required for state draining"):
        node_upgrade_record.record_fields({"name": "gpu-node-01", "state": "draining"}, defaults)
    assert node_upgrade_record.record_fields({"name": "gpu-node-01", "state": "absent"}, defaults)["state"] == "absent"


@pytest.mark.parametrize("args, message", [
    ({"name": "gpu-node-01", "state": "draining", "to_version": "1.2",
      "records": [{"name": "gpu-node-02", "state": "draining"}]}, "mutually exclusive"),
    ({"to_version": "1.2"}, "one of the following is required"),
    ({"name": "gpu-node-01"}, "state"),
])
def test_name_and_records_are_one_or_the_other(listener, capsys, monkeypatch, args, message):
    isolate_warnings(monkeypatch)
    module_args = dict(host="http://127.0.0.1:%d" % listener.getsockname()[1], api_key="t0ken", **args)
    with patch_module_args(module_args):
        with pytest.raises(SystemExit):
            node_upgrade_record.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and message in result["msg"]
    with pytest.raises(socket.timeout):
        listener.accept()   # nothing was sent
