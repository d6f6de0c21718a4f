# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The audit trail's hash chain: sealing a record into a JSON line, appending it, verifying a file against the
HMAC key and against anchors.

Public and versioned (``API_VERSION``): the ``gpuops.nvidia.audit`` callback and the ``gpuops`` runner import it,
and so may an auditor's own tools (``from ansible_collections.gpuops.nvidia.plugins.module_utils.audit import
chain``). docs/audit.md describes the functions, the line format and the verify rules; a change to any of them
raises ``API_VERSION`` and is named in the changelog.

A line is the canonical JSON (sorted keys, no spaces, ASCII) of one record. Each record carries ``seq`` (1 on the
file's first line, then +1) and ``prev``, the sha256 of the previous line's text (the first line's ``prev`` is
``GENESIS``). With a key, ``kid`` names the key (``key_id``) and ``hmac`` is the HMAC-SHA256 of the canonical
record without ``hmac``. An edited, removed, inserted or reordered line breaks the link of the line after it (or
its own seq/hmac/canonical form); an anchor (the digest of a line, kept where the operator cannot rewrite it:
syslog, the run report) catches a cut-off tail and a rewritten chain without the key.

Pure Python, no Ansible imports.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re

API_VERSION = 2
GENESIS = "0" * 64
CHAIN_KEYS = ("seq", "prev", "kid", "hmac")
TAIL_CHUNK_BYTES = 65536
KEY_ID_MESSAGE = b"gpuops.nvidia audit key id"
KEY_ID_CHARS = 16
# What a syslog copy of the trail holds: the forwarded line after the tag (forward.TAG).
FORWARDED_LINE = re.compile(r"gpuops-audit: (\{.*\})\s*$")
DIGEST = re.compile(r"^[0-9a-f]{64}$")


def canonical(record):
    """The one byte-exact text of a record (what is hashed, signed and written)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def line_digest(line):
    """sha256 hex of a line's text, without its newline."""
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


def key_id(key):
    """A short public name of an HMAC key (an HMAC of a fixed text): tells a wrong key from an edited line."""
    return hmac.new(key, KEY_ID_MESSAGE, hashlib.sha256).hexdigest()[:KEY_ID_CHARS]


def record_hmac(record, key):
    unsigned = dict((name, value) for name, value in record.items() if name != "hmac")
    return hmac.new(key, canonical(unsigned).encode("utf-8"), hashlib.sha256).hexdigest()


def _seq_of(line):
    """The seq of a line; 0 for a line that is not a record (verify names it; appending still chains to it)."""
    try:
        seq = json.loads(line).get("seq")
    except (ValueError, AttributeError):
        return 0
    return seq if isinstance(seq, int) else 0


def seal(record, previous_line, hmac_key=None):
    """The line for ``record`` appended after ``previous_line`` (None on an empty file)."""
    if previous_line is None:
        seq, prev = 1, GENESIS
    else:
        seq, prev = _seq_of(previous_line) + 1, line_digest(previous_line)
    sealed = dict((name, value) for name, value in record.items() if name not in CHAIN_KEYS)
    sealed["seq"] = seq
    sealed["prev"] = prev
    if hmac_key:
        sealed["kid"] = key_id(hmac_key)
        sealed["hmac"] = record_hmac(sealed, hmac_key)
    return canonical(sealed)


def read_last_line(fd):
    """The last non-empty line of an open file (read from its end), or None for an empty file."""
    end = os.lseek(fd, 0, os.SEEK_END)
    tail, position = b"", end
    while position > 0:
        step = min(TAIL_CHUNK_BYTES, position)
        position -= step
        os.lseek(fd, position, os.SEEK_SET)
        tail = os.read(fd, step) + tail
        stripped = tail.rstrip(b"\n")
        if b"\n" in stripped or position == 0:
            return stripped.rsplit(b"\n", 1)[-1].decode("utf-8") or None
    return None


def open_for_append(path):
    """The trail opened for appending (created 0600). Raises OSError when it cannot be written: callers check
    this before a run changes anything."""
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)


def check_writable(path):
    """Raise OSError (with the reason) unless ``path`` can be appended to; creates an empty trail when absent."""
    os.close(open_for_append(path))


def append_record(path, record, hmac_key=None):
    """Seal ``record`` after the file's last line and append it (O_APPEND, under an exclusive lock so two runs
    from one bastion never chain to the same line). Returns the written line; raises OSError when it cannot."""
    fd = open_for_append(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        line = seal(record, read_last_line(fd), hmac_key)
        os.write(fd, (line + "\n").encode("utf-8"))
        os.fsync(fd)
        return line
    finally:
        os.close(fd)


def _problem(number, reason):
    return {"line": number, "reason": reason}


def check_link(number, line, previous_line):
    """The reason line ``number`` (1-based) does not follow ``previous_line`` in the chain, or None."""
    try:
        record = json.loads(line)
    except ValueError as error:
        return "not JSON (%s)" % error
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int) or "prev" not in record:
        return "not an audit record (no seq/prev)"
    if canonical(record) != line:
        return "not in canonical form (edited by hand?)"
    expected_seq = 1 if previous_line is None else _seq_of(previous_line) + 1
    expected_prev = GENESIS if previous_line is None else line_digest(previous_line)
    if record["prev"] != expected_prev:
        if previous_line is None:
            return "first line does not start the chain (prev is not the genesis digest): lines removed before it?"
        return ("prev does not match the sha256 of line %d: line %d was edited, or lines were removed, inserted "
                "or reordered here" % (number - 1, number - 1))
    if record["seq"] != expected_seq:
        return "seq %d where %d was expected" % (record["seq"], expected_seq)
    return None


def signature_state(record, hmac_key, our_key_id):
    """How a record stands against the key: unsigned, other_key (signed with a key of another id), good, or
    edited (signed with this key, the HMAC does not match)."""
    if "hmac" not in record:
        return "unsigned"
    if record.get("kid") is not None and record.get("kid") != our_key_id:
        return "other_key"
    if hmac.compare_digest(str(record["hmac"]), record_hmac(record, hmac_key)):
        return "good"
    return "edited" if record.get("kid") is not None else "legacy_mismatch"


def _ranges(numbers):
    """[1, 2, 3, 7] -> [[1, 3], [7, 7]]."""
    found = []
    for number in numbers:
        if found and found[-1][1] == number - 1:
            found[-1][1] = number
        else:
            found.append([number, number])
    return found


def verify_lines(lines, hmac_key=None, anchors=(), allow_unsigned=False, require_anchored_head=False):
    """Check a whole trail: the chain, the HMAC of each line (with a key) and the anchors.

    ``lines``: the file's lines (newlines stripped; an empty line is an error). ``anchors``: digests of lines
    kept elsewhere (a run's head, a syslog copy); each must be the head of some prefix of the trail (GENESIS is
    the empty prefix), so an older genuine anchor verifies too. Returns ``{"ok", "lines", "head", "first_bad":
    {"line", "reason"} or None, "key_error": text or None, "hmac_checked", "unsigned": [[first, last], ...],
    "other_key": ranges, "anchored_to": the newest anchored line (None without anchors)}``.

    Rules: tampering (a broken link, a line signed with this key whose HMAC does not match, an anchor that is the
    head of no prefix) is ``first_bad``, the earliest such line. Key problems are ``key_error``, never an edit: a
    key no signed line was written with (wrong key), and, with a key, lines written without one (``unsigned``) or
    with a key of another id (``other_key``, a rotated key): they are listed and checked for their links, and the
    keyed lines after them are still checked; ``allow_unsigned`` accepts them. ``require_anchored_head`` fails
    lines after the newest anchor.
    """
    our_key_id = key_id(hmac_key) if hmac_key else None
    previous_line, count, first_bad = None, 0, None
    digests = {GENESIS: 0}
    states = {"unsigned": [], "other_key": [], "good": [], "edited": [], "legacy_mismatch": []}
    for number, line in enumerate(lines, start=1):
        count = number
        reason = check_link(number, line, previous_line) if line else "empty line"
        if reason:
            first_bad = _problem(number, reason)
            break
        record = json.loads(line)
        if hmac_key:
            states[signature_state(record, hmac_key, our_key_id)].append(number)
        elif "hmac" not in record:
            states["unsigned"].append(number)
        digests[line_digest(line)] = number
        previous_line = line
    head = line_digest(previous_line) if previous_line is not None else GENESIS
    key_error = None
    if hmac_key:
        signed_with_ours = states["good"] + states["edited"]
        if states["legacy_mismatch"] and not states["good"]:
            key_error = ("wrong key: no line signed before key ids were recorded verifies with it (first at line "
                         "%d)" % states["legacy_mismatch"][0])
        elif not signed_with_ours and states["other_key"] and not states["legacy_mismatch"]:
            key_error = ("wrong key: the signed lines carry other key ids (line %d), none the given key's id %s"
                         % (states["other_key"][0], our_key_id))
        edited = sorted(states["edited"] + (states["legacy_mismatch"] if states["good"] else []))
        if edited and (first_bad is None or edited[0] < first_bad["line"]):
            first_bad = _problem(edited[0], "hmac does not match: the line was edited")
    anchored_to = None
    for anchor in anchors or ():
        anchor = str(anchor).strip().lower()
        if anchor not in digests:
            if first_bad is None:
                first_bad = _problem(count + 1, "anchor %s is the head of no prefix of the trail: lines were removed "
                                                "from the end, or the trail was rewritten at or before the anchored "
                                                "line" % anchor)
            continue
        anchored_to = max(anchored_to or 0, digests[anchor])
    if first_bad is None and require_anchored_head and anchors and anchored_to != count:
        first_bad = _problem((anchored_to or 0) + 1, "lines %d-%d follow the newest anchor (line %d): appended "
                                                     "after the last anchored run" % ((anchored_to or 0) + 1, count,
                                                                                      anchored_to or 0))
    unsigned, other_key = _ranges(states["unsigned"]), _ranges(states["other_key"])
    if hmac_key and key_error is None and not allow_unsigned and (unsigned or other_key):
        key_error = "lines not signed with the given key: %s" % "; ".join(
            ["%s unsigned (written without a key, or rewritten by someone without it)" % _describe(unsigned)]
            * bool(unsigned) + ["%s signed with another key" % _describe(other_key)] * bool(other_key))
    return {"ok": first_bad is None and key_error is None, "lines": count, "head": head, "first_bad": first_bad,
            "key_error": key_error, "hmac_checked": bool(hmac_key), "unsigned": unsigned,
            "other_key": other_key if hmac_key else [], "anchored_to": anchored_to}


def _describe(ranges):
    return ", ".join("line %d" % first if first == last else "lines %d-%d" % (first, last) for first, last in ranges)


def anchors_from_text(text):
    """The anchors a text gives: each line that is a digest, and the digest of each trail line it carries after
    the syslog tag ``gpuops-audit:`` (a syslog or journald export)."""
    found = []
    for line in text.splitlines():
        stripped = line.strip().lower()
        if DIGEST.match(stripped):
            found.append(stripped)
            continue
        match = FORWARDED_LINE.search(line)
        if match:
            found.append(line_digest(match.group(1)))
    return found


def read_lines(path):
    """A trail file's lines without newlines (a final newline does not make an empty last line)."""
    with open(path, "rb") as stream:
        text = stream.read().decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n") if text else []


def verify_file(path, hmac_key=None, anchors=(), allow_unsigned=False, require_anchored_head=False):
    return verify_lines(read_lines(path), hmac_key, anchors, allow_unsigned, require_anchored_head)


def read_records(path, run_id=None):
    """The records of a trail (parsed; lines that are not JSON skipped), optionally only those of one run."""
    records = []
    for line in read_lines(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and (run_id is None or record.get("run_id") == run_id):
            records.append(record)
    return records
