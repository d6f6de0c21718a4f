# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Decisions of the prometheus_gate module, without I/O: reading Prometheus HTTP API answers (/api/v1/query,
/api/v1/alerts), comparing values with thresholds, filtering alerts with label matchers, the verdict and the soak
schedule. Every function fails closed: what it cannot read is a violation, never a pass.
"""

from __future__ import annotations

import json
import math
import operator
import re

OPERATORS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
# "each": every series must meet the threshold; the others reduce the series to one value first.
AGGREGATES = ("each", "sum", "min", "max", "avg", "count")

_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_MATCHER = re.compile(r'^\s*(%s)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\')\s*$' % _LABEL_NAME)
BODY_EXCERPT_CHARS = 200


class PrometheusAnswerError(Exception):
    """An answer that is not a successful Prometheus API answer; the message says what it was."""


# ---------------------------------------------------------------- reading answers


def parse_api_answer(http_status, body_text):
    """``(data, warnings)`` of a successful API answer; PrometheusAnswerError for an error answer or a body that is
    not one.

    Prometheus answers errors with JSON (``{"status": "error", "errorType": ..., "error": ...}``, HTTP 400, 422, 503);
    a proxy or a wrong path answers something else (``404 page not found``, an HTML login page). ``warnings`` are
    the answer's warning strings (PromQL annotations, a Thanos partial response), reported but not failing.
    """
    try:
        answer = json.loads(body_text)
    except ValueError:
        excerpt = " ".join((body_text or "").split())[:BODY_EXCERPT_CHARS]
        raise PrometheusAnswerError("HTTP %s, not a Prometheus API answer: %r" % (http_status, excerpt))
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise PrometheusAnswerError("HTTP %s, not a Prometheus API answer (no status field)" % http_status)
    if answer["status"] == "error":
        raise PrometheusAnswerError("HTTP %s, %s: %s" % (http_status, answer.get("errorType") or "error",
                                                         answer.get("error") or "no error message"))
    if http_status != 200:
        raise PrometheusAnswerError("HTTP %s with a success status" % http_status)
    if "data" not in answer:
        raise PrometheusAnswerError("HTTP %s, success without data" % http_status)
    warnings = answer.get("warnings") or []
    return answer["data"], [str(warning) for warning in warnings] if isinstance(warnings, list) else [str(warnings)]


def parse_sample_value(text):
    """A sample value as Prometheus writes it ("91", "7.9e+01", "NaN", "+Inf") as a float."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise PrometheusAnswerError("sample value %r is not a number" % (text,))


def parse_query_data(data):
    """Samples ``[{labels, value}]`` of /api/v1/query data: a vector gives one per series, a scalar one without
    labels. A string or a range vector (matrix) cannot be compared with a threshold: PrometheusAnswerError."""
    if not isinstance(data, dict):
        raise PrometheusAnswerError("query data is not an object")
    result_type, result = data.get("resultType"), data.get("result")
    if result_type == "vector" and isinstance(result, list):
        samples = []
        for series in result:
            try:
                labels, value = series["metric"], series["value"][1]
            except (KeyError, IndexError, TypeError):
                raise PrometheusAnswerError("vector series without metric or value: %r" % (series,))
            samples.append({"labels": dict(labels), "value": parse_sample_value(value)})
        return samples
    if result_type == "scalar" and isinstance(result, list) and len(result) == 2:
        return [{"labels": {}, "value": parse_sample_value(result[1])}]
    if result_type == "matrix":
        raise PrometheusAnswerError("the query returns a range vector (matrix); the gate needs an instant vector "
                                    "or a scalar: drop the [range] or wrap it in a function such as max_over_time()")
    if result_type == "string":
        raise PrometheusAnswerError("the query returns a string, not a number")
    raise PrometheusAnswerError("unknown result type %r" % (result_type,))


def parse_alerts_data(data):
    """Alerts ``[{name, state, labels, active_at, value}]`` of /api/v1/alerts data."""
    alerts = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(alerts, list):
        raise PrometheusAnswerError("alerts data without an alerts list")
    parsed = []
    for alert in alerts:
        labels = alert.get("labels") if isinstance(alert, dict) else None
        if not isinstance(labels, dict):
            raise PrometheusAnswerError("alert without labels: %r" % (alert,))
        parsed.append({"name": labels.get("alertname", ""), "state": alert.get("state"), "labels": dict(labels),
                       "active_at": alert.get("activeAt"), "value": alert.get("value")})
    return parsed


# ---------------------------------------------------------------- thresholds


def format_labels(labels):
    """``{Hostname="gpu-node-01", gpu="0"}``, the metric name left out; ``{}`` for a scalar or an aggregate."""
    return "{%s}" % ", ".join('%s="%s"' % (name, labels[name]) for name in sorted(labels) if name != "__name__")


def format_value(value):
    """91.0 -> "91", 0.5 -> "0.5", NaN -> "NaN", inf -> "+Inf" (Prometheus' spelling)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return ("%.6f" % value).rstrip("0").rstrip(".") if value != int(value) else "%d" % value


def json_value(value):
    """A value that JSON can carry: the float, or Prometheus' spelling of NaN and the infinities."""
    return value if math.isfinite(value) else format_value(value)


def meets_threshold(value, op, threshold):
    """``value op threshold``; NaN never meets any threshold (a NaN says the data is broken: fail closed)."""
    if math.isnan(value):
        return False
    return OPERATORS[op](value, threshold)


def aggregate_samples(samples, aggregate):
    """The samples a threshold is compared with: all of them for "each", else one sample without labels."""
    if aggregate == "each":
        return samples
    values = [sample["value"] for sample in samples]
    if aggregate == "count":
        reduced = float(len(values))
    elif aggregate == "sum":
        reduced = math.fsum(values)
    elif aggregate == "min":
        reduced = min(values)
    elif aggregate == "max":
        reduced = max(values)
    else:
        reduced = math.fsum(values) / len(values)
    # min/max/sum of values holding a NaN must stay NaN (Python's min/max would drop it depending on order)
    if aggregate != "count" and any(math.isnan(value) for value in values):
        reduced = float("nan")
    return [{"labels": {}, "value": reduced}]


def evaluate_query(spec, samples, warnings=()):
    """The verdict of one query spec (name, query, op, threshold, aggregate, required) on its samples."""
    result = query_result(spec)
    result["warnings"] = list(warnings)
    result["values"] = [{"labels": sample["labels"], "value": json_value(sample["value"])} for sample in samples]
    if not samples:
        if spec["required"]:
            result["passed"] = False
            result["violations"] = ["query %r (%s) returned no data; it is required to (set required: false when "
                                    "no series means healthy)" % (spec["name"], spec["query"])]
        return result
    for sample in aggregate_samples(samples, spec["aggregate"]):
        if not meets_threshold(sample["value"], spec["op"], spec["threshold"]):
            result["passed"] = False
            result["violations"].append("query %r: %s%s is %s, not %s %s" % (
                spec["name"], "" if spec["aggregate"] == "each" else spec["aggregate"] + " ",
                format_labels(sample["labels"]), format_value(sample["value"]), spec["op"],
                format_value(spec["threshold"])))
    return result


def failed_query(spec, reason):
    """The verdict of a query that could not be run or read: a violation naming the query."""
    result = query_result(spec)
    result["passed"] = False
    result["error"] = reason
    result["violations"] = ["query %r (%s) failed: %s" % (spec["name"], spec["query"], reason)]
    return result


def query_result(spec):
    return {"name": spec["name"], "query": spec["query"], "op": spec["op"], "threshold": spec["threshold"],
            "aggregate": spec["aggregate"], "required": spec["required"], "values": [], "passed": True,
            "error": None, "violations": [], "warnings": []}


def validate_query_specs(specs):
    """Error messages for query specs the argument spec cannot check: empty or duplicate names, empty queries,
    a threshold that is not a finite number."""
    errors, seen = [], set()
    for index, spec in enumerate(specs):
        name = (spec.get("name") or "").strip()
        if not name:
            errors.append("queries[%d]: name must not be empty" % index)
        elif name in seen:
            errors.append("queries[%d]: name %r is used twice; names must be unique" % (index, name))
        seen.add(name)
        if not (spec.get("query") or "").strip():
            errors.append("queries[%d] (%s): query must not be empty" % (index, name or "?"))
        threshold = spec.get("threshold")
        if threshold is None or not math.isfinite(threshold):
            errors.append("queries[%d] (%s): threshold must be a finite number" % (index, name or "?"))
    return errors


# ---------------------------------------------------------------- alerts


def parse_matcher(text):
    """``(label, op, value, compiled regex or None)`` of a label matcher as PromQL and Alertmanager write it
    (``severity="critical"``, ``alertname!~"Watchdog|InfoInhibitor"``); ValueError with the reason otherwise."""
    found = _MATCHER.match(text or "")
    if not found:
        raise ValueError("matcher %r is not label=\"value\" with one of =, !=, =~, !~" % (text,))
    label, op = found.group(1), found.group(2)
    quoted = found.group(3) if found.group(3) is not None else found.group(4)
    value = re.sub(r"\\(.)", r"\1", quoted)
    pattern = None
    if op in ("=~", "!~"):
        try:
            pattern = re.compile("^(?:%s)$" % value)  # anchored, as Prometheus anchors regex matchers
        except re.error as error:
            raise ValueError("matcher %r: invalid regular expression: %s" % (text, error))
    return label, op, value, pattern


def matcher_matches(matcher, labels):
    """A missing label matches as the empty string, as in Prometheus."""
    label, op, value, pattern = matcher
    actual = labels.get(label, "")
    if op == "=":
        return actual == value
    if op == "!=":
        return actual != value
    matched = pattern.match(actual) is not None
    return matched if op == "=~" else not matched


def matching_firing_alerts(alerts, names, matchers):
    """The firing alerts whose name is in ``names`` (any name when empty) and whose labels meet every matcher;
    pending alerts (still inside their ``for``) are not firing."""
    return [alert for alert in alerts
            if alert["state"] == "firing"
            and (not names or alert["name"] in names)
            and all(matcher_matches(matcher, alert["labels"]) for matcher in matchers)]


def alert_violations(firing):
    return ["alert %s is firing %s since %s" % (alert["name"], format_labels(
        dict((key, value) for key, value in alert["labels"].items() if key != "alertname")), alert["active_at"])
        for alert in firing]


# ---------------------------------------------------------------- verdict and soak


def verdict(query_results, alert_check):
    """``(passed, violations)`` of one evaluation. ``alert_check`` is None (alerts not checked) or a dict with
    ``firing`` (the matching firing alerts) and ``error`` (why the alerts could not be read, or None)."""
    violations = []
    for result in query_results:
        violations.extend(result["violations"])
    if alert_check is not None:
        if alert_check["error"]:
            violations.append("alerts could not be read: %s" % alert_check["error"])
        violations.extend(alert_violations(alert_check["firing"]))
    return not violations, violations


def seconds_until_next_evaluation(elapsed, duration, interval):
    """How long to sleep before the next evaluation of a soak that started ``elapsed`` seconds ago, or None when
    the soak is over. Evaluations run at 0, interval, 2 x interval, ... and always once at ``duration``."""
    if elapsed >= duration:
        return None
    next_tick = (math.floor(elapsed / interval) + 1) * interval
    return min(next_tick, duration) - elapsed
