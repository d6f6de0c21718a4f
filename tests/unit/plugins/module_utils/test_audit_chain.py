# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The audit hash chain: every kind of tampering is detected and the first bad line is named."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.chain import (
    GENESIS, anchors_from_text, append_record, canonical, check_writable, key_id, line_digest, read_last_line,
    read_lines, read_records, seal, verify_file, verify_lines,
)

KEY = b"audit-test-key"


def trail(count=6, key=None):
    lines, previous = [], None
    for number in range(count):
        previous = seal({"event": "task", "host": "gpu-node-%02d" % number, "run_id": "r1"}, previous, key)
        lines.append(previous)
    return lines


def test_an_untouched_trail_verifies_and_reports_its_head():
    lines = trail()
    verdict = verify_lines(lines)
    assert verdict == {"ok": True, "lines": 6, "head": line_digest(lines[-1]), "first_bad": None,
                       "key_error": None, "hmac_checked": False, "unsigned": [[1, 6]], "other_key": [],
                       "anchored_to": None}


def test_first_line_chains_to_genesis_and_each_line_to_the_sha256_of_the_previous_one():
    lines = trail(3)
    records = [json.loads(line) for line in lines]
    assert records[0]["prev"] == GENESIS and records[0]["seq"] == 1
    assert records[1]["prev"] == line_digest(lines[0]) and records[2]["prev"] == line_digest(lines[1])
    assert [record["seq"] for record in records] == [1, 2, 3]


def test_sealing_ignores_chain_fields_the_caller_passes():
    line = seal({"event": "x", "seq": 99, "prev": "forged", "hmac": "forged"}, None)
    assert json.loads(line) == {"event": "x", "seq": 1, "prev": GENESIS}


def test_edited_line_is_named_by_the_broken_link_after_it():
    lines = trail()
    record = json.loads(lines[2])
    record["host"] = "gpu-node-99"
    lines[2] = canonical(record)
    verdict = verify_lines(lines)
    assert not verdict["ok"]
    assert verdict["first_bad"]["line"] == 4 and "line 3 was edited" in verdict["first_bad"]["reason"]


def test_hand_edit_that_breaks_the_canonical_form_is_named_at_the_edited_line():
    lines = trail()
    lines[1] = lines[1].replace('"event":"task"', '"event": "task"')
    assert verify_lines(lines)["first_bad"] == {"line": 2, "reason": "not in canonical form (edited by hand?)"}


def test_removed_line_is_detected_where_the_chain_breaks():
    lines = trail()
    del lines[3]
    verdict = verify_lines(lines)
    assert verdict["first_bad"]["line"] == 4 and "prev does not match" in verdict["first_bad"]["reason"]


def test_removed_first_line_is_detected():
    verdict = verify_lines(trail()[1:])
    assert verdict["first_bad"]["line"] == 1 and "genesis" in verdict["first_bad"]["reason"]


def test_inserted_line_is_detected_even_when_it_is_chained_to_its_predecessor():
    lines = trail()
    forged = seal({"event": "task", "host": "intruder"}, lines[1])
    lines.insert(2, forged)
    verdict = verify_lines(lines)
    assert verdict["first_bad"]["line"] == 4


def test_reordered_lines_are_detected():
    lines = trail()
    lines[2], lines[3] = lines[3], lines[2]
    verdict = verify_lines(lines)
    assert verdict["first_bad"]["line"] == 3


def test_rewritten_chain_from_an_edit_onwards_passes_without_key_but_fails_with_hmac():
    keyed = trail(key=KEY)
    record = json.loads(keyed[2])
    record["host"] = "gpu-node-99"
    rewritten = keyed[:2]
    for line in [canonical(record)] + keyed[3:]:
        rewritten.append(seal(json.loads(line), rewritten[-1]))  # the forger has no key: no hmac
    assert verify_lines(rewritten)["ok"]
    verdict = verify_lines(rewritten, hmac_key=KEY)
    assert not verdict["ok"] and verdict["unsigned"] == [[3, 6]]
    assert verdict["key_error"].startswith("lines not signed with the given key: lines 3-6 unsigned")


def test_hmac_catches_an_edit_of_the_last_line():
    lines = trail(key=KEY)
    record = json.loads(lines[-1])
    record["host"] = "elsewhere"
    lines[-1] = canonical(record)
    assert verify_lines(lines)["ok"]  # nothing chains to the last line
    assert verify_lines(lines, hmac_key=KEY)["first_bad"] == {"line": 6,
                                                              "reason": "hmac does not match: the line was edited"}


def test_a_wrong_key_is_named_as_a_key_error_not_as_an_edited_line():
    verdict = verify_lines(trail(key=KEY), hmac_key=b"other")
    assert not verdict["ok"] and verdict["first_bad"] is None
    assert verdict["key_error"].startswith("wrong key: the signed lines carry other key ids (line 1)")
    assert json.loads(trail(key=KEY)[0])["kid"] == key_id(KEY) != key_id(b"other")


def test_lines_of_a_run_without_the_key_are_reported_unsigned_and_later_keyed_lines_still_checked():
    lines = trail(2, key=KEY)
    for number, key in ((2, None), (3, None), (4, KEY), (5, KEY)):
        lines.append(seal({"event": "task", "n": number}, lines[-1], key))
    verdict = verify_lines(lines, hmac_key=KEY)
    assert verdict["first_bad"] is None and verdict["unsigned"] == [[3, 4]]
    assert verdict["key_error"] == ("lines not signed with the given key: lines 3-4 unsigned (written without a "
                                    "key, or rewritten by someone without it)")
    assert verify_lines(lines, hmac_key=KEY, allow_unsigned=True)["ok"]
    record = json.loads(lines[5])
    record["n"] = 99
    lines[5] = canonical(record)          # the last line edited, its kid and hmac kept
    edited = verify_lines(lines, hmac_key=KEY, allow_unsigned=True)
    assert edited["first_bad"] == {"line": 6, "reason": "hmac does not match: the line was edited"}


def test_a_rotated_key_reads_as_other_key_lines_not_as_edits():
    lines = trail(2, key=b"old-key")
    lines.append(seal({"event": "task"}, lines[-1], KEY))
    verdict = verify_lines(lines, hmac_key=KEY)
    assert verdict["first_bad"] is None and verdict["other_key"] == [[1, 2]]
    assert "lines 1-2 signed with another key" in verdict["key_error"]
    assert verify_lines(lines, hmac_key=KEY, allow_unsigned=True)["ok"]


def forged(lines, change):
    """``lines`` changed by ``change`` and re-chained from the first changed line on, as a forger without the key
    would (seal without a key drops kid and hmac)."""
    changed = change(list(lines))
    unchanged = min(len(lines), len(changed))
    first = next((index for index, (old, new) in enumerate(zip(lines, changed)) if old != new), unchanged)
    rewritten = changed[:first]
    for line in changed[first:]:
        rewritten.append(seal(json.loads(line), rewritten[-1] if rewritten else None))
    return rewritten


def edit_host(index):
    def change(lines):
        record = json.loads(lines[index])
        record["host"] = "elsewhere"
        lines[index] = canonical(record)
        return lines
    return change


@pytest.mark.parametrize("name, change", [
    ("truncated tail", lambda lines: lines[:-2]),
    ("edited last line", edit_host(-1)),
    ("fully re-chained after an edit", edit_host(1)),
    ("forged line appended after the anchored head, then the head line edited", lambda lines: edit_host(-1)(
        lines) + [seal({"event": "task", "host": "forged"}, lines[-1])]),
])
def test_an_anchor_catches_truncation_and_forgery_without_the_key(name, change):
    lines = trail()
    head = line_digest(lines[-1])
    assert verify_lines(forged(lines, change))["ok"], name          # the chain alone cannot tell
    verdict = verify_lines(forged(lines, change), anchors=[head])
    assert not verdict["ok"] and "is the head of no prefix" in verdict["first_bad"]["reason"], name


def test_an_appended_forged_line_is_caught_when_the_newest_anchor_must_be_the_head():
    lines = trail()
    anchors = [line_digest(lines[-1])]
    lines.append(seal({"event": "task", "host": "forged"}, lines[-1]))
    assert verify_lines(lines, anchors=anchors)["anchored_to"] == 6
    verdict = verify_lines(lines, anchors=anchors, require_anchored_head=True)
    assert verdict["first_bad"]["line"] == 7 and "follow the newest anchor" in verdict["first_bad"]["reason"]


def test_every_older_genuine_anchor_verifies_as_the_head_of_a_prefix():
    lines = trail()
    anchors = [GENESIS] + [line_digest(line) for line in lines]
    verdict = verify_lines(lines, anchors=anchors)
    assert verdict["ok"] and verdict["anchored_to"] == 6
    assert verify_lines(lines, anchors=[line_digest(lines[2])])["anchored_to"] == 3


def test_anchors_are_read_from_a_syslog_export_and_a_list_of_heads():
    lines = trail(3)
    export = "\n".join(["Dec  3 01:00:00 bastion gpuops-audit: %s" % line for line in lines[:2]]
                       + ["  %s  " % line_digest(lines[2]).upper(), "unrelated line", ""])
    assert anchors_from_text(export) == [line_digest(line) for line in lines]


def test_a_trail_that_cannot_be_written_is_named_before_a_run(tmp_path):
    check_writable(str(tmp_path / "audit.jsonl"))
    assert os.path.exists(tmp_path / "audit.jsonl")
    with pytest.raises(OSError):
        check_writable(str(tmp_path))
    with pytest.raises(OSError):
        check_writable(str(tmp_path / "audit.jsonl" / "below-a-file"))


def test_garbage_and_empty_lines_are_named():
    lines = trail()
    assert verify_lines(lines[:2] + ["{not json"] + lines[2:])["first_bad"]["line"] == 3
    assert verify_lines(lines[:2] + [""] + lines[2:])["first_bad"] == {"line": 3, "reason": "empty line"}
    assert verify_lines(lines[:1] + ['{"event":"x"}'])["first_bad"]["reason"] == "not an audit record (no seq/prev)"


def test_empty_trail_is_intact_with_the_genesis_head():
    assert verify_lines([]) == {"ok": True, "lines": 0, "head": GENESIS, "first_bad": None, "key_error": None,
                                "hmac_checked": False, "unsigned": [], "other_key": [], "anchored_to": None}


def test_append_record_creates_a_private_file_and_chains_to_its_last_line(tmp_path):
    path = str(tmp_path / "audit.jsonl")
    first = append_record(path, {"event": "run_start", "run_id": "a"}, KEY)
    second = append_record(path, {"event": "run_end", "run_id": "a"}, KEY)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert read_lines(path) == [first, second]
    assert verify_file(path, hmac_key=KEY)["ok"]
    assert [record["event"] for record in read_records(path, run_id="a")] == ["run_start", "run_end"]


def test_read_last_line_finds_a_line_longer_than_one_read_chunk(tmp_path):
    path = str(tmp_path / "audit.jsonl")
    append_record(path, {"event": "a"})
    long_line = append_record(path, {"event": "b", "pad": "x" * 200000})
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_last_line(fd) == long_line
    finally:
        os.close(fd)


def _append_many(path, writer, count):
    for number in range(count):
        append_record(path, {"event": "task", "writer": writer, "n": number})


def test_concurrent_writers_never_fork_the_chain(tmp_path):
    path = str(tmp_path / "audit.jsonl")
    workers = [multiprocessing.Process(target=_append_many, args=(path, writer, 40)) for writer in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    verdict = verify_file(path)
    assert verdict["ok"] and verdict["lines"] == 120


@pytest.mark.parametrize("line", ['{"seq":"1","prev":"x"}', "[1,2]"])
def test_lines_that_are_not_records_are_rejected(line):
    assert not verify_lines([line])["ok"]
