# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""List + watch of one collection, as an informer does it: list, then one watch from the list's resourceVersion,
resumed from the last resourceVersion seen when the server closes it (not an error), relisted on 410 Expired and
when the watch stays silent past its read timeout (a dead connection: the server ends each watch after at most
``WATCH_WINDOW_S``, so a stream quiet longer than that plus the request timeout is not coming back).

``ListWatch(list_call, events)``: ``list_call(**query)`` lists one collection with its selectors bound and gives
the urllib3 response (streamed for ``watch=True``), e.g. ``_k8s_client.list_call(api, '/api/v1/nodes',
field_selector='metadata.name=gpu-1')``; a typed list method of the kubernetes client works too (it is called with
``_preload_content=False``), so objects stay plain JSON dicts. ``start(deadline)`` runs the reader in a
daemon thread that puts ``(key, 'SYNC', [objects])`` after every (re)list and ``(key, 'ADDED'|'MODIFIED'|'DELETED',
object)`` for each change on ``events`` (a ``queue.Queue``), and ``(key, 'FAILED', message)`` when it gives up.
``watches_opened`` and ``lists`` count the requests made, ``relists_after_expiry`` and ``relists_after_timeout``
why it listed again; ``stop()`` ends the watch.

``list_json(list_call, **query)``: one list, as ``(items, resourceVersion)``.
``watch_events(response)``: the ``(type, object)`` events of one watch response (an ERROR event raises).
"""

from __future__ import annotations

import json
import threading
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    api_error_message,
    is_read_timeout,
    status_of,
)

RETRY_DELAYS_S = (0.5, 1, 2, 4, 8)
WATCH_WINDOW_S = 300   # the timeoutSeconds of one watch request: a longer wait is several watches


def iter_lines(response):
    """The lines of a streamed HTTP body as they arrive (a watch sends one JSON event per line)."""
    buffer = b''
    for segment in response.stream(amt=None, decode_content=False):
        buffer += segment if isinstance(segment, bytes) else segment.encode('utf-8')
        while b'\n' in buffer:
            line, buffer = buffer.split(b'\n', 1)
            if line.strip():
                yield line


def watch_events(response):
    """``(type, object)`` of each event of a watch response as it arrives (BOOKMARK included); an ERROR event (a
    metav1.Status, e.g. 410 Expired) raises WatchError."""
    for line in iter_lines(response):
        event = json.loads(line)
        kind, obj = event.get('type'), event.get('object') or {}
        if kind == 'ERROR':
            raise WatchError(obj)
        yield kind, obj


def list_json(list_call, **query):
    """``(items, resourceVersion)`` of one list call, the items as the API's JSON dicts (no model classes: a list of
    hundreds of pods costs milliseconds instead of seconds)."""
    response = list_call(_preload_content=False, **query)
    body = json.loads(response.data)
    return body.get('items') or [], (body.get('metadata') or {}).get('resourceVersion')


class ListWatch:
    """One list + watch, read by a daemon thread (see the module docstring)."""

    def __init__(self, key, list_call, events):
        self.key = key
        self.list_call = list_call
        self.events = events
        self.watches_opened = 0
        self.lists = 0
        self.relists_after_expiry = 0
        self.relists_after_timeout = 0
        self._stopped = threading.Event()
        self._lock = threading.Lock()      # hands the open watch response between the reader and stop()
        self._response = None
        self._thread = None

    def start(self, deadline):
        self._thread = threading.Thread(target=self._run, args=(deadline,), name='watch-%s' % self.key, daemon=True)
        self._thread.start()
        return self

    def stop(self, join_s=1.0):
        """Ends the watch (the reader thread returns within ``join_s``)."""
        with self._lock:
            self._stopped.set()
            response = self._response
        if response is not None:
            _close(response)
        if self._thread is not None:
            self._thread.join(join_s)

    def _run(self, deadline):
        failures = 0
        resource_version = None
        while not self._stopped.is_set() and (time.time() < deadline or resource_version is None):
            try:
                if resource_version is None:
                    resource_version = self.list_once()
                resource_version = self._watch(resource_version, deadline)
                failures = 0
            except Exception as error:  # pylint: disable=broad-except
                if self._stopped.is_set():
                    return
                code, reason = status_of(error)[:2]
                if code == 410 or reason in ('Expired', 'Gone'):
                    self.relists_after_expiry += 1
                    resource_version = None
                    continue
                if is_read_timeout(error):
                    self.relists_after_timeout += 1
                    resource_version = None
                if failures >= len(RETRY_DELAYS_S) or (code is not None and code < 500 and code != 429):
                    self.events.put((self.key, 'FAILED', api_error_message(error, 'watch %s' % self.key)))
                    return
                time.sleep(RETRY_DELAYS_S[failures])
                failures += 1

    def list_once(self):
        """One list, delivered as a SYNC event (check mode judges on it without watching); returns its
        resourceVersion."""
        items, resource_version = list_json(self.list_call)
        self.lists += 1
        self.events.put((self.key, 'SYNC', items))
        return resource_version

    def _watch(self, resource_version, deadline):
        """Reads one watch until the server closes it; returns the resourceVersion to resume from."""
        timeout_s = min(WATCH_WINDOW_S, max(1, int(deadline - time.time()) + 1))
        response = self.list_call(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                                  timeout_seconds=timeout_s, _preload_content=False)
        self.watches_opened += 1
        with self._lock:
            # stop() may have come while the request was in flight: it found no response to close
            stopped = self._stopped.is_set()
            self._response = None if stopped else response
        if stopped:
            _close(response)
            return resource_version
        try:
            for kind, obj in watch_events(response):
                version = (obj.get('metadata') or {}).get('resourceVersion')
                if version:
                    resource_version = version
                if kind in ('ADDED', 'MODIFIED', 'DELETED'):
                    self.events.put((self.key, kind, obj))
        finally:
            with self._lock:
                self._response = None
            response.release_conn()
        return resource_version


def _close(response):
    """Interrupts a streamed response, also one another thread is reading (urllib3 2.3+ has shutdown())."""
    for close in ('shutdown', 'close'):
        try:
            getattr(response, close, lambda: None)()
        except Exception:  # pylint: disable=broad-except
            pass


class WatchError(Exception):
    """An ERROR event in a watch stream (its object is a metav1.Status; 410 Expired means relist)."""

    def __init__(self, status):
        super(WatchError, self).__init__(status.get('message') or 'watch error')
        self.status = status.get('code')
        self.reason = status.get('reason')
        self.body = json.dumps(status)
