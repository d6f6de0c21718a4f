# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The eviction engine of node_drain: ``Drain(api, node_name, pods, pdbs, deadline, ...).run()`` evicts the pods in
parallel threads, PDB-aware (``BudgetGate``), and follows them with a list+watch until they are gone or the
deadline passes. What to evict and how to report it are the pure decisions of k8s/drain.py."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import drain as _drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    api_error_message, list_call, request, resource_path, status_of)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import ListWatch

MAX_PARALLEL_EVICTIONS = 32
PDB_RETRY_CAP_S = 5.0
PODS = resource_path("v1", "pods")
PDBS = resource_path("policy/v1", "poddisruptionbudgets")


class BudgetGate:
    """The PodDisruptionBudgets as a watch shows them; evictions a budget refused wait here for a disruption.

    A waiter takes one allowed disruption of its budgets, so that N allowed disruptions wake N evictions, not all.
    """

    def __init__(self, pdbs):
        self._condition = threading.Condition()
        self.pdbs = {}
        self._tokens = {}
        self.sync(pdbs)

    def sync(self, pdbs):
        with self._condition:
            self.pdbs = {_drain.pdb_key(pdb): pdb for pdb in pdbs}
            self._tokens = {key: _drain.disruptions_allowed(pdb) for key, pdb in self.pdbs.items()}
            self._condition.notify_all()

    def update(self, event_type, pdb):
        key = _drain.pdb_key(pdb)
        with self._condition:
            if event_type == "DELETED":
                self.pdbs.pop(key, None)
                self._tokens[key] = 1    # no budget left to refuse
            else:
                self.pdbs[key] = pdb
                self._tokens[key] = _drain.disruptions_allowed(pdb)
            self._condition.notify_all()

    def current(self):
        with self._condition:
            return list(self.pdbs.values())

    def wait(self, keys, timeout, stop):
        """Take one allowed disruption of ``keys``, waiting for one up to ``timeout``; True when it had to wait."""
        deadline = time.monotonic() + timeout
        waited = False
        with self._condition:
            while not stop.is_set():
                if any(self._tokens.get(key, 0) > 0 for key in keys):
                    for key in keys:
                        self._tokens[key] = self._tokens.get(key, 0) - 1
                    return waited
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                waited = True
                self._condition.wait(min(remaining, 0.5))
        return waited

    def wake_all(self):
        with self._condition:
            self._condition.notify_all()


class Drain:
    """One drain: parallel evictions with PDB-aware retries; a list+watch of the node's pods sees them go and one of
    the PodDisruptionBudgets wakes the evictions they refused. Watches and evictions report on one queue.

    ``node_name`` may be a list: the nodes of a batch drained together, a pod watch each, under one budget gate."""

    def __init__(self, api, node_name, pods, pdbs, deadline, grace_period=None, disable_eviction=False):
        self.grace_period = grace_period
        self.disable_eviction = disable_eviction
        self.api = api
        self.node_names = [node_name] if isinstance(node_name, str) else list(node_name)
        self.pods = {_drain.pod_key(pod): pod for pod in pods}
        self.pending = {key: pod["metadata"]["uid"] for key, pod in self.pods.items()}
        self.evicted = set()
        self.waited = set()       # pods whose eviction waited for a disruption budget (or was refused by one)
        self.errors = {}          # pod key (or watch name) -> message of a failure that is not retried
        self.last_answer = {}     # pod key -> last message of a refused eviction
        self.gate = BudgetGate(pdbs)
        self.deadline = deadline
        self.stop = threading.Event()
        self.events = queue.Queue()

    def remaining(self):
        return self.deadline - time.monotonic()

    # --- evictions (worker threads) ----------------------------------------------------------------------------
    def _delete_options(self, uid):
        options = {"preconditions": {"uid": uid}}
        if self.grace_period is not None:
            options["gracePeriodSeconds"] = self.grace_period
        return options

    def _evict_once(self, pod):
        name, namespace, uid = pod["metadata"]["name"], pod["metadata"]["namespace"], pod["metadata"]["uid"]
        # the client's retries of an API server that does not answer end with the drain (chaos seed 364): the pod
        # is then reported with that error, not as never asked
        timeout_s = max(1.0, self.remaining())
        if self.disable_eviction:
            request(self.api, "DELETE", resource_path("v1", "pods", name, namespace), body=self._delete_options(uid),
                    timeout_s=timeout_s)
        else:
            body = {"metadata": {"name": name, "namespace": namespace}, "deleteOptions": self._delete_options(uid)}
            request(self.api, "POST", resource_path("v1", "pods", name, namespace, "eviction"), body=body,
                    timeout_s=timeout_s)

    def evict(self, key):
        pod = self.pods[key]
        pdbs = _drain.pdbs_of_pod(pod, self.gate.current())
        budgets = [_drain.pdb_key(pdb) for pdb in pdbs]
        if len(pdbs) == 1 and _drain.needs_budget(pod, pdbs[0]):
            # take one of the disruptions the budget allows before asking: evictions beyond them would only be
            # refused with 429 (at most PDB_RETRY_CAP_S of waiting when the budget's status is behind)
            if self.gate.wait(budgets, min(PDB_RETRY_CAP_S, self.remaining()), self.stop):
                self.waited.add(key)
        attempt = 0
        while not self.stop.is_set() and self.remaining() > 0:
            try:
                self._evict_once(pod)
                self.events.put(("eviction", "EVICTED", key))
                return
            except Exception as error:       # ApiError, connection errors
                code, reason, message = status_of(error)
                # 409: the UID precondition failed, the pod of that UID is gone
                outcome = "gone" if code == 409 else _drain.eviction_outcome(code, reason)
                if outcome == "gone":
                    self.events.put(("eviction", "GONE", key))
                    return
                self.last_answer[key] = _drain.refusal_text(message, code, getattr(error, "body", None))
                if outcome == "error":
                    self.events.put(("eviction", "ERROR", (key, api_error_message(error, "evict %s" % key))))
                    return
            attempt += 1
            self.waited.add(key)
            if budgets:
                self.gate.wait(budgets, min(PDB_RETRY_CAP_S, self.remaining()), self.stop)
            else:
                self.stop.wait(min(_drain.retry_delay(attempt), max(0.0, self.remaining())))

    # --- the whole run (main thread: the only reader of the queue) ---------------------------------------------
    def _apply(self, source, kind, payload):
        if source == "eviction":
            if kind == "EVICTED":
                self.evicted.add(payload)
            elif kind == "GONE":
                self.pending.pop(payload, None)
            else:
                self.errors[payload[0]] = payload[1]
        elif kind == "FAILED":
            self.errors[source] = payload
        elif source.startswith("pods"):
            # a node's list shows only its own pods: only those can be gone from it
            node_name = source.partition(":")[2]
            pending = dict((key, uid) for key, uid in self.pending.items()
                           if not node_name or (self.pods[key].get("spec") or {}).get("nodeName") == node_name)
            gone = _drain.gone_after_list(payload, pending) if kind == "SYNC" else \
                _drain.gone_after_event(kind, payload, pending)
            for key in gone:
                self.pending.pop(key, None)
        elif kind == "SYNC":
            self.gate.sync(payload)
        else:
            self.gate.update(kind, payload)

    def pods_watch_failed(self):
        return any(key == "pods" or key.startswith("pods:") for key in self.errors)

    def run(self):
        """Evict every pod and wait until they are gone or the deadline passes; returns the keys still pending."""
        until = time.time() + self.remaining()
        single = len(self.node_names) == 1
        watchers = [ListWatch("pods" if single else "pods:" + name,
                              list_call(self.api, PODS, field_selector="spec.nodeName=" + name), self.events)
                    for name in self.node_names]
        watchers.append(ListWatch("pdbs", list_call(self.api, PDBS), self.events))
        for watcher in watchers:
            watcher.start(until)
        executor = ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_EVICTIONS, len(self.pods))))
        for key in sorted(self.pods):
            executor.submit(self.evict, key)
        try:
            while any(key not in self.errors for key in self.pending) and self.remaining() > 0 \
                    and not self.pods_watch_failed():
                try:
                    self._apply(*self.events.get(timeout=min(1.0, max(0.01, self.remaining()))))
                except queue.Empty:
                    continue
        finally:
            self.stop.set()
            self.gate.wake_all()
            for watcher in watchers:
                watcher.stop()
            executor.shutdown(wait=True)
        while not self.events.empty():
            self._apply(*self.events.get_nowait())
        return sorted(self.pending)
