# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""List and watch through the official client as plain JSON dicts (no model deserialization: a list of hundreds
of pods costs milliseconds instead of seconds).

    items, resource_version = list_json(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-1")
    watch_events(core.list_pod_for_all_namespaces, resource_version, on_event, relist, stop, remaining,
                 field_selector="spec.nodeName=gpu-1")

``watch_events`` resumes from the last resourceVersion it saw (bookmarks included) whenever the server closes the
watch, calls ``relist()`` (which returns a new resourceVersion) on 410 Gone, and returns when ``stop`` (a
threading.Event) is set or ``remaining()`` (seconds) is spent. A watch the server closes is not an error.
"""

from __future__ import annotations

import json
import math

try:
    from kubernetes import watch as k8s_watch
    from kubernetes.client.rest import ApiException
except ImportError:
    k8s_watch = None
    ApiException = Exception

HTTP_GONE = 410
MAX_WATCH_SECONDS = 300


def list_json(list_function, **kwargs):
    """``(items, resourceVersion)`` of a list call, items as the API's JSON dicts."""
    response = list_function(_preload_content=False, **kwargs)
    body = json.loads(response.data)
    return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")


def watch_events(list_function, resource_version, on_event, relist, stop, remaining, **kwargs):
    """Call ``on_event(type, object_dict)`` for each ADDED/MODIFIED/DELETED event until stopped or out of time."""
    while not stop.is_set() and remaining() > 0:
        watcher = k8s_watch.Watch()
        seconds = max(1, min(MAX_WATCH_SECONDS, int(math.ceil(remaining()))))
        try:
            for event in watcher.stream(list_function, resource_version=resource_version, timeout_seconds=seconds,
                                        allow_watch_bookmarks=True, deserialize=False, **kwargs):
                obj = event.get("object") or {}
                resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event["type"], obj)
                if stop.is_set():
                    watcher.stop()
                    break
        except ApiException as error:
            if getattr(error, "status", None) != HTTP_GONE:
                raise
            resource_version = relist()
