"""Checks of the command line's values before anything is written: each failure names the option (exit 2)."""

from __future__ import annotations

import os
import re

TEMPLATE_MARKS = ("{{", "{%", "{#")
TEXT_MAX_CHARS = 4096
TICKET_MAX_CHARS = 128


class UsageError(Exception):
    """A bad option value; ``str()`` starts with the option's name."""

    def __init__(self, field, problem):
        super().__init__("%s: %s" % (field, problem))
        self.field = field


def holds_template(text):
    return any(mark in text for mark in TEMPLATE_MARKS)


def text(field, value, ascii_only=False, no_spaces=False, max_chars=TEXT_MAX_CHARS):
    """``value`` when it is non-empty text without a Jinja template or control characters."""
    if not isinstance(value, str):
        raise UsageError(field, "must be text, not %s" % type(value).__name__)
    if not value.strip():
        raise UsageError(field, "is empty")
    if len(value) > max_chars:
        raise UsageError(field, "is longer than %d characters" % max_chars)
    if holds_template(value):
        raise UsageError(field, "holds a Jinja template ({{, {%% or {#): gpuops passes values as data, never as "
                                "templates")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise UsageError(field, "holds control characters")
    if ascii_only and not (value.isascii() and value.isprintable()):
        raise UsageError(field, "must be printable ASCII")
    if no_spaces and any(char.isspace() for char in value):
        raise UsageError(field, "must not hold spaces")
    return value


def ticket(value):
    return text("--ticket", value, ascii_only=True, no_spaces=True, max_chars=TICKET_MAX_CHARS)


def cluster_name(field, value):
    return text(field, value, ascii_only=True, no_spaces=True, max_chars=253)


def _existing_ancestor(path):
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def directory_to_create(field, value):
    """An absolute path that is a directory, or can become one (its nearest existing ancestor is one)."""
    path = os.path.abspath(os.path.expanduser(text(field, value)))
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(field, "%s exists and is not a directory" % path)
    ancestor = _existing_ancestor(path)
    if not os.path.isdir(ancestor):
        raise UsageError(field, "%s cannot be created: %s is not a directory" % (path, ancestor))
    return path


def trail_file(field, value):
    """An absolute path for the audit trail: not a directory, in an existing directory."""
    path = os.path.abspath(os.path.expanduser(text(field, value)))
    if os.path.isdir(path):
        raise UsageError(field, "%s is a directory" % path)
    if not os.path.isdir(os.path.dirname(path)):
        raise UsageError(field, "%s is not in an existing directory" % path)
    return path


def existing_file(field, value):
    path = os.path.abspath(os.path.expanduser(text(field, value)))
    if not os.path.isfile(path):
        raise UsageError(field, "%s is not a file" % path)
    return path


def existing_directory(field, value):
    path = os.path.abspath(os.path.expanduser(text(field, value)))
    if not os.path.isdir(path):
        raise UsageError(field, "%s is not a directory" % path)
    return path


def positive_int(value):
    """argparse type of --keep-runs."""
    import argparse

    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % value)
    if number < 1:
        raise argparse.ArgumentTypeError("%d: keep at least 1 run" % number)
    return number


CHANGE_KIND_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def change_kind(value):
    """argparse type of CHANGE_KIND: a name as the kinds table writes them (whether the collection knows it is
    checked once the collection is found: runbook.RunbookRun)."""
    import argparse

    if not CHANGE_KIND_PATTERN.match(value):
        raise argparse.ArgumentTypeError("%r is not a change kind name (lower case letters, digits, _)" % value[:80])
    return value
