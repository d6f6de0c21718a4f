# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The audit trail's hash chain: sealing a record into a JSON line, appending it, verifying a file.

A line is the canonical JSON (sorted keys, no spaces, ASCII) of one record. Each record carries ``seq`` (1 on the
file's first line, then +1) and ``prev``, the sha256 of the previous line's bytes (the first line's ``prev`` is
``GENESIS``). With a key, ``hmac`` is the HMAC-SHA256 of the canonical record without ``hmac``. So an edited,
removed, inserted or reordered line breaks the link of the line after it (or its own seq/hmac/canonical form);
an edited last line is caught by the HMAC, and a cut-off tail by comparing with an anchored head digest
(``expected_head``: the digest printed at the end of each run and forwarded to syslog).

Pure Python, no Ansible imports: used by the ``gpuops.nvidia.audit`` callback and by the ``gpuops`` CLI.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os

GENESIS = "0" * 64
CHAIN_KEYS = ("seq", "prev", "hmac")
TAIL_CHUNK_BYTES = 65536


def canonical(record):
    """The one byte-exact text of a record (what is hashed, signed and written)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def line_digest(line):
    """sha256 hex of a line's text, without its newline."""
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


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


def append_record(path, record, hmac_key=None):
    """Seal ``record`` after the file's last line and append it (O_APPEND, under an exclusive lock so two runs
    from one bastion never chain to the same line). Returns the written line."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
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


def check_line(number, line, previous_line, hmac_key=None):
    """The reason line ``number`` (1-based) does not follow ``previous_line``, or None when it does."""
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
    if hmac_key:
        if "hmac" not in record:
            return "no hmac (the key was given)"
        if not hmac.compare_digest(record["hmac"], record_hmac(record, hmac_key)):
            return "hmac does not match: the line was edited"
    return None


def verify_lines(lines, hmac_key=None, expected_head=None):
    """Check a whole trail. ``lines``: the file's lines (newlines stripped, empty lines are errors except one
    trailing). Returns ``{"ok", "lines", "head", "first_bad": {"line", "reason"} or None, "hmac_checked"}``."""
    previous_line, count, first_bad = None, 0, None
    for number, line in enumerate(lines, start=1):
        count = number
        reason = check_line(number, line, previous_line, hmac_key) if line else "empty line"
        if reason:
            first_bad = _problem(number, reason)
            break
        previous_line = line
    head = line_digest(previous_line) if previous_line is not None else GENESIS
    if first_bad is None and expected_head and expected_head != head:
        first_bad = _problem(count + 1, "the trail ends at line %d whose digest %s is not the expected head %s: "
                                        "lines were removed from the end (or the last line edited)"
                             % (count, head, expected_head))
    return {"ok": first_bad is None, "lines": count, "head": head, "first_bad": first_bad,
            "hmac_checked": bool(hmac_key)}


def read_lines(path):
    """A trail file's lines without newlines (a final newline does not make an empty last line)."""
    with open(path, "rb") as stream:
        text = stream.read().decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n") if text else []


def verify_file(path, hmac_key=None, expected_head=None):
    return verify_lines(read_lines(path), hmac_key, expected_head)


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
