# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubernetes LabelSelector objects (``matchLabels`` + ``matchExpressions``): matching and query strings."""

from __future__ import annotations

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def matches(selector, labels):
    """Whether ``labels`` (a dict) satisfy ``selector`` (a LabelSelector dict).

    An empty selector matches everything and a missing one (None) matches nothing, as for policy/v1
    PodDisruptionBudgets and apps/v1 workloads.
    """
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key = expression.get("key")
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in _OPERATORS:
            raise ValueError("unknown label selector operator %r" % (operator,))
    return True


def to_query(selector):
    """The ``labelSelector`` query string of a LabelSelector dict, e.g. ``app=x,tier in (a,b),!debug``."""
    terms = ["%s=%s" % (key, value) for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key = expression.get("key")
        operator = expression.get("operator")
        values = ",".join(sorted(expression.get("values") or []))
        if operator == "In":
            terms.append("%s in (%s)" % (key, values))
        elif operator == "NotIn":
            terms.append("%s notin (%s)" % (key, values))
        elif operator == "Exists":
            terms.append(key)
        elif operator == "DoesNotExist":
            terms.append("!" + key)
        else:
            raise ValueError("unknown label selector operator %r" % (operator,))
    return ",".join(terms)
