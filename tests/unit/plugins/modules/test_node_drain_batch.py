# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""node_drain's batch mode (names:): cordon and uncordon of N nodes in one process, with the cordon bookkeeping of
one node, and a node whose step fails failing alone."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import drain as _drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node
from ansible_collections.gpuops.nvidia.plugins.modules import node_drain
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

pytest.importorskip("kubernetes")


def merge(target, patch):
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


class Nodes:
    """Nodes behind read_node/patch_node applying JSON merge patches; ``broken`` nodes refuse every patch."""

    def __init__(self, names, broken=(), unschedulable=()):
        self.nodes = dict((name, {"metadata": {"name": name, "annotations": {}},
                                  "spec": {"unschedulable": True} if name in unschedulable else {}})
                          for name in names)
        self.broken, self.lock, self.patches = set(broken), threading.Lock(), 0

    def read_node(self, name):
        with self.lock:
            if name not in self.nodes:
                raise RuntimeError("nodes %s not found" % name)
            return json.loads(json.dumps(self.nodes[name]))

    def patch_node(self, name, body):
        if name in self.broken:
            raise RuntimeError("admission webhook denied the request")
        with self.lock:
            merge(self.nodes[name], body)
            self.patches += 1
            return json.loads(json.dumps(self.nodes[name]))


class Module:
    def __init__(self, **params):
        self.check_mode = False
        self.params = dict(dict(state="cordon", force=False, dry_run=False, reason=None, upgrade_record=None), **params)


def run(module, store, names):
    return run_per_node(names, lambda name: node_drain.batch_step(module, store, name))


def test_a_batch_is_cordoned_then_uncordoned_and_a_failing_node_fails_alone():
    names = ["gpu-node-%02d" % index for index in range(1, 9)]
    store = Nodes(names, broken=["gpu-node-05"])
    cordoned = run(Module(state="cordon"), store, names)
    assert [name for name in names if cordoned[name]["failed"]] == ["gpu-node-05"]
    assert "patch node gpu-node-05" in cordoned["gpu-node-05"]["msg"]
    assert all(_drain.is_unschedulable(store.nodes[name]) for name in names if name != "gpu-node-05")
    assert not _drain.is_unschedulable(store.nodes["gpu-node-05"])
    again = run(Module(state="cordon"), store, [name for name in names if name != "gpu-node-05"])
    assert not any(outcome["changed"] for outcome in again.values())
    uncordoned = run(Module(state="uncordon"), store, [name for name in names if name != "gpu-node-05"])
    assert all(outcome["uncordoned"] and not outcome["unschedulable"] for outcome in uncordoned.values())
    assert not any(_drain.is_unschedulable(store.nodes[name]) for name in names)


def test_uncordon_leaves_a_node_cordoned_by_someone_else_and_says_why():
    store = Nodes(["gpu-node-01", "gpu-node-02"], unschedulable=["gpu-node-02"])
    run(Module(state="cordon"), store, ["gpu-node-01", "gpu-node-02"])
    outcome = run(Module(state="uncordon"), store, ["gpu-node-01", "gpu-node-02", "gpu-node-09"])
    assert outcome["gpu-node-01"]["uncordoned"] and not outcome["gpu-node-02"]["uncordoned"]
    assert outcome["gpu-node-02"]["unschedulable"] and outcome["gpu-node-02"]["warning"]
    assert outcome["gpu-node-09"]["failed"] and "read node gpu-node-09" in outcome["gpu-node-09"]["msg"]


def test_uncordon_moves_each_node_s_record_to_done_and_a_node_left_cordoned_keeps_its_record():
    store = Nodes(["gpu-node-01", "gpu-node-02"], unschedulable=["gpu-node-02"])
    run(Module(state="cordon"), store, ["gpu-node-01"])
    done = {"state": None, "state_after": "done", "from_version": None, "to_version": "615.71.09", "run_id": None}
    outcome = run(Module(state="uncordon", upgrade_record=done), store, ["gpu-node-01", "gpu-node-02"])
    assert outcome["gpu-node-01"]["uncordoned"] and outcome["gpu-node-01"]["upgrade_record"]["state"] == "done"
    annotations = store.nodes["gpu-node-01"]["metadata"]["annotations"]
    assert json.loads(annotations["gpuops.nvidia/driver-upgrade"])["to"] == "615.71.09"
    # the record moves once the step succeeded: a node someone else cordoned is not uncordoned but the step succeeds
    assert not outcome["gpu-node-02"]["failed"] and outcome["gpu-node-02"]["unschedulable"]


def test_dry_run_patches_nothing():
    store = Nodes(["gpu-node-01"])
    outcome = run(Module(state="cordon", dry_run=True), store, ["gpu-node-01"])
    assert outcome["gpu-node-01"]["changed"] and store.patches == 0


@pytest.mark.parametrize("args, message", [
    ({"names": ["gpu-node-01"], "state": "drain", "timeout": 0}, "timeout must be a positive number"),
    ({"names": ["gpu-node-01", "Bad_Name"], "state": "cordon"}, "names must be a DNS subdomain"),
    ({"names": ["gpu-node-01"], "name": "gpu-node-02", "state": "cordon"}, "mutually exclusive"),
])
def test_a_batch_the_module_cannot_do_is_refused_before_any_request(listener, capsys, monkeypatch, args, message):
    isolate_warnings(monkeypatch)
    module_args = dict(host="http://127.0.0.1:%d" % listener.getsockname()[1], api_key="t0ken", **args)
    with patch_module_args(module_args):
        with pytest.raises(SystemExit):
            node_drain.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and message in result["msg"]
    with pytest.raises(socket.timeout):
        listener.accept()   # nothing was sent
