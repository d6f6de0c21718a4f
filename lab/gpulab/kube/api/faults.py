"""Faults of the API twin's server, for harnesses in another process (benchmarks/chaos.py): rules in a JSON file
(``DIR/api-faults.json`` for a lab's cluster), re-read when the file changes.

    [{"path": "^/api/v1/nodes", "methods": ["GET"], "code": 500, "count": 5},
     {"path": "/leases/", "methods": ["PUT"], "code": 409, "count": 1},
     {"path": "^/api/v1/nodes", "hang_s": 20, "count": 1},
     {"path": "^/api/v1/nodes", "close_watch_after_s": 2, "count": 1},
     {"path": "^/", "reset": true, "count": 12},
     {"path": "^/", "reset": true, "for_s": 12},
     {"path": "^/", "refuse": true, "for_s": 12}]

A rule applies to requests whose path matches its ``path`` regex (and method, when ``methods`` is given): each of
its first ``count`` ones (default 1) is held ``hang_s`` seconds (default 0), then answered with ``code`` as a
``metav1.Status`` (429 with ``retryAfterSeconds`` 1, as kube-apiserver's priority and fairness does), or served
as usual when the rule has no code. A rule with ``close_watch_after_s`` ends a matching watch's stream that many
seconds after it starts, cleanly, as kube-apiserver does when a watch's own timeout passes or the server restarts:
the client must watch again from its last resourceVersion (or list again). A rule with ``reset`` drops the
connection without an answer (what a client sees while the API server restarts: connection reset, or the remote
end closed without a response). A rule with ``for_s`` applies to every matching request for that many seconds
from the first one it applies to, its count ignored (an API server down for a while, however often clients
retry meanwhile). ``refuse`` with ``for_s`` is a restart as clients see it: the server closes its listener (new
connections refused) and drops every request on a connection already open, until ``for_s`` has passed; then it
listens again on the same port, its objects kept (as etcd keeps them). A changed file starts every count (and
every ``for_s``) again, but of a rule with an ``id`` the file held before: that one goes on from what it had
spent, so a harness that adds a fault to those of the round does not fire the earlier ones again (chaos seed
2028: a second 429 burst of 10 armed the first one's 10 again, up to 30 answers in all, not 20). No file, no fault.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Optional

from .errors import ApiError

REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}


class ApiFaults:
    """``take(method, path, watch)`` -> (hang_s, ApiError or None, close_watch_after_s or None, reset, refuse_s or
    None: seconds the listener stays closed) for the first rule that still applies, or None. A
    ``close_watch_after_s`` rule applies to watch requests only."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._stamp = None
        self._rules = []

    def _reload(self) -> None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._rules = None, []
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            with open(self.path) as stream:
                rules = json.load(stream)
        except (OSError, ValueError):
            rules = []     # half written: the next request reads it again
            self._stamp = None
        spent = {rule["id"]: rule for rule in self._rules if rule.get("id") is not None}
        self._rules = [self._armed(rule, spent.get(rule.get("id"))) for rule in rules if isinstance(rule, dict)]

    @staticmethod
    def _armed(rule: dict, before: Optional[dict]) -> dict:
        armed = dict(rule, left=int(rule.get("count", 1)), pattern=re.compile(rule.get("path", "")))
        if before is not None:
            armed["left"] = before["left"]
            if "until" in before:
                armed["until"] = before["until"]
        return armed

    def take(self, method: str, path: str, watch: bool = False):
        with self._lock:
            self._reload()
            for rule in self._rules:
                if rule["left"] <= 0 or not rule["pattern"].search(path):
                    continue
                if rule.get("methods") and method not in rule["methods"]:
                    continue
                close_after_s = rule.get("close_watch_after_s")
                if close_after_s is not None and not watch:
                    continue
                refuse_s = None
                if rule.get("for_s") is not None:
                    now = time.monotonic()
                    rule.setdefault("until", now + float(rule["for_s"]))
                    if now >= rule["until"]:
                        continue
                    if rule.get("refuse"):
                        refuse_s = rule["until"] - now
                else:
                    rule["left"] -= 1
                return (float(rule.get("hang_s", 0)), error_for(rule.get("code")),
                        float(close_after_s) if close_after_s is not None else None,
                        bool(rule.get("reset") or rule.get("refuse")), refuse_s)
        return None


def error_for(code: Optional[int]):
    if not code:
        return None
    details = {"retryAfterSeconds": 1} if code == 429 else None
    return ApiError(int(code), REASONS.get(int(code), "InternalError"),
                    "injected fault: the API server answered %d (gpulab api-faults.json)" % code, details)
