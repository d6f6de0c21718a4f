# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A TOML 1.0 reader and a writer that formats like the Go TOML library containerd and nvidia-ctk use.

The targets run Python 3.9+, which has no tomllib, so the containerd modules carry their own reader. It reads
everything a containerd configuration holds (tables, arrays of tables, dotted and quoted keys, every string form,
integers, floats, booleans, arrays, inline tables); dates and times are refused with a clear error.

The writer reproduces github.com/pelletier/go-toml v1's output (what `nvidia-ctk runtime configure` and
`containerd config dump` print): plain values first, keys in byte order, each table header after a blank line and
indented two spaces per level, arrays on one line.
"""

from __future__ import annotations

import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
_NUMBER = re.compile(
    r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|inf|nan|"
    r"(?:\d[\d_]*)(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?)")
_DATE_START = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}")


class TOMLError(ValueError):
    """The text is not TOML this reader accepts; the message names the line."""


class _Reader:
    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.root = {}
        # Tables created by a header or a key (may not be re-opened by a header) vs. implicitly as a parent.
        self.defined = set()
        self.inline = set()

    def error(self, message, pos=None):
        line = self.text.count("\n", 0, self.pos if pos is None else pos) + 1
        raise TOMLError("line %d: %s" % (line, message))

    def peek(self, count=1):
        return self.text[self.pos:self.pos + count]

    def skip_space(self):
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def skip_comment(self):
        if self.peek() == "#":
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end

    def end_of_line(self):
        self.skip_space()
        self.skip_comment()
        if self.pos >= len(self.text):
            return
        if self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.peek() == "\n":
            self.pos += 1
        else:
            self.error("expected the end of the line, found %r" % self.peek())

    def skip_blank_and_comments(self):
        while self.pos < len(self.text):
            self.skip_space()
            self.skip_comment()
            if self.peek() in ("\n", "\r"):
                self.pos += 1
            else:
                return

    # keys
    def key(self):
        parts = []
        while True:
            self.skip_space()
            char = self.peek()
            if char == '"':
                parts.append(self.basic_string())
            elif char == "'":
                parts.append(self.literal_string())
            else:
                start = self.pos
                while self.pos < len(self.text) and self.text[self.pos] in _BARE_KEY_CHARS:
                    self.pos += 1
                if start == self.pos:
                    self.error("expected a key, found %r" % char)
                parts.append(self.text[start:self.pos])
            self.skip_space()
            if self.peek() != ".":
                return parts
            self.pos += 1

    # strings
    def basic_string(self):
        if self.text.startswith('"""', self.pos):
            return self.multiline_basic_string()
        self.pos += 1
        chars = []
        while True:
            if self.pos >= len(self.text) or self.peek() == "\n":
                self.error("unterminated string")
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(chars)
            if char == "\\":
                chars.append(self.escape())
            else:
                chars.append(char)
                self.pos += 1

    def escape(self):
        code = self.text[self.pos + 1:self.pos + 2]
        if code in _ESCAPES:
            self.pos += 2
            return _ESCAPES[code]
        if code in ("u", "U"):
            width = 4 if code == "u" else 8
            digits = self.text[self.pos + 2:self.pos + 2 + width]
            if len(digits) != width or not re.match(r"[0-9A-Fa-f]+\Z", digits):
                self.error("bad unicode escape")
            self.pos += 2 + width
            return chr(int(digits, 16))
        self.error("bad escape \\%s" % code)

    def multiline_basic_string(self):
        self.pos += 3
        if self.text.startswith("\r\n", self.pos):
            self.pos += 2
        elif self.peek() == "\n":
            self.pos += 1
        chars = []
        while True:
            if self.pos >= len(self.text):
                self.error("unterminated multi-line string")
            if self.text.startswith('"""', self.pos):
                # Up to two quotes may end the content right before the closing delimiter.
                extra = 0
                while extra < 2 and self.text.startswith('"', self.pos + 3 + extra):
                    extra += 1
                chars.append('"' * extra)
                self.pos += 3 + extra
                return "".join(chars)
            char = self.text[self.pos]
            if char == "\\":
                rest = re.match(r"\\[ \t]*\r?\n[ \t\r\n]*", self.text[self.pos:])
                if rest:
                    self.pos += rest.end()
                else:
                    chars.append(self.escape())
            else:
                chars.append(char)
                self.pos += 1

    def literal_string(self):
        if self.text.startswith("'''", self.pos):
            self.pos += 3
            if self.text.startswith("\r\n", self.pos):
                self.pos += 2
            elif self.peek() == "\n":
                self.pos += 1
            end = self.text.find("'''", self.pos)
            if end < 0:
                self.error("unterminated multi-line literal string")
            extra = 0
            while extra < 2 and self.text.startswith("'", end + 3 + extra):
                extra += 1
            end += extra
            value = self.text[self.pos:end]
            self.pos = end + 3
            return value
        end = self.text.find("'", self.pos + 1)
        newline = self.text.find("\n", self.pos + 1)
        if end < 0 or (0 <= newline < end):
            self.error("unterminated literal string")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    # values
    def value(self):
        self.skip_space()
        char = self.peek()
        if char == '"':
            return self.basic_string()
        if char == "'":
            return self.literal_string()
        if char == "[":
            return self.array()
        if char == "{":
            return self.inline_table()
        for word, result in (("true", True), ("false", False)):
            if self.text.startswith(word, self.pos) and not self._bare_continues(self.pos + len(word)):
                self.pos += len(word)
                return result
        if _DATE_START.match(self.text, self.pos):
            self.error("dates and times are not supported")
        match = _NUMBER.match(self.text, self.pos)
        if not match or match.end() == self.pos or self._bare_continues(match.end()):
            self.error("expected a value, found %r" % self.text[self.pos:self.pos + 10])
        self.pos = match.end()
        return _number(match.group(0), self.error)

    def _bare_continues(self, pos):
        return pos < len(self.text) and (self.text[pos] in _BARE_KEY_CHARS or self.text[pos] in ".:")

    def array(self):
        self.pos += 1
        items = []
        while True:
            self.skip_blank_and_comments()
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.value())
            self.skip_blank_and_comments()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() == "]":
                self.pos += 1
                return items
            else:
                self.error("expected ',' or ']' in an array")

    def inline_table(self):
        self.pos += 1
        table = {}
        self.skip_space()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            keys = self.key()
            if self.peek() != "=":
                self.error("expected '=' after a key")
            self.pos += 1
            self.assign(table, keys, self.value(), ("<inline>",))
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() == "}":
                self.pos += 1
                return table
            else:
                self.error("expected ',' or '}' in an inline table")

    # structure
    def assign(self, table, keys, value, table_path):
        for depth, part in enumerate(keys[:-1]):
            path = table_path + tuple(keys[:depth + 1])
            child = table.setdefault(part, {})
            if not isinstance(child, dict) or path in self.inline:
                self.error("key %s is already a value" % ".".join(path))
            self.defined.add(path)
            table = child
        if keys[-1] in table:
            self.error("duplicate key %s" % ".".join(table_path + tuple(keys)))
        table[keys[-1]] = value
        if isinstance(value, dict):
            self.inline.add(table_path + tuple(keys))

    def open_table(self, keys, array):
        table = self.root
        for depth, part in enumerate(keys[:-1]):
            path = tuple(keys[:depth + 1])
            child = table.setdefault(part, {})
            if isinstance(child, list):
                child = child[-1]
            elif not isinstance(child, dict) or path in self.inline:
                self.error("%s is not a table" % ".".join(path))
            table = child
        last, path = keys[-1], tuple(keys)
        if array:
            entries = table.setdefault(last, [])
            if not isinstance(entries, list) or path in self.inline:
                self.error("%s is not an array of tables" % ".".join(path))
            entries.append({})
            return entries[-1]
        if path in self.defined:
            self.error("table %s defined twice" % ".".join(path))
        child = table.setdefault(last, {})
        if not isinstance(child, dict) or path in self.inline:
            self.error("%s is already a value" % ".".join(path))
        self.defined.add(path)
        return child

    def document(self):
        table, table_path = self.root, ()
        while True:
            self.skip_blank_and_comments()
            if self.pos >= len(self.text):
                return self.root
            if self.peek() == "[":
                array = self.text.startswith("[[", self.pos)
                self.pos += 2 if array else 1
                keys = self.key()
                closing = "]]" if array else "]"
                if not self.text.startswith(closing, self.pos):
                    self.error("expected %r to close a table header" % closing)
                self.pos += len(closing)
                table, table_path = self.open_table(keys, array), tuple(keys)
            else:
                keys = self.key()
                if self.peek() != "=":
                    self.error("expected '=' after the key %s" % ".".join(keys))
                self.pos += 1
                self.assign(table, keys, self.value(), table_path)
            self.end_of_line()


def _number(token, error):
    cleaned = token.replace("_", "")
    sign = -1 if cleaned.startswith("-") else 1
    unsigned = cleaned.lstrip("+-")
    if unsigned in ("inf", "nan"):
        return sign * float(unsigned)
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if unsigned.startswith(prefix):
            return sign * int(unsigned[2:], base)
    if any(char in unsigned for char in ".eE"):
        return float(cleaned)
    if len(unsigned) > 1 and unsigned.startswith("0"):
        error("leading zeros are not allowed in %r" % token)
    return int(cleaned)


def loads(text):
    """The document as nested dicts and lists; raises TOMLError."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return _Reader(text).document()


def value_end(text, start):
    """The index just past the TOML value that begins at start (used to replace one value in place)."""
    reader = _Reader(text)
    reader.pos = start
    reader.value()
    return reader.pos


# writer

def quote_key(key):
    return key if _BARE_KEY.match(key) else _quote_string(key)


def _quote_string(value):
    out = []
    for char in value:
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def format_value(value):
    """One value as go-toml v1 writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if any(char in text for char in ".e") else text + ".0"
    if isinstance(value, str):
        return _quote_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (quote_key(key), format_value(item))
                               for key, item in sorted(value.items())) + "}"
    raise TOMLError("cannot write a value of type %s" % type(value).__name__)


def _is_table_array(value):
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _write_table(lines, table, path, depth):
    indent = "  " * depth
    simple = sorted(key for key, value in table.items() if not isinstance(value, dict) and not _is_table_array(value))
    nested = sorted(key for key in table if key not in simple)
    for key in simple:
        lines.append("%s%s = %s" % (indent, quote_key(key), format_value(table[key])))
    for key in nested:
        child_path = path + [quote_key(key)]
        header_indent = "  " * len(path)
        if isinstance(table[key], dict):
            lines.append("")
            lines.append("%s[%s]" % (header_indent, ".".join(child_path)))
            _write_table(lines, table[key], child_path, len(child_path))
        else:
            for entry in table[key]:
                lines.append("")
                lines.append("%s[[%s]]" % (header_indent, ".".join(child_path)))
                _write_table(lines, entry, child_path, len(child_path))


def dumps(document):
    """The document as TOML text, formatted like go-toml v1 (and so like nvidia-ctk's files)."""
    lines = []
    _write_table(lines, document, [], 0)
    while lines and lines[0] == "":
        lines.pop(0)
    return "\n".join(lines) + "\n" if lines else ""
