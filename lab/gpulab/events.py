"""The append-only event log ``DIR/events.jsonl``: every node and cluster state change, one JSON object a line.

Each event is ``{"ts": <epoch seconds>, "node": <node name or "lab">, "kind": <str>, ...details}``. Writers
append whole lines under a lock with O_APPEND, so readers (tests, benchmarks) never see half an event.
"""
from __future__ import annotations

import json
import os
import threading
import time

EVENTS_FILE = "events.jsonl"


class EventLog:
    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, EVENTS_FILE)
        self._lock = threading.Lock()
        self._subscribers = []

    def subscribe(self, callback) -> None:
        """callback(event_dict) is called after each event is written (errors in callbacks are ignored)."""
        self._subscribers.append(callback)

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
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken subscriber must not stop the node core
                pass
        return event


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
