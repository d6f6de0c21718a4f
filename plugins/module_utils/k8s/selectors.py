# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubernetes LabelSelector objects (``matchLabels`` + ``matchExpressions``): matching, query strings, and the
parser of a selector string that refuses what the API server would refuse."""

from __future__ import annotations

import re

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


# The label selector string syntax (k8s.io/apimachinery labels.Parse): terms joined by commas, each `key`, `!key`,
# `key=value` (or ==), `key!=value`, `key in (v1,v2)` or `key notin (v1,v2)`. A key is an optional DNS-subdomain
# prefix and '/' and a name of at most 63 characters; a value is such a name or empty. ASCII only.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?" + _LABEL_NAME
_TERM_SET = re.compile(r"(?P<key>%s)\s+(?P<operator>in|notin)\s*\((?P<values>[^()]*)\)" % _LABEL_KEY, re.ASCII)
_TERM_EQUALITY = re.compile(r"(?P<key>%s)\s*(?P<operator>==|=|!=)\s*(?P<value>(?:%s)?)" % (_LABEL_KEY, _LABEL_NAME),
                            re.ASCII)
_TERM_EXISTS = re.compile(r"(?P<negated>!?)\s*(?P<key>%s)" % _LABEL_KEY, re.ASCII)
_LABEL_VALUE = re.compile(r"(?:%s)?" % _LABEL_NAME, re.ASCII)
LABEL_KEY_PATTERN = re.compile(_LABEL_KEY, re.ASCII)


def parse_label_selector(text):
    """A label selector string as a LabelSelector dict's ``matchExpressions`` (``{key, operator, values}``; = and ==
    are In, != is NotIn); ``[]`` for the empty selector. Raises ValueError naming the first term that does not
    parse, as the API server would refuse it (HTTP 400) only once the selector is used."""
    if not isinstance(text, str):
        raise ValueError("a label selector is a string such as app=training,tier in (a,b), not %r" % (text,))
    return [_parse_term(term.strip()) for term in _top_level_terms(text)]


def _top_level_terms(text):
    terms, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    if text.strip():
        terms.append(text[start:])
    return terms


def _parse_term(term):
    match = _TERM_SET.fullmatch(term)
    if match:
        values = [value.strip() for value in match.group("values").split(",")]
        if not all(_LABEL_VALUE.fullmatch(value) for value in values):
            raise ValueError("%r has a value that is not a label value (letters, digits, '-', '_', '.', at most 63)"
                             % (term,))
        operator = "In" if match.group("operator") == "in" else "NotIn"
        return {"key": match.group("key"), "operator": operator, "values": values}
    match = _TERM_EQUALITY.fullmatch(term)
    if match:
        operator = "NotIn" if match.group("operator") == "!=" else "In"
        return {"key": match.group("key"), "operator": operator, "values": [match.group("value")]}
    match = _TERM_EXISTS.fullmatch(term)
    if match:
        return {"key": match.group("key"), "operator": "DoesNotExist" if match.group("negated") else "Exists"}
    raise ValueError("%r is not a selector term such as key, !key, key=value, key!=value, key in (a,b) or "
                     "key notin (a,b) (names: letters, digits, '-', '_', '.', at most 63)" % (term,))
