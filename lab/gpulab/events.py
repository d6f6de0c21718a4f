"""The append-only event log ``DIR/events.jsonl``: every node and cluster state change, one JSON object a line.

Each event is ``{"ts": <epoch seconds>, "node": <node name or "lab">, "kind": <str>, ...details}``. Writers
append whole lines under a lock with O_APPEND, so readers (tests, benchmarks) never see half an event.
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time

SLOW_CALLBACK_S = 0.5

EVENTS_FILE = "events.jsonl"


class EventLog:
    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, EVENTS_FILE)
        self._lock = threading.Lock()
        self._subscribers = []
        self._pending = queue.Queue()
        self._dispatcher = None

    def subscribe(self, callback) -> None:
        """callback(event_dict) is called for each event, in order, on one dispatcher thread: a slow or failing
        subscriber (the Kubernetes twin) never holds up a node's boot or shutdown."""
        with self._lock:
            self._subscribers.append(callback)
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(target=self._dispatch, name="event-dispatch", daemon=True)
                self._dispatcher.start()

    def emit(self, node: str, kind: str, **details) -> dict:
        event = {"ts": round(time.time(), 6), "node": node, "kind": kind}
        event.update(details)
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
            if self._subscribers:
                self._pending.put(event)
        return event

    def _dispatch(self) -> None:
        while True:
            event = self._pending.get()
            for callback in list(self._subscribers):
                started = time.monotonic()
                try:
                    callback(event)
                except Exception as error:  # a broken subscriber must not stop the others
                    sys.stderr.write("event subscriber %r failed on %s: %s\n" % (callback, event["kind"], error))
                spent_s = time.monotonic() - started
                if spent_s > SLOW_CALLBACK_S:
                    sys.stderr.write("event subscriber %r took %.1fs on %s/%s\n"
                                     % (callback, spent_s, event["node"], event["kind"]))


def read_events(state_dir: str, node: str = None, kind: str = None, since: float = 0.0) -> list:
    """The events of a state dir, optionally only those of one node and/or kind, newer than ``since``."""
    path = os.path.join(state_dir, EVENTS_FILE)
    try:
        with open(path) as stream:
            lines = stream.readlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        if not line.endswith("\n"):
            continue
        event = json.loads(line)
        if node is not None and event.get("node") != node:
            continue
        if kind is not None and event.get("kind") != kind:
            continue
        if event.get("ts", 0) < since:
            continue
        events.append(event)
    return events
