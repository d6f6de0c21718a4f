"""Append-only JSON-lines record of every API request and object change (``DIR/kube-records.jsonl``).

Two record kinds, one per line:
``{"ts": 1764686400.12, "record": "request", "method": "GET", "path": "/api/v1/nodes", "query": "limit=500",
   "code": 200, "user": "admin", "user_agent": "kubectl/v1.32.4 ...", "duration_ms": 1.8, "verb": "list"}``
``{"ts": ..., "record": "change", "event": "ADDED|MODIFIED|DELETED", "resource": "nodes", "namespace": null,
   "name": "gpu-1", "resourceVersion": "42", "object": {...full object after the change...}}``
The checker (``checker.py``) replays the change records to answer questions about any moment.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Optional

RECORDS_FILE = "kube-records.jsonl"   # in the lab's state directory


class Recorder:
    """Thread-safe JSON-lines writer; ``path=None`` keeps records in memory only (``.records``, for tests)."""

    def __init__(self, path: Optional[str] = None, keep_in_memory: bool = False):
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None
        self.records: Optional[list] = [] if (keep_in_memory or not path) else None

    def _write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=False)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()
            if self.records is not None:
                self.records.append(record)

    def record_request(self, method: str, path: str, query: str, code: int, user: Optional[str],
                       user_agent: Optional[str], duration_ms: float, verb: Optional[str] = None,
                       annotations: Optional[dict] = None) -> None:
        """``annotations``: the request's audit annotations (ValidatingAdmissionPolicy Audit), when it has any."""
        record = {"ts": time.time(), "record": "request", "method": method, "path": path, "query": query,
                  "code": code, "user": user, "user_agent": user_agent, "verb": verb,
                  "duration_ms": round(duration_ms, 3)}
        if annotations:
            record["annotations"] = annotations
        self._write(record)

    def record_change(self, event_type: str, resource: str, obj: dict) -> None:
        metadata = obj.get("metadata") or {}
        self._write({"ts": time.time(), "record": "change", "event": event_type, "resource": resource,
                     "namespace": metadata.get("namespace"), "name": metadata.get("name"),
                     "resourceVersion": metadata.get("resourceVersion"), "object": obj})

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_records(path: str):
    """Yield the records of a ``kube-records.jsonl`` file in order (a torn last line is skipped)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError:
                continue
