# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the alertmanager_silence module decides, without I/O: the silences a node's maintenance needs (Alertmanager
API v2 matchers), the marker in their comment that says which run and node they belong to, which existing silences
are reused or expired, and how Alertmanager's answers read.

A silence's matchers must all match (AND); the labels that name a node differ between exporters, so a node is
silenced by several silences, one per matcher set (OR)."""

from __future__ import annotations

import json
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_micro_time, parse_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import parse_matcher

# node-exporter's instance is "<host>:9100" when scraped as is, the node name after kube-prometheus' relabelling;
# dcgm-exporter 4.x puts the node name (its NODE_NAME) in Hostname; kube-state-metrics and kubelet alerts carry node
DEFAULT_NODE_MATCHERS = ('instance=~"{node}(:[0-9]+)?"', 'Hostname="{node}"', 'node="{node}"')

MARKER = re.compile(r"\[gpuops\.nvidia node=(\S+?) run=(\S+?)\]")
LIVE_STATES = ("active", "pending")
BODY_EXCERPT_CHARS = 200
# a silence is extended when it would end more than this share of the wanted duration too early (a resumed run)
EXTEND_SLACK_SHARE = 0.1
EXTEND_SLACK_MIN_S = 60
_TOKEN = re.compile(r"^[^\s\[\]]+$")


class AlertmanagerAnswerError(Exception):
    """Alertmanager could not be reached or did not answer as its API does; the message is one line."""


def default_matcher_sets(node):
    """One matcher set per label that names a node in the usual exporters' alerts."""
    return [[text.format(node=node)] for text in DEFAULT_NODE_MATCHERS]


def api_matcher(text):
    """Alertmanager API v2 matcher of ``label="value"`` (``=``, ``!=``, ``=~``, ``!~``); ValueError otherwise."""
    label, op, value, _pattern = parse_matcher(text)
    return {"name": label, "value": value, "isRegex": op in ("=~", "!~"), "isEqual": op in ("=", "=~")}


def matches_empty(text):
    """Whether the matcher ``text`` matches a missing label (the empty string)."""
    _label, op, value, pattern = parse_matcher(text)
    if op in ("=", "!="):
        return (value == "") == (op == "=")
    return bool(pattern.match("")) == (op == "=~")


def normalize_matcher_sets(raw_sets):
    """``(sets, errors)``: each element of ``raw_sets`` (a matcher string or a list of them) as a list of strings,
    and every problem found (Alertmanager refuses a silence whose matchers all match the empty string)."""
    sets, errors = [], []
    for index, raw in enumerate(raw_sets or []):
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(text, str) for text in texts):
            errors.append("matchers[%d] must be a matcher string or a non-empty list of them, got %r" % (index, raw))
            continue
        problems = []
        for text in texts:
            try:
                parse_matcher(text)
            except ValueError as error:
                problems.append(str(error))
        if not problems and all(matches_empty(text) for text in texts):
            problems.append("every matcher matches an empty label, so it would silence everything else too")
        if problems:
            errors.append("matchers[%d]: %s" % (index, "; ".join(problems)))
        else:
            sets.append([text.strip() for text in texts])
    return sets, errors


def validate_token(name, value):
    """An error message when ``value`` (a node name, a run id) cannot sit in the comment's marker, else None."""
    if not value or not _TOKEN.match(value):
        return "%s must be non-empty, without spaces or brackets, got %r" % (name, value)
    return None


def marker(node, run_id):
    return "[gpuops.nvidia node=%s run=%s]" % (node, run_id)


def comment_of(text, node, run_id):
    """The silence's comment: the operator-facing text, then the marker this module finds its silences by."""
    text = (text or "").strip()
    return ("%s %s" % (text, marker(node, run_id))) if text else marker(node, run_id)


def owner_of(comment):
    """``(node, run_id)`` from a comment's marker, or None for a silence this collection did not make."""
    found = MARKER.search(comment or "")
    return (found.group(1), found.group(2)) if found else None


def matcher_key(matchers):
    """A comparable form of API matchers (order and a missing isEqual, i.e. Alertmanager before 0.22, ignored)."""
    return sorted((item["name"], item["value"], bool(item.get("isRegex")), item.get("isEqual", True) is not False)
                  for item in matchers)


def silence_body(matcher_texts, node, run_id, created_by, comment, now, duration_s, silence_id=None,
                 starts_at=None):
    """The JSON body of ``POST /api/v2/silences``: a new silence from ``now`` for ``duration_s``, or with
    ``silence_id`` (and its ``starts_at``) the same silence ending later."""
    body = {
        "matchers": [api_matcher(text) for text in matcher_texts],
        "startsAt": starts_at or format_micro_time(now),
        "endsAt": format_micro_time(now + duration_s),
        "createdBy": created_by,
        "comment": comment_of(comment, node, run_id),
    }
    if silence_id:
        body["id"] = silence_id
    return body


def filter_params(matcher_texts):
    """The ``filter`` query values of ``GET /api/v2/silences`` that narrow the answer to the silences holding these
    matchers' equality matchers (Alertmanager compares a filter only with a silence's equality matchers, so regex
    and negative matchers are left to plan_present); empty when the set has none (every silence comes back)."""
    params = []
    for text in matcher_texts:
        item = api_matcher(text)
        if item["isRegex"] or not item["isEqual"]:
            continue
        escaped = item["value"].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        params.append(("filter", '%s="%s"' % (item["name"], escaped)))
    return params


def parse_silences(http_status, body_text):
    """The silences of a ``GET /api/v2/silences`` answer; AlertmanagerAnswerError otherwise."""
    data = parse_answer(http_status, body_text)
    if not isinstance(data, list) or not all(isinstance(item, dict) and "id" in item for item in data):
        raise AlertmanagerAnswerError("the silences answer is not a list of silences: %s" % excerpt(body_text))
    return data


def parse_created_id(http_status, body_text):
    """The ``silenceID`` of a ``POST /api/v2/silences`` answer; AlertmanagerAnswerError otherwise."""
    data = parse_answer(http_status, body_text)
    if not isinstance(data, dict) or not data.get("silenceID"):
        raise AlertmanagerAnswerError("the answer to the new silence has no silenceID: %s" % excerpt(body_text))
    return data["silenceID"]


def check_expired(http_status, body_text, silence_id):
    """Nothing when ``DELETE /api/v2/silence/{id}`` expired it (Alertmanager 0.25 also answers 200 for one already
    expired) or it is gone meanwhile (garbage-collected: HTTP 500 "silence not found"); AlertmanagerAnswerError
    otherwise."""
    if 200 <= http_status < 300:
        return
    if http_status == 500 and ("not found" in (body_text or "") or "already expired" in (body_text or "")):
        return
    raise AlertmanagerAnswerError("expiring silence %s: HTTP %d: %s" % (silence_id, http_status, excerpt(body_text)))


def parse_answer(http_status, body_text):
    """The JSON of a 2xx answer; AlertmanagerAnswerError naming the status and Alertmanager's message otherwise."""
    if not 200 <= http_status < 300:
        raise AlertmanagerAnswerError("HTTP %d: %s" % (http_status, excerpt(body_text)))
    try:
        return json.loads(body_text)
    except ValueError:
        raise AlertmanagerAnswerError("the answer is not JSON (not an Alertmanager API v2?): %s" % excerpt(body_text))


def excerpt(body_text):
    """The start of an answer on one line (an error's JSON string unquoted)."""
    text = (body_text or "").strip()
    try:
        decoded = json.loads(text)
        if isinstance(decoded, str):
            text = decoded
        elif isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            text = decoded["message"]
    except ValueError:
        pass
    text = " ".join(text.split())
    return (text[:BODY_EXCERPT_CHARS] + "...") if len(text) > BODY_EXCERPT_CHARS else (text or "(empty body)")


def is_live(silence):
    return (silence.get("status") or {}).get("state") in LIVE_STATES


def summary(silence, action):
    """What the module returns per silence."""
    return {
        "id": silence["id"],
        "action": action,
        "matchers": [format_matcher(item) for item in silence.get("matchers") or []],
        "starts_at": silence.get("startsAt"),
        "ends_at": silence.get("endsAt"),
        "created_by": silence.get("createdBy"),
        "comment": silence.get("comment"),
    }


def format_matcher(item):
    op = {(False, True): "=", (False, False): "!=", (True, True): "=~", (True, False): "!~"}[
        (bool(item.get("isRegex")), item.get("isEqual", True) is not False)]
    return '%s%s"%s"' % (item["name"], op, item["value"].replace("\\", "\\\\").replace('"', '\\"'))


def plan_present(matcher_sets, found_per_set, node, run_id, now, duration_s):
    """Per matcher set, in order: ``("reuse", silence)``, ``("extend", silence)`` (a live silence of this run for
    this node with these matchers, ending too early for ``duration_s`` from ``now``) or ``("create", None)``.
    ``found_per_set[i]`` is what Alertmanager returned for set i (the filtered GET)."""
    slack = max(EXTEND_SLACK_MIN_S, duration_s * EXTEND_SLACK_SHARE)
    steps = []
    for texts, found in zip(matcher_sets, found_per_set):
        wanted = matcher_key([api_matcher(text) for text in texts])
        ours = [silence for silence in found
                if is_live(silence) and owner_of(silence.get("comment")) == (node, run_id)
                and matcher_key(silence.get("matchers") or []) == wanted]
        if not ours:
            steps.append(("create", None))
            continue
        latest = max(ours, key=lambda silence: parse_time(silence.get("endsAt")) or 0)
        ends = parse_time(latest.get("endsAt")) or 0
        steps.append(("extend" if ends < now + duration_s - slack else "reuse", latest))
    return steps


def silences_to_expire(silences, node, run_id=None):
    """The live silences this collection made for ``node`` (of the run ``run_id`` only, when given)."""
    chosen = []
    for silence in silences:
        owner = owner_of(silence.get("comment"))
        if is_live(silence) and owner and owner[0] == node and (run_id is None or owner[1] == run_id):
            chosen.append(silence)
    return sorted(chosen, key=lambda silence: silence["id"])
