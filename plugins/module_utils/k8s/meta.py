# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Reading a Kubernetes object's metadata as plain JSON (no client): the JSON objects the collection and the
tools around it (kured) keep in annotations."""

from __future__ import annotations

import json


def json_annotation(obj: dict, key: str):
    """The JSON object stored in annotation ``key`` of ``obj``; None when it is absent, not JSON or not an object."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
