# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""One Kubernetes step for a batch of nodes in one module process: the step runs for every node (concurrently, up
to ``workers`` at a time), and a node whose step fails fails alone; the others go on.

The per-node result is ``{name: {changed, failed, msg, ...}}``: what the step returned for the node, or
``failed: true`` with the error's message. ``summarize`` turns that into the module's top-level result.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

DEFAULT_WORKERS = 8


def unique_names(names):
    """The node names in their first order, each once (a batch lists a node once whatever the caller passed)."""
    seen, ordered = set(), []
    for name in names:
        if name not in seen:
            seen.add(name)
            ordered.append(name)
    return ordered


def run_per_node(names, step, workers=DEFAULT_WORKERS, describe_error=str):
    """Run ``step(name)`` for each node name; return ``{name: result}`` in the names' order.

    ``step`` returns a dict (it should hold ``changed``); an exception it raises becomes that node's
    ``{changed: False, failed: True, msg: describe_error(error)}`` and does not stop the other nodes.
    """
    ordered = unique_names(names)

    def one(name):
        try:
            result = dict(step(name) or {})
        except Exception as error:  # pylint: disable=broad-except
            return {"changed": False, "failed": True, "msg": describe_error(error)}
        result.setdefault("changed", False)
        result.setdefault("failed", False)
        result.setdefault("msg", "")
        return result

    if not ordered:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(int(workers), len(ordered)))) as pool:
        results = list(pool.map(one, ordered))
    return dict(zip(ordered, results))


def summarize(per_node):
    """The module's top-level view of a batch: changed if any node changed, and the failed nodes' names."""
    failed = [name for name, result in per_node.items() if result.get("failed")]
    return {"changed": any(result.get("changed") for result in per_node.values()), "failed_nodes": failed,
            "ok_nodes": [name for name in per_node if name not in failed]}
