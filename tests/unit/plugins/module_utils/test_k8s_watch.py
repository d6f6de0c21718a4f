# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""ListWatch against a scripted API server: what a real kube-apiserver sends (a list, watch streams that the server
closes, a 410 Expired ERROR event) and what the reader must do with it."""

from __future__ import annotations

import json
import queue
import threading
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import (
    ListWatch, WatchError, iter_lines, watch_events)

# The ERROR event kube-apiserver sends in a watch whose resourceVersion is too old.
EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "too old resource version: 10 (250)", "reason": "Expired",
                                       "code": 410}}


def node(name, version):
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


class Response:
    """A streamed HTTP body delivered in arbitrary chunks (lines split across chunks, as over TLS)."""

    def __init__(self, data, chunk=7):
        self.data = data
        self.chunk = chunk

    def stream(self, amt=None, decode_content=False):
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start:start + self.chunk]

    def release_conn(self):
        pass


class ScriptedServer:
    """Answers list and watch calls in order; records the query of each call."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, **query):
        self.calls.append(query)
        if not self.answers:
            time.sleep(5)
            return Response(b"")
        kind, payload = self.answers.pop(0)
        if kind == "list":
            items, version = payload
            return Response(json.dumps({"items": items, "metadata": {"resourceVersion": str(version)}}).encode())
        return Response(b"".join(json.dumps(event).encode() + b"\n" for event in payload))


def collect(events, count, timeout_s=5.0):
    got = []
    deadline = time.time() + timeout_s
    while len(got) < count and time.time() < deadline:
        try:
            got.append(events.get(timeout=0.1))
        except queue.Empty:
            pass
    return got


def test_closed_watch_is_resumed_from_the_last_version_and_410_relists():
    server = ScriptedServer([
        ("list", ([node("gpu-1", 10)], 10)),
        ("watch", [{"type": "MODIFIED", "object": node("gpu-1", 11)},
                   {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),   # then the server closes
        ("watch", [EXPIRED]),
        ("list", ([node("gpu-1", 250), node("gpu-2", 249)], 250)),
        ("watch", [{"type": "DELETED", "object": node("gpu-2", 251)}]),
    ])
    events = queue.Queue()
    watcher = ListWatch("nodes", server, events).start(time.time() + 30)
    got = collect(events, 4)
    watcher.stop(join_s=0)
    assert [(kind, payload if kind == "SYNC" else payload["metadata"]["resourceVersion"])
            for key, kind, payload in got][:2] == [("SYNC", [node("gpu-1", 10)]), ("MODIFIED", "11")]
    assert got[2][1] == "SYNC" and [one["metadata"]["name"] for one in got[2][2]] == ["gpu-1", "gpu-2"]
    assert got[3][1:] == ("DELETED", node("gpu-2", 251))
    watches = [call for call in server.calls if call.get("watch")]
    assert [call["resource_version"] for call in watches[:3]] == ["10", "15", "250"]
    assert all(call["allow_watch_bookmarks"] and call["_preload_content"] is False for call in watches)
    assert (watcher.lists, watcher.relists_after_expiry) == (2, 1)
    assert watcher.watches_opened >= 3


def test_lines_split_across_chunks_are_joined():
    body = b'{"type": "ADDED"}\n\n{"type": "MODIFIED"}\n'
    assert [json.loads(line)["type"] for line in iter_lines(Response(body, chunk=3))] == ["ADDED", "MODIFIED"]


class Refusing:
    status = 403
    reason = "Forbidden"
    body = json.dumps({"kind": "Status", "message": 'nodes is forbidden: User "sre" cannot list resource "nodes"',
                       "reason": "Forbidden", "code": 403})


def test_a_refused_list_is_reported_once_with_the_status_message():
    def refuse(**query):
        error = Exception("forbidden")
        for key in ("status", "reason", "body"):
            setattr(error, key, getattr(Refusing, key))
        raise error
    events = queue.Queue()
    ListWatch("nodes", refuse, events).start(time.time() + 30)
    key, kind, message = events.get(timeout=5)
    assert (key, kind) == ("nodes", "FAILED")
    assert message == ('watch nodes: nodes is forbidden: User "sre" cannot list resource "nodes" '
                       '(reason Forbidden, HTTP 403)')


def test_stop_while_the_watch_request_is_in_flight_returns_at_once_and_closes_it():
    # A module that decides on the first list calls stop() while the watch request is still being answered: there
    # is no response to close yet, so the reader must close it when it arrives instead of reading it until the
    # join times out (which cost every waiting module a second).
    listed, answer = threading.Event(), threading.Event()
    closed = threading.Event()

    class Streaming(Response):
        """A watch on which nothing happens: its read returns only when the response is shut down."""

        def stream(self, amt=None, decode_content=False):
            closed.wait(10)
            return iter(())

        def shutdown(self):
            closed.set()

    def server(**query):
        if not query.get("watch"):
            listed.set()
            return Response(json.dumps({"items": [], "metadata": {"resourceVersion": "1"}}).encode())
        answer.wait(5)
        return Streaming(b"")

    events = queue.Queue()
    watcher = ListWatch("nodes", server, events).start(time.time() + 30)
    assert events.get(timeout=5)[1] == "SYNC" and listed.is_set()
    threading.Timer(0.2, answer.set).start()
    started = time.monotonic()
    watcher.stop(join_s=5)
    assert time.monotonic() - started < 2
    assert closed.is_set() and watcher.watches_opened == 1


def test_watch_events_decodes_each_event_and_raises_on_an_error_event():
    body = b"".join(json.dumps(event).encode() + b"\n" for event in [
        {"type": "ADDED", "object": node("gpu-1", 2)}, {"type": "BOOKMARK", "object": {"metadata": {}}}, EXPIRED])
    events = watch_events(Response(body, chunk=5))
    assert next(events) == ("ADDED", node("gpu-1", 2))
    assert next(events) == ("BOOKMARK", {"metadata": {}})
    with pytest.raises(WatchError) as raised:
        next(events)
    assert (raised.value.status, raised.value.reason) == (410, "Expired")
