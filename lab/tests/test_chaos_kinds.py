"""The chaos harness's fault sets (benchmarks/chaos_schedule.py KIND_SETS): each set adds kinds after the last one,
so that every recorded round replays the same from its seed and `--kinds`, and every kind drawn has an injector.
Pure: no twin."""
from __future__ import annotations

import json
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

from chaos_schedule import (API_FAULTS, CONNECTION_FAULTS, KIND_SETS, NODE_FAULTS, OTHER_FAULTS,  # noqa: E402
                            RESTART_FAULTS, SSH_CUT, plan_round)

RESULTS = os.path.join(os.path.dirname(BENCHMARKS), "benchmarks", "results", "chaos")


def test_each_set_extends_the_one_before_so_recorded_seeds_draw_the_same():
    sets = [KIND_SETS[name] for name in ("default", "connections", "ssh", "restarts")]
    for smaller, larger in zip(sets, sets[1:]):
        assert larger[:len(smaller)] == smaller and len(larger) > len(smaller)


def test_every_kind_of_every_set_has_an_injector():
    known = set(NODE_FAULTS) | set(OTHER_FAULTS) | set(API_FAULTS) | set(CONNECTION_FAULTS) | set(RESTART_FAULTS)
    assert set(KIND_SETS["restarts"]) <= known | {SSH_CUT}


def test_the_recorded_rounds_replay_their_faults_from_seed_and_kinds():
    replayed = 0
    for name in sorted(os.listdir(RESULTS)):
        with open(os.path.join(RESULTS, name)) as stream:
            result = json.load(stream)
        kinds = KIND_SETS[result.get("kinds", "default")]
        plan = plan_round(result["seed"], result["nodes"], kinds)
        drawn = sorted(json.dumps([fault["kind"], fault["trigger"]]) for fault in plan["faults"])
        assert drawn == sorted(json.dumps([fault["kind"], fault["trigger"]]) for fault in result["faults"]), name
        replayed += 1
    assert replayed >= 10
