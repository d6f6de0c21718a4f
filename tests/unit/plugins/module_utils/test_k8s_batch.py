# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for a Kubernetes step run for a batch of nodes in one process: per-node results, a failure stays local."""

from __future__ import annotations

import json
import threading

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node, summarize, unique_names
from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout.record import (
    RecordWriteError, current_record, write_record)


class Nodes:
    """Nodes behind read_node/patch_node (merge patches of annotations); a node listed in ``broken`` answers every
    patch with an error, as an API server refusing the write would."""

    def __init__(self, names, broken=()):
        self.nodes = dict((name, {"metadata": {"name": name, "annotations": {}, "resourceVersion": "1"}})
                          for name in names)
        self.broken = set(broken)
        self.lock = threading.Lock()
        self.patches = 0

    def read_node(self, name):
        with self.lock:
            return json.loads(json.dumps(self.nodes[name]))

    def patch_node(self, name, body):
        if name in self.broken:
            raise RuntimeError("admission webhook denied the request")
        with self.lock:
            node = self.nodes[name]
            for key, value in body["metadata"]["annotations"].items():
                if value is None:
                    node["metadata"]["annotations"].pop(key, None)
                else:
                    node["metadata"]["annotations"][key] = value
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            self.patches += 1
            return json.loads(json.dumps(node))


def write_step(store, fields):
    def step(name):
        try:
            written = write_record(store, name, fields)
        except RecordWriteError as failure:
            raise ValueError("%s: %s" % (failure.action, failure.error))
        return {"changed": written["changed"], "record": written["record"]}
    return step


def test_every_node_of_the_batch_gets_its_record_in_one_call():
    names = ["gpu-node-%02d" % index for index in range(1, 9)]
    store = Nodes(names)
    per_node = run_per_node(names, write_step(store, {"state": "draining", "to": "615.71.09", "run_id": "r1"}))
    assert list(per_node) == names and store.patches == 8
    assert all(result["changed"] and not result["failed"] for result in per_node.values())
    assert all(current_record(store.nodes[name])["state"] == "draining" for name in names)
    assert summarize(per_node) == {"changed": True, "failed_nodes": [], "ok_nodes": names}


def test_a_node_whose_write_fails_fails_alone():
    names = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    store = Nodes(names, broken=["gpu-node-02"])
    per_node = run_per_node(names, write_step(store, {"state": "draining", "to": "615.71.09"}))
    assert per_node["gpu-node-02"]["failed"] and not per_node["gpu-node-02"]["changed"]
    assert per_node["gpu-node-02"]["msg"] == "annotate node gpu-node-02: admission webhook denied the request"
    assert current_record(store.nodes["gpu-node-02"]) is None
    assert current_record(store.nodes["gpu-node-01"])["state"] == "draining"
    assert current_record(store.nodes["gpu-node-03"])["state"] == "draining"
    summary = summarize(per_node)
    assert summary["failed_nodes"] == ["gpu-node-02"] and summary["ok_nodes"] == ["gpu-node-01", "gpu-node-03"]


def test_an_unchanged_batch_reports_unchanged_and_a_node_listed_twice_runs_once():
    store = Nodes(["gpu-node-01", "gpu-node-02"])
    step = write_step(store, {"state": "draining", "to": "615.71.09"})
    run_per_node(["gpu-node-01", "gpu-node-02"], step)
    again = run_per_node(["gpu-node-01", "gpu-node-02", "gpu-node-01"], step)
    assert list(again) == ["gpu-node-01", "gpu-node-02"] and store.patches == 2
    assert summarize(again)["changed"] is False


def test_the_steps_run_concurrently_up_to_the_workers():
    running, peak, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(4, timeout=10)

    def step(name):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        gate.wait()
        with lock:
            running[0] -= 1
        return {"changed": True}

    per_node = run_per_node(["n%d" % index for index in range(8)], step, workers=4)
    assert peak[0] == 4 and len(per_node) == 8


def test_no_nodes_and_a_step_returning_nothing():
    assert run_per_node([], lambda name: {"changed": True}) == {}
    assert run_per_node(["n1"], lambda name: None) == {"n1": {"changed": False, "failed": False, "msg": ""}}
    assert unique_names(["b", "a", "b"]) == ["b", "a"]
