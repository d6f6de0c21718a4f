# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""node_drain's batch drain (``names:`` with ``state: drain``): the nodes of a batch cordoned and drained at once,
in one process, under ONE eviction budget - one PodDisruptionBudget watch and one ``BudgetGate`` for every eviction
of the batch, so a budget that spans the batch's nodes is spent once, in turn, instead of N drains racing for it
and backing off from each other's 429s. Each node keeps its own outcome: a node whose pods may not be evicted
(nothing of it is evicted, its cordon undone) or whose pods are still there at the deadline fails alone, with the
message and the reason annotation a drain of that node alone would give; the others go on.

``drain_batch(api, nodes, params, started, move_record, check_mode)`` speaks node_drain's options (``params``); ``move_record``
is the module's record step for one node (``move_record(name, which, result)``, raising ``DrainStepError``)."""

from __future__ import annotations

import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import drain as _drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    api_error_message, list_call, request_json, resource_path, set_connection_pool_size, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.drain_engine import (
    MAX_PARALLEL_EVICTIONS, PDBS, PODS, Drain)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json


class DrainStepError(Exception):
    """One node's step failed: that node alone fails, with this message."""


def missing_daemonsets(api, pods):
    """The DaemonSets of the pods' controllers that are gone (kubectl evicts their pods only with force)."""
    missing = set()
    for namespace, name in sorted(_drain.daemonsets_to_check(pods)):
        try:
            request_json(api, "GET", resource_path("apps/v1", "daemonsets", name, namespace))
        except Exception as error:
            if status_of(error)[0] != 404:
                raise DrainStepError(api_error_message(error, "read DaemonSet %s/%s" % (namespace, name)))
            missing.add((namespace, name))
    return missing


def node_pods(api, name, pod_selector=None):
    """The pods bound to node ``name`` (matching ``pod_selector`` when given)."""
    try:
        return list_json(list_call(api, PODS), field_selector="spec.nodeName=" + name,
                         label_selector=pod_selector or None)[0]
    except Exception as error:
        raise DrainStepError(api_error_message(error, "list the pods of node %s" % name))


def _patch(nodes, name, patch):
    try:
        return nodes.patch_node(name, patch)
    except Exception as error:
        raise DrainStepError(api_error_message(error, "patch node %s" % name))


def prepare_node(api, nodes, name, params, dry_run, move_record):
    """Record, cordon and plan one node's drain: ``(result, pods to evict)``. Pods that may not be evicted fail the
    node before anything of it is evicted, its cordon undone."""
    result = {"changed": False}
    move_record(name, "state", result)
    try:
        node = nodes.read_node(name)
    except Exception as error:
        raise DrainStepError(api_error_message(error, "read node %s" % name))
    result["boot_id"] = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
    record_before = _drain.cordon_record(node)
    reason = params["reason"] or (None if record_before else "drained by %s" % _drain.CORDONED_BY)
    patch = _drain.cordon_patch(node, format_time(time.time()), reason)
    if patch is not None:
        result["changed"] = True
        if not dry_run:
            node = _patch(nodes, name, patch)
    result["unschedulable"] = True
    pods = node_pods(api, name, params["pod_selector"])
    plan = _drain.classify_pods(pods, ignore_daemonsets=params["ignore_daemonsets"],
                                delete_emptydir_data=params["delete_emptydir_data"], force=params["force"],
                                missing_daemonsets=missing_daemonsets(api, pods))
    if plan["refused"]:
        undo = _drain.undo_cordon_patch(node, record_before)
        if undo is not None and not dry_run:
            _patch(nodes, name, undo)
        raise DrainStepError(_drain.refusal_message(name, plan["refused"]))
    result.update(evicted=[], blocked=[], pods_to_evict=sorted(_drain.pod_key(pod) for pod in plan["evict"]))
    result["changed"] = result["changed"] or bool(plan["evict"])
    return result, plan["evict"]


def drain_batch(api, nodes, params, started, move_record, check_mode=False):
    """``{name: result}`` for every node of ``params['names']`` (see the module's RV(nodes))."""
    dry_run = bool(check_mode or params["dry_run"])
    evictions = {}

    def prepare(name):
        result, evictions[name] = prepare_node(api, nodes, name, params, dry_run, move_record)
        return result

    per_node = run_per_node(params["names"], prepare, describe_error=str)
    going = [name for name, result in per_node.items() if not result["failed"]]
    pods = [pod for name in going for pod in evictions[name]]
    if pods and not dry_run:
        try:
            pdbs = list_json(list_call(api, PDBS))[0]
        except Exception as error:
            message = api_error_message(error, "list PodDisruptionBudgets")
            for name in going:
                per_node[name].update(failed=True, msg=message)
            return per_node
        set_connection_pool_size(api, min(MAX_PARALLEL_EVICTIONS, len(pods)) + len(going) + 2)
        drain = Drain(api, going, pods, pdbs, started + params["timeout"], grace_period=params["grace_period"],
                      disable_eviction=params["disable_eviction"])
        pending = set(drain.run())
        for name in going:
            _judge(nodes, name, params, drain, pending, per_node[name])
    for name in going:
        if not per_node[name]["failed"]:
            try:
                move_record(name, "state_after", per_node[name])
            except DrainStepError as error:
                per_node[name].update(failed=True, msg=str(error))
    return per_node


def _judge(nodes, name, params, drain, pending, result):
    """One node's outcome of the batch's evictions: its pods gone, or the node fails alone with its reason."""
    own = set(result["pods_to_evict"])
    left = sorted(own & pending)
    result["evicted"] = sorted(own - pending)
    result["waited_for_budget"] = sorted(own & drain.waited)
    if not left:
        return
    result["blocked"] = _drain.blocked_pods([drain.pods[key] for key in left], drain.gate.current(),
                                            drain.last_answer, drain.evicted)
    errors = dict((key, message) for key, message in drain.errors.items()
                  if key in left or key in ("pdbs", "pods:" + name))
    if errors:
        message = "drain of %s failed, node left cordoned: %s" % (name, "; ".join(errors[key] for key in sorted(errors)))
    else:
        message = _drain.timeout_reason(name, params["timeout"], result["blocked"])
    try:
        _patch(nodes, name, _drain.reason_patch(message))
    except DrainStepError:
        pass    # the failure below says why; the reason annotation is the best effort of a failed node
    result.update(failed=True, msg=message)
