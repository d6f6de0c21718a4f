# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""node_drain refuses a name that cannot be a node's before any request: an empty one addressed the node list
(GET /api/v1/nodes/), crashed on it and, in a dry run, reported "changed"."""

from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import node_drain
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

pytest.importorskip("kubernetes")


@pytest.mark.parametrize("name", ["", " ", "GPU-Node-01", "gpu_node_01", "gpu-node-01/", "../nodes", "-gpu",
                                  "gpu-", "gpu node", "a" * 254])
@pytest.mark.parametrize("extra", [{}, {"dry_run": True}, {"state": "cordon", "_ansible_check_mode": True}])
def test_a_name_that_cannot_be_a_node_is_refused_naming_the_option(listener, capsys, monkeypatch, name, extra):
    isolate_warnings(monkeypatch)
    args = dict(host="http://127.0.0.1:%d" % listener.getsockname()[1], api_key="t0ken", name=name, request_timeout=1,
                **extra)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_drain.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and not result.get("changed")
    assert result["msg"].startswith("name must ")
    with pytest.raises(socket.timeout):
        listener.accept()   # nothing was sent
