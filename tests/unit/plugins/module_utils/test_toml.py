# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import glob
import os
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import toml as _toml

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "containerd")
ALL_FIXTURES = sorted(glob.glob(os.path.join(FIXTURES, "*.toml")))
# The files that go-toml v1 wrote (nvidia-ctk's outputs and a real containerd 1.x dump), minus comment lines.
# containerd 2.x dumps are written by go-toml v2, whose layout differs: the reader test above covers them.
GO_TOML_OUTPUTS = [name for name in ALL_FIXTURES
                   if "_output_" in name or ("config-dump" in name and os.path.basename(name).startswith("containerd-1."))]


def read(path):
    with open(path) as handle:
        return handle.read()


def without_comment_lines(text):
    return "".join(line for line in text.splitlines(True) if not line.lstrip().startswith("#"))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is the reference reader")
@pytest.mark.parametrize("path", ALL_FIXTURES, ids=os.path.basename)
def test_reader_agrees_with_tomllib_on_every_fixture(path):
    import tomllib
    assert _toml.loads(read(path)) == tomllib.loads(read(path))


@pytest.mark.parametrize("path", GO_TOML_OUTPUTS, ids=os.path.basename)
def test_writer_reproduces_go_toml_output_byte_for_byte(path):
    expected = without_comment_lines(read(path))
    assert _toml.dumps(_toml.loads(expected)) == expected


def test_fixture_set_holds_the_real_containerd_dump():
    assert any("config-dump" in name for name in GO_TOML_OUTPUTS) and len(GO_TOML_OUTPUTS) >= 7


@pytest.mark.parametrize("text, expected", [
    ('a = "x\\ty\\u00e9\\"q"', {"a": 'x\tyé"q'}),
    ("a = 'C:\\path'", {"a": "C:\\path"}),
    ('a = """\nline1 \\\n   line2"""', {"a": "line1 line2"}),
    ("a = '''\nraw\\n''''", {"a": "raw\\n'"}),
    ("a = [1, 2,\n  # comment\n  3,]", {"a": [1, 2, 3]}),
    ("a = 0x1F\nb = -0o17\nc = 0b11\nd = 1_000\ne = 6.5e-1\nf = +inf", {"a": 31, "b": -15, "c": 3, "d": 1000,
                                                                        "e": 0.65, "f": float("inf")}),
    ("a.b.'c d' = true\n[t]\nx = {y = 1, z.w = false}", {"a": {"b": {"c d": True}}, "t": {"x": {"y": 1, "z": {"w": False}}}}),
    ("[[a]]\nx = 1\n[[a]]\nx = 2\n[a.sub]\ny = 3", {"a": [{"x": 1}, {"x": 2, "sub": {"y": 3}}]}),
    ("[a.b]\nx = 1\n[a]\ny = 2", {"a": {"b": {"x": 1}, "y": 2}}),
])
def test_reader_handles_toml_forms(text, expected):
    assert _toml.loads(text) == expected


@pytest.mark.parametrize("text, message", [
    ("a = 1\na = 2", "line 2: duplicate key a"),
    ("[a]\n[a]", "line 2: table a defined twice"),
    ("a = 1\n[a]", "line 2: a is already a value"),
    ('a = "open', "line 1: unterminated string"),
    ("a = 1979-05-27", "dates and times are not supported"),
    ("a = 01", "leading zeros"),
    ("a = 1 b = 2", "expected the end of the line"),
    ("a = [1 2]", "expected ',' or ']'"),
    ("x = {a = 1}\n[x.b]", "line 2: x is not a table"),
    ("= 1", "expected a key"),
])
def test_reader_refuses_invalid_toml_with_the_line(text, message):
    with pytest.raises(_toml.TOMLError, match=message):
        _toml.loads(text)


def test_value_end_finds_a_multiline_array():
    text = 'imports = [\n  "/a", # x\n  "/b",\n]\nversion = 2\n'
    start = text.index("[")
    assert text[_toml.value_end(text, start):].startswith("\nversion")


def test_writer_quotes_keys_and_strings_as_go_toml():
    document = {"plugins": {"io.containerd.grpc.v1.cri": {"a\"b": "q\"\\\n\x01", "n": 1.0, "l": [], "t": {}}}}
    assert _toml.dumps(document) == (
        '\n'.join(['[plugins]', '', '  [plugins."io.containerd.grpc.v1.cri"]',
                   '    "a\\"b" = "q\\"\\\\\\n\\u0001"', '    l = []', '    n = 1.0', '',
                   '    [plugins."io.containerd.grpc.v1.cri".t]']) + '\n')
    assert _toml.loads(_toml.dumps(document)) == document


def test_writer_refuses_values_toml_cannot_hold():
    with pytest.raises(_toml.TOMLError, match="NoneType"):
        _toml.dumps({"a": None})
