"""Label and field selectors with the Kubernetes syntax.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a`` (exists), ``!a``
(does not exist), joined with commas. Field selectors: ``path=value``, ``path==value``, ``path!=value``
joined with commas, where path is a dotted JSON path (``spec.nodeName``, ``involvedObject.name``).
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple


class SelectorError(ValueError):
    """A selector string or object that cannot be parsed."""


Requirement = Tuple[str, str, Tuple[str, ...]]   # (key, operator, values)

_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQUALITY_REQUIREMENT = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_REQUIREMENT = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _split_top_level(text: str) -> List[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def _parse_requirement(text: str) -> Requirement:
    match = _SET_REQUIREMENT.match(text)
    if match:
        values = tuple(value.strip() for value in match.group(3).split(",") if value.strip())
        return match.group(1), match.group(2), values
    match = _EQUALITY_REQUIREMENT.match(text)
    if match:
        operator = "!=" if match.group(2) == "!=" else "="
        return match.group(1), operator, (match.group(3),)
    match = _EXISTS_REQUIREMENT.match(text)
    if match:
        return match.group(2), ("!" if match.group(1) else "exists"), ()
    raise SelectorError("unable to parse requirement: %r" % text.strip())


def _requirement_matches(requirement: Requirement, labels: Dict[str, str]) -> bool:
    key, operator, values = requirement
    present = key in labels
    if operator == "=":
        return present and labels[key] == values[0]
    if operator == "!=":
        return not present or labels[key] != values[0]
    if operator == "in":
        return present and labels[key] in values
    if operator == "notin":
        return not present or labels[key] not in values
    if operator == "exists":
        return present
    return not present   # "!"


class LabelSelector:
    """A parsed label selector; ``matches(labels)`` answers for one label map."""

    def __init__(self, requirements: List[Requirement], match_nothing: bool = False):
        self.requirements = requirements
        self.match_nothing = match_nothing

    def matches(self, labels: Optional[Dict[str, str]]) -> bool:
        if self.match_nothing:
            return False
        labels = labels or {}
        return all(_requirement_matches(requirement, labels) for requirement in self.requirements)


def parse_label_selector(text: Optional[str]) -> LabelSelector:
    """Parse the string form (query parameter ``labelSelector``); empty or None matches everything."""
    if not text or not text.strip():
        return LabelSelector([])
    return LabelSelector([_parse_requirement(part) for part in _split_top_level(text)])


_EXPRESSION_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_object(selector: Optional[dict]) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` object (matchLabels / matchExpressions).

    As in the API server, a null selector matches nothing and an empty one (``{}``) matches everything.
    """
    if selector is None:
        return LabelSelector([], match_nothing=True)
    requirements: List[Requirement] = []
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        requirements.append((key, "=", (str(value),)))
    for expression in selector.get("matchExpressions") or []:
        operator = _EXPRESSION_OPERATORS.get(expression.get("operator", ""))
        if operator is None:
            raise SelectorError("%r is not a valid label selector operator" % expression.get("operator"))
        requirements.append((expression["key"], operator, tuple(expression.get("values") or ())))
    return LabelSelector(requirements)


FieldRequirement = Tuple[str, bool, str]   # (dotted path, must_equal, value)


def _field_value(obj: dict, path: str) -> str:
    value = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: Optional[str]) -> Callable[[dict], bool]:
    """Parse ``fieldSelector``; returns a predicate on whole objects. Missing fields compare as ``""``
    (``spec.nodeName=`` selects unscheduled pods), booleans as ``true``/``false``."""
    if not text or not text.strip():
        return lambda obj: True
    requirements: List[FieldRequirement] = []
    for part in _split_top_level(text):
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match:
            raise SelectorError("invalid field selector: %r" % part.strip())
        requirements.append((match.group(1), match.group(2) != "!=", match.group(3)))

    def matches(obj: dict) -> bool:
        for path, must_equal, value in requirements:
            if (_field_value(obj, path) == value) != must_equal:
                return False
        return True

    return matches


def field_selector_name(text: Optional[str]) -> Optional[str]:
    """The name from a ``metadata.name=X`` field selector, so lookups by name avoid a full scan."""
    if not text:
        return None
    for part in _split_top_level(text):
        match = re.match(r"^\s*metadata\.name\s*==?\s*(\S+)\s*$", part)
        if match:
            return match.group(1)
    return None
