# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The waiting of gpu_allocatable_wait: ``GpuNodeWait(params)`` keeps the latest Node and ResourceSlice objects
that the ListWatch threads put on one queue and a NodeTracker per node; ``follow(events, watch_count, deadline,
check_mode)`` judges after each burst of events until every node is satisfied or the deadline passes. The
judgement itself is k8s/node_readiness.py's."""

from __future__ import annotations

import queue
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import list_call, resource_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import DRA, NodeTracker, dra_gpu_count

# A timeout shorter than the first list takes (a loaded controller) still gets one judgement with a diagnosis.
FIRST_LIST_GRACE_S = 30


class WatchFailed(Exception):
    """A watch gave up (its message says which and why)."""


def node_list_call(api, names):
    if len(names) == 1:
        return list_call(api, resource_path('v1', 'nodes'), field_selector='metadata.name=%s' % names[0])
    return list_call(api, resource_path('v1', 'nodes'))


class GpuNodeWait:
    """The latest Node and ResourceSlice objects and a tracker per node of ``params['nodes']`` (the options of
    gpu_allocatable_wait)."""

    def __init__(self, params):
        self.names = list(dict.fromkeys(params['nodes']))
        self.dra = params['resource'] == DRA
        self.trackers = {}
        for name in self.names:
            count = (params.get('counts') or {}).get(name, params['count'])
            resources = count if isinstance(count, dict) else None
            count = None if resources else count
            expectation = dict(resource=params['resource'], count=count, resources=resources, labels=params['labels'],
                               boot_id_before=params['boot_id_changed_from'].get(name),
                               require_ready=params['require_ready'],
                               nvml_gpu_names=(params.get('nvml_gpu_names') or {}).get(name))
            self.trackers[name] = NodeTracker(name, expectation, params['stable_seconds'])
        self.objects = {'nodes': {}, 'resourceslices': {}}

    def apply(self, key, kind, payload):
        if kind == 'SYNC':
            self.objects[key] = dict((_name(obj), obj) for obj in payload)
        elif kind == 'DELETED':
            self.objects[key].pop(_name(payload), None)
        else:
            self.objects[key][_name(payload)] = payload

    def observe(self, now):
        slices = list(self.objects['resourceslices'].values())
        return dict((name, tracker.observe(self.objects['nodes'].get(name), now,
                                           dra_gpu_count(slices, name) if self.dra else None))
                    for name, tracker in self.trackers.items())

    def next_due(self, now):
        due = [tracker.due_at(now) for tracker in self.trackers.values()]
        due = [when for when in due if when is not None]
        return min(due) if due else None

    def follow(self, events, watch_count, deadline, check_mode=False):
        """The node states once all are satisfied (check mode: after the first lists), or at the deadline (at
        most FIRST_LIST_GRACE_S later while a first list is missing; then ``{}``)."""
        synced, states = set(), {}
        while True:
            self._apply_events(events, synced, 0)
            now = time.time()
            if len(synced) == watch_count:
                states = self.observe(now)
                if check_mode or all(state['satisfied'] for state in states.values()):
                    return states
            if now >= deadline and (len(synced) == watch_count or now >= deadline + FIRST_LIST_GRACE_S):
                return states
            if len(synced) == watch_count:
                due = self.next_due(now)
                self._apply_events(events, synced, min(deadline, due or deadline) - now)
            else:
                self._apply_events(events, synced, deadline + FIRST_LIST_GRACE_S - now)

    def _apply_events(self, events, synced, timeout_s):
        """Waits up to ``timeout_s`` for one event (0: none), then applies every event already queued, so that a
        burst of changes is judged once."""
        block = timeout_s > 0
        while True:
            try:
                key, kind, payload = events.get(timeout=timeout_s) if block else events.get_nowait()
            except queue.Empty:
                return
            block = False
            if kind == 'FAILED':
                raise WatchFailed(payload)
            if kind == 'SYNC':
                synced.add(key)
            self.apply(key, kind, payload)


def _name(obj):
    return (obj.get('metadata') or {}).get('name')
