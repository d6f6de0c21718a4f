# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Label changes on nodes: the labels checked as the API server would check them, and each node's merge patch."""

from __future__ import annotations

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.selectors import LABEL_KEY_PATTERN

_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", re.ASCII)
# the name part of a key is at most 63 characters, the prefix at most 253
_MAX_NAME, _MAX_PREFIX = 63, 253


def label_problems(labels) -> list:
    """Why the API server would refuse these labels (``key: value``, a null value removes the label), [] if none."""
    if not isinstance(labels, dict) or not labels:
        return ["labels must be a non-empty mapping of label keys to values (null removes a label)"]
    problems = []
    for key, value in labels.items():
        prefix, _slash, name = str(key).rpartition("/")
        if (not isinstance(key, str) or not LABEL_KEY_PATTERN.fullmatch(key) or len(name) > _MAX_NAME
                or len(prefix) > _MAX_PREFIX):
            problems.append("%r is not a label key (an optional DNS prefix and '/', then at most 63 of "
                            "[A-Za-z0-9-_.], starting and ending alphanumeric)" % (key,))
        elif value is not None and (not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value)):
            problems.append("%s: %r is not a label value (a string of at most 63 of [A-Za-z0-9-_.], starting and "
                            "ending alphanumeric, or empty; null removes the label)" % (key, value))
    return problems


def labels_patch(node: dict, labels: dict) -> dict:
    """The merge patch of ``metadata.labels`` that gives the node ``labels`` ({} when it has them already)."""
    current = (node.get("metadata") or {}).get("labels") or {}
    patch = {}
    for key, value in labels.items():
        if value is None and key in current:
            patch[key] = None
        elif value is not None and current.get(key) != value:
            patch[key] = value
    return patch


def previous_values(node: dict, keys) -> dict:
    """The node's values of ``keys`` now (null for absent): what puts the labels back."""
    current = (node.get("metadata") or {}).get("labels") or {}
    return dict((key, current.get(key)) for key in keys)
