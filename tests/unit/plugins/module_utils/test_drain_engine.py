# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import threading
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.drain_engine import BudgetGate


def pdb(allowed):
    return {"metadata": {"name": "web", "namespace": "default"}, "status": {"disruptionsAllowed": allowed}}


def test_one_allowed_disruption_lets_one_waiter_through_and_the_next_waits_for_the_watch():
    gate = BudgetGate([pdb(1)])
    stop = threading.Event()
    started = time.monotonic()
    assert gate.wait(["default/web"], 5, stop) is False
    assert time.monotonic() - started < 0.5

    released = []
    waiter = threading.Thread(target=lambda: (gate.wait(["default/web"], 5, stop), released.append(time.monotonic())))
    waiter.start()
    time.sleep(0.3)
    assert not released
    gate.update("MODIFIED", pdb(1))
    waiter.join(2)
    assert released and released[0] - started < 2


def test_a_wait_without_a_disruption_ends_at_its_timeout_or_when_stopped():
    gate = BudgetGate([pdb(0)])
    stop = threading.Event()
    started = time.monotonic()
    gate.wait(["default/web"], 0.3, stop)
    assert 0.25 < time.monotonic() - started < 1.5
    stop.set()
    started = time.monotonic()
    gate.wait(["default/web"], 5, stop)
    assert time.monotonic() - started < 0.5


def test_a_deleted_budget_refuses_nothing():
    gate = BudgetGate([pdb(0)])
    gate.update("DELETED", pdb(0))
    started = time.monotonic()
    gate.wait(["default/web"], 5, threading.Event())
    assert time.monotonic() - started < 0.5 and gate.current() == []
