"""Invariant checker over the twin's records: `python -m gpulab.kube.sim.checker DIR --max-unavailable K`.

It replays the change records of `DIR/kube-records.jsonl` (every object version the store committed, in
order) and the node twin's `DIR/events.jsonl`, and answers:
- the most GPU nodes cordoned or NotReady at one moment (and when), against a limit K;
- evictions the API admitted although the PDB, recomputed from the replayed pods, allowed no disruption;
- reboots per node: bootID changes seen in the API, and boots the node twin logged ("up" events).
Exit status 1 when an invariant is broken, so scenarios can assert on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from ..api.eviction import compute_pdb_status, controller_scale, eviction_refusal, pods_selected_by
from ..api.recorder import RECORDS_FILE, read_records
from ..api.timefmt import rfc3339

EVENTS_FILE = "events.jsonl"
_EVICTION_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")


def is_gpu_node(node: dict) -> bool:
    status = node.get("status") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    resources = dict(status.get("capacity") or {}, **(status.get("allocatable") or {}))
    return (any(name.startswith("nvidia.com/") for name in resources)
            or labels.get("nvidia.com/gpu.present") == "true"
            or labels.get("feature.node.kubernetes.io/pci-10de.present") == "true")


def node_is_unavailable(node: dict) -> bool:
    """Cordoned, or Ready not True (NotReady or Unknown)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return True
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") != "True"
    return False


def admitted_evictions(records: list) -> set:
    """(namespace, pod) of every eviction request the API answered with 201."""
    admitted = set()
    for record in records:
        if record.get("record") != "request" or record.get("method") != "POST" or record.get("code") != 201:
            continue
        match = _EVICTION_PATH.match(record.get("path") or "")
        if match:
            admitted.add((match.group(1), match.group(2)))
    return admitted


class _Replay:
    """Objects as of the record being replayed."""

    def __init__(self):
        self.objects = {}    # resource -> {(namespace, name): obj}

    def previous(self, record: dict):
        return self.objects.get(record["resource"], {}).get((record.get("namespace"), record.get("name")))

    def apply(self, record: dict) -> None:
        bucket = self.objects.setdefault(record["resource"], {})
        key = (record.get("namespace"), record.get("name"))
        if record.get("event") == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = record.get("object") or {}

    def items(self, resource: str, namespace=None) -> list:
        return [obj for (ns, _), obj in self.objects.get(resource, {}).items() if namespace is None or ns == namespace]

    def controller_scale(self, reference: dict, namespace: str):
        return controller_scale(reference, namespace, self._object)

    def _object(self, resource: str, namespace: str, name: str):
        return self.objects.get(resource, {}).get((namespace, name))


def _deletion_started(record: dict, before) -> bool:
    """The change that starts a pod's deletion (deletionTimestamp appears, or it goes at once)."""
    if before is None or (before.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if record.get("event") == "DELETED":
        return True
    return bool(((record.get("object") or {}).get("metadata") or {}).get("deletionTimestamp"))


def _pdb_violation(replay: _Replay, namespace: str, pod: dict, ts: float):
    """The PDB the eviction of `pod` broke, judged on the pods just before the eviction, or None."""
    pods = replay.items("pods", namespace)
    for pdb in replay.items("poddisruptionbudgets", namespace):
        if not pods_selected_by(pdb, [pod]):
            continue
        recomputed = dict(pdb, status=compute_pdb_status(pdb, pods, replay.controller_scale, ""))
        refusal = eviction_refusal(recomputed, pod)
        if refusal is not None:
            return {"ts": ts, "namespace": namespace, "pod": pod["metadata"]["name"],
                    "pdb": pdb["metadata"]["name"], "why": refusal,
                    "disruptions_allowed": recomputed["status"]["disruptionsAllowed"]}
    return None


def check_records(records: list, node_events=(), max_unavailable=None) -> dict:
    """The report for a list of record dicts (as in kube-records.jsonl) and node twin events."""
    evicted = admitted_evictions(records)
    replay = _Replay()
    unavailable = set()
    timeline = []
    max_seen, max_at, max_nodes = 0, None, []
    violations = []
    boot_ids = {}
    api_reboots = {}
    for record in records:
        if record.get("record") != "change":
            continue
        resource, ts = record.get("resource"), record.get("ts")
        before = replay.previous(record)
        if resource == "pods" and (record.get("namespace"), record.get("name")) in evicted \
                and _deletion_started(record, before):
            violation = _pdb_violation(replay, record.get("namespace"), before, ts)
            if violation:
                violations.append(violation)
        replay.apply(record)
        if resource != "nodes":
            continue
        name, node = record.get("name"), record.get("object") or {}
        boot_id = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
        if boot_id:
            if name in boot_ids and boot_ids[name] != boot_id:
                api_reboots[name] = api_reboots.get(name, 0) + 1
            boot_ids[name] = boot_id
        now_unavailable = record.get("event") != "DELETED" and is_gpu_node(node) and node_is_unavailable(node)
        if now_unavailable != (name in unavailable):
            (unavailable.add if now_unavailable else unavailable.discard)(name)
            timeline.append({"ts": ts, "unavailable": len(unavailable)})
            if len(unavailable) > max_seen:
                max_seen, max_at, max_nodes = len(unavailable), ts, sorted(unavailable)
    report = {
        "max_unavailable_gpu_nodes": max_seen, "max_unavailable_at": max_at,
        "max_unavailable_at_utc": _utc(max_at), "max_unavailable_nodes": max_nodes,
        "unavailable_timeline": timeline,
        "evictions_admitted": len(evicted), "pdb_violations": violations,
        "reboots": _reboots(api_reboots, node_events),
    }
    if max_unavailable is not None:
        report["max_unavailable_limit"] = max_unavailable
        report["max_unavailable_ok"] = max_seen <= max_unavailable
    report["ok"] = not violations and report.get("max_unavailable_ok", True)
    return report


def _utc(timestamp):
    return None if timestamp is None else rfc3339(timestamp, digits=3)


def _reboots(api_reboots: dict, node_events) -> dict:
    boots = {}
    for event in node_events:
        if event.get("kind") == "up":
            boots[event.get("node")] = boots.get(event.get("node"), 0) + 1
    nodes = sorted(set(api_reboots) | set(boots))
    # The first "up" of a node is its first boot, not a reboot.
    return {node: {"api_boot_id_changes": api_reboots.get(node, 0),
                   "node_twin_reboots": max(0, boots.get(node, 0) - 1)} for node in nodes}


def _read_jsonl(path: str) -> list:
    if not os.path.exists(path):
        return []
    return list(read_records(path))


def check_state_dir(state_dir: str, max_unavailable=None) -> dict:
    records_path = os.path.join(state_dir, RECORDS_FILE)
    if not os.path.exists(records_path):
        raise FileNotFoundError("no %s in %s: was the lab started with the Kubernetes twin?"
                                % (RECORDS_FILE, state_dir))
    return check_records(_read_jsonl(records_path), _read_jsonl(os.path.join(state_dir, EVENTS_FILE)),
                         max_unavailable)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab.kube.sim.checker",
                                     description="Check invariants over a gpulab state dir's records.")
    parser.add_argument("state_dir")
    parser.add_argument("--max-unavailable", type=int, default=None,
                        help="most GPU nodes allowed cordoned/NotReady at one moment")
    parser.add_argument("--timeline", action="store_true", help="include the unavailable-count timeline")
    args = parser.parse_args(argv)
    try:
        report = check_state_dir(args.state_dir, args.max_unavailable)
    except FileNotFoundError as error:
        print("error: %s" % error, file=sys.stderr)
        return 2
    if not args.timeline:
        report.pop("unavailable_timeline")
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
