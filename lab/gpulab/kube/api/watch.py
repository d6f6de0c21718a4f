"""Committed store entries (object + cached JSON) and watches over them."""
from __future__ import annotations

import json
import queue
from typing import Optional, Tuple


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Entry:
    """A committed object: the dict (never mutated after commit) and its JSON encoding."""

    __slots__ = ("obj", "raw", "rv")

    def __init__(self, obj: dict):
        self.obj = obj
        self.raw = encode(obj)
        self.rv = int(obj["metadata"]["resourceVersion"])

    def copy(self) -> dict:
        return json.loads(self.raw)


class Event:
    __slots__ = ("rv", "type", "entry", "old")

    def __init__(self, rv: int, event_type: str, entry: Entry, old: Optional[Entry]):
        self.rv, self.type, self.entry, self.old = rv, event_type, entry, old


class Watch:
    """A watch on one resource of a ``Store`` (which feeds it through ``_offer``). Iterate for ``(type, obj)``
    (blocks; ends after ``close()``), or call ``next_event(timeout)`` (None on timeout) / ``next_raw(timeout)``
    (``(type, json bytes)``) in servers."""

    def __init__(self, store, resource: str, namespace: Optional[str], label_selector, field_predicate):
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self._labels = label_selector
        self._fields = field_predicate
        self._queue: "queue.Queue" = queue.Queue()
        self.closed = False

    def _selects(self, entry: Optional[Entry]) -> bool:
        if entry is None:
            return False
        metadata = entry.obj["metadata"]
        if self.namespace and metadata.get("namespace") != self.namespace:
            return False
        return self._labels.matches(metadata.get("labels")) and self._fields(entry.obj)

    def _offer(self, event: Event) -> None:
        """Queue ``event`` as this watcher sees it (a MODIFIED that leaves the selection is a DELETED)."""
        now_selected = self._selects(event.entry)
        if event.type == "MODIFIED":
            was_selected = self._selects(event.old)
            if now_selected and not was_selected:
                self._queue.put(("ADDED", event.entry))
            elif was_selected and not now_selected:
                self._queue.put(("DELETED", event.entry))
            elif now_selected:
                self._queue.put(("MODIFIED", event.entry))
        elif now_selected:
            self._queue.put((event.type, event.entry))

    def next_raw(self, timeout: Optional[float] = None) -> Optional[Tuple[str, bytes]]:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            return None
        return item[0], item[1].raw

    def next_event(self, timeout: Optional[float] = None) -> Optional[Tuple[str, dict]]:
        raw = self.next_raw(timeout)
        if raw is None:
            return None
        return raw[0], json.loads(raw[1])

    def bookmark(self) -> Optional[Tuple[str, dict]]:
        """A BOOKMARK at the store's current resourceVersion, or None while events are still queued
        (a bookmark must not overtake them)."""
        return self._store._bookmark_for(self)

    def __iter__(self):
        while not self.closed:
            event = self.next_event(timeout=0.5)
            if event is not None:
                yield event

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._remove_watch(self)
            self._queue.put(None)
