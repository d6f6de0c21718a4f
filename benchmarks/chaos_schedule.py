"""What one chaos round does, drawn from its seed alone: the fleet, the runbook's inputs and the faults with the
moment each one fires. Pure (no I/O): `plan_round(seed)` gives the same plan on every machine, so a round is
reproduced with `make chaos SEEDS=<seed>`.
"""
from __future__ import annotations

import math
import random

# node faults of `gpulab fault NODE KIND` (lab/gpulab/faults.py and the cluster kinds of kube/sim/cluster.py);
# pdb-block is drawn as its own kind below, since it is released again
NODE_FAULTS = ("dkms-fail", "reboot-hang", "slow-boot", "disk-full", "secure-boot-no-key", "driver-mismatch",
               "xid:48", "xid:79", "stale-device-plugin", "kubelet-restart", "device-plugin-crash", "kubelet-down")
# faults of the surroundings, applied by the harness itself (benchmarks/chaos_faults.py)
OTHER_FAULTS = ("pdb-block-release", "ssh-drop", "prometheus-down", "alertmanager-down", "lock-taken",
                "controller-kill")
# the API twin's answers (rules of lab/gpulab/kube/api/faults.py): each rule ends after its count of requests
API_FAULTS = {
    "api-500": {"path": "^/api/v1/nodes", "code": 500, "count": 3},
    "api-429-burst": {"path": "^/api", "code": 429, "count": 10},
    "api-hung-request": {"path": "^/api/v1/nodes", "hang_s": 20, "count": 1},
    "lease-409": {"path": "/leases/gpuops-nvidia-rollout$", "methods": ["PUT"], "code": 409, "count": 2},
}
FAULT_KINDS = NODE_FAULTS + OTHER_FAULTS + tuple(API_FAULTS)
# the API server's connections: a restart (every request dropped unanswered for a moment) and its watches closed
# early. Not in FAULT_KINDS, so that a recorded seed draws the same round: a round takes them with
# `chaos.py --kinds` (CONNECTION_KINDS adds them to the rest)
CONNECTION_FAULTS = {
    "api-restart": {"path": "^/", "reset": True, "count": 12},
    "watch-closed-early": {"path": "^/", "close_watch_after_s": 1, "count": 20},
}
CONNECTION_KINDS = FAULT_KINDS + tuple(CONNECTION_FAULTS)
# the controller's established SSH connection to a node cut (chaos_faults.cut_ssh_connections); drawn only by
# `chaos.py --kinds ssh` (SSH_KINDS), so that the connection rounds recorded replay the same
SSH_CUT = "ssh-cut"
SSH_KINDS = CONNECTION_KINDS + (SSH_CUT,)
# the API server restarting, down for 12 s (its listener closed: new connections refused, requests on open ones
# dropped; then the same port, the objects kept): the restart api-restart stands for, bounded in time
# (api-restart's count of 12 lasts as long as one retrying client needs to spend it: 30 s of back-off, chaos seed
# 31). Drawn only by `--kinds restarts`
RESTART_FAULTS = {
    "api-down": {"path": "^/", "refuse": True, "for_s": 12},
}
RESTART_KINDS = SSH_KINDS + tuple(RESTART_FAULTS)
KIND_SETS = {"default": FAULT_KINDS, "connections": CONNECTION_KINDS, "ssh": SSH_KINDS, "restarts": RESTART_KINDS}
# faults that end by themselves after `hold_s` (the rest last until the round's end, when the harness clears all)
RELEASED_FAULTS = ("pdb-block-release", "ssh-drop", "prometheus-down", "alertmanager-down", "lock-taken",
                   "kubelet-down")
BUDGETS = (1, 2, "25%", "50%")
MIN_NODES, MAX_NODES = 4, 8
# moments: seconds since the first run started, the n-th task the runs printed, the n-th change of a node's
# upgrade record (all runs of the round counted together)
TRIGGERS = ("elapsed", "task", "record")


def budget_of(max_unavailable, gpu_nodes: int) -> int:
    """GPU nodes allowed out at once, as driver_upgrade_plan computes it (a percentage rounds down, at least 1)."""
    if isinstance(max_unavailable, str) and max_unavailable.endswith("%"):
        return max(1, int(math.floor(int(max_unavailable[:-1]) * gpu_nodes / 100.0)))
    return max(1, int(max_unavailable))


def draw_inputs(rng: random.Random, nodes: int) -> dict:
    """Valid runbook inputs: batch sizes within the budget (the canary first), short soaks, rollback on or off, the
    Job workload waited for or not."""
    max_unavailable = rng.choice(BUDGETS)
    budget = budget_of(max_unavailable, nodes)
    size = rng.randint(1, budget)
    later = size if rng.random() < 0.5 else "%d%%" % (100 * size // nodes)
    if isinstance(later, str) and int(later[:-1]) == 0:
        later = size
    return {
        "gpuops_max_unavailable": max_unavailable,
        "gpuops_upgrade_batches": [1, later],
        "gpuops_soak_seconds": {"canary": rng.randint(0, 4), "batch": rng.randint(0, 3)},
        "gpuops_rollback_on_failure": rng.random() < 0.5,
        "wait_for_jobs": rng.random() < 0.5,
    }


def draw_trigger(rng: random.Random, nodes: int) -> dict:
    kind = rng.choice(TRIGGERS)
    if kind == "elapsed":
        return {"kind": "elapsed", "seconds": round(rng.uniform(0, 40 + 15 * nodes), 1)}
    if kind == "task":
        return {"kind": "task", "n": rng.randint(1, 60 + 25 * nodes)}
    return {"kind": "record", "n": rng.randint(1, 5 * nodes)}


def draw_fault(rng: random.Random, nodes: list, kinds=FAULT_KINDS) -> dict:
    kind = rng.choice(kinds)
    fault = {"kind": kind, "trigger": draw_trigger(rng, len(nodes))}
    if kind in NODE_FAULTS or kind in ("pdb-block-release", "ssh-drop", "ssh-cut"):
        fault["node"] = rng.choice(nodes)
    if kind in RELEASED_FAULTS:
        fault["hold_s"] = round(rng.uniform(2, 25), 1)
    return fault


def node_names(count: int) -> list:
    """The twin's node names (`gpulab up --nodes N`)."""
    return ["gpu-node-%02d" % index for index in range(1, count + 1)]


def plan_round(seed: int, nodes=None, kinds=FAULT_KINDS) -> dict:
    """The whole round from its seed: {seed, nodes, inputs, faults}; `nodes` fixes the fleet size (the rest of the
    draw is unchanged by it only when it equals the drawn size), `kinds` restricts the faults drawn."""
    rng = random.Random(seed)
    drawn_nodes = rng.randint(MIN_NODES, MAX_NODES)
    count = nodes or drawn_nodes
    names = node_names(count)
    inputs = draw_inputs(rng, count)
    faults = [draw_fault(rng, names, kinds) for _ in range(rng.randint(1, 3))]
    # at most one controller kill per round: its resume is the round's second run
    kills = [fault for fault in faults if fault["kind"] == "controller-kill"]
    faults = [fault for fault in faults if fault["kind"] != "controller-kill"] + kills[:1]
    return {"seed": seed, "nodes": count, "inputs": inputs, "faults": faults}
