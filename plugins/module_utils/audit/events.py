# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What an audit record may hold: operator identity, digests of the inputs, a task result summarised without its
data, and secret scrubbing. Pure functions (plus file hashing), shared by the ``gpuops.nvidia.audit`` callback and
the ``gpuops`` CLI.

Public and versioned with ``chain.API_VERSION`` (docs/audit.md): other tools may import it.

Rules: variable and environment values are never recorded, only their names; a result becomes its flags, rc and
(for failures only, when the task is not ``no_log``) its ``msg`` cut to ``MESSAGE_MAX_CHARS`` with every known
secret value replaced by ``REDACTED``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

REDACTED = "********"
MESSAGE_MAX_CHARS = 300
SECRET_MIN_CHARS = 4
# Names whose values are secrets (matched anywhere in the name, any case): gpuops_mok_password, K8S_AUTH_API_KEY,
# GPUOPS_AUDIT_HMAC_KEY, vault_*, *_token, *credential*, *private*.
SECRET_NAME = re.compile(r"pass(word|wd|phrase)?|secret|token|key|credential|private|vault|auth|cookie|session",
                         re.IGNORECASE)
TICKET_VAR = "gpuops_ticket"
GATE_VAR = "gpuops_audit_gate"
STEP_VAR = "gpuops_audit_step"
HMAC_KEY_ENV = "GPUOPS_AUDIT_HMAC_KEY"


def is_secret_name(name):
    return bool(SECRET_NAME.search(str(name)))


def secret_values_from_mapping(mapping, is_vaulted=None):
    """The values (as text) of the entries of ``mapping`` whose names look secret or (with ``is_vaulted``) that
    are vault-encrypted, long enough to scrub safely. Only scalar values: containers are never expanded."""
    values = set()
    for name, value in (mapping or {}).items():
        vaulted = is_vaulted is not None and is_vaulted(value)
        if not vaulted and not (is_secret_name(name) and isinstance(value, (str, int, float))
                                and not isinstance(value, bool)):
            continue
        try:
            text = str(value)
        except Exception:  # pylint: disable=broad-exception-caught  # a vaulted value we cannot decrypt
            continue
        if len(text) >= SECRET_MIN_CHARS:
            values.add(text)
    return values


def scrub(text, secrets):
    """``text`` with every occurrence of a secret value replaced (longest first, so no prefix of one remains)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def short_message(message, secrets):
    text = scrub(" ".join(str(message).split()), secrets)
    if len(text) > MESSAGE_MAX_CHARS:
        text = text[:MESSAGE_MAX_CHARS - 3] + "..."
    return text


def result_status(kind, result):
    """One word for a task result: ok, changed, failed, skipped, unreachable (kind: the callback's event)."""
    if kind in ("failed", "unreachable", "skipped"):
        return kind
    return "changed" if result.get("changed") else "ok"


def summarise_result(kind, result, secrets, ignore_errors=False):
    """A task result reduced to what an auditor needs; never its data (facts, stdout, diffs, module args).
    ``secrets``: the values to scrub from a failure message; None when they could not be known (no message)."""
    status = result_status(kind, result)
    summary = {"status": status, "changed": bool(result.get("changed")), "failed": status == "failed",
               "skipped": status == "skipped", "unreachable": status == "unreachable"}
    if ignore_errors and status == "failed":
        summary["ignored"] = True
    if isinstance(result.get("rc"), int):
        summary["rc"] = result["rc"]
    if status in ("failed", "unreachable"):
        if result.get("censored") or result.get("_ansible_no_log"):
            summary["msg"] = "censored (no_log)"
        elif result.get("msg") and secrets is None:
            summary["msg"] = "not recorded (the secrets to scrub from it are unknown)"
        elif result.get("msg"):
            summary["msg"] = short_message(result["msg"], secrets)
    if isinstance(result.get("results"), list):
        summary["items"] = len(result["results"])
    return summary


def operator_identity(environ, effective_user, login_name, hostname):
    """Who runs: the effective user, the user behind sudo (SUDO_USER/SUDO_UID), the login name of the terminal
    session and the machine. Values are given (not read here) so the rule is testable."""
    identity = {"user": effective_user, "login": login_name, "host": hostname}
    if environ.get("SUDO_USER"):
        identity["sudo_user"] = environ["SUDO_USER"]
        if environ.get("SUDO_UID", "").isdigit():
            identity["sudo_uid"] = int(environ["SUDO_UID"])
    return identity


def sha256_of_paths(paths):
    """One digest over files and directories (walked in sorted order; each file's relative path and bytes are
    hashed), or None when no path exists. Inventory plugins' hosts strings ('a,b,') hash as text."""
    digest, seen = hashlib.sha256(), False
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(root, name)
                    digest.update(os.path.relpath(full, path).encode("utf-8") + b"\0")
                    digest.update(_file_bytes(full) + b"\0")
            seen = True
        elif os.path.isfile(path):
            digest.update(_file_bytes(path) + b"\0")
            seen = True
        elif path:
            digest.update(str(path).encode("utf-8") + b"\0")
            seen = True
    return digest.hexdigest() if seen else None


def _file_bytes(path):
    with open(path, "rb") as stream:
        return stream.read()


def sha256_of_extra_vars(arguments):
    """Digest of the -e arguments as given: a ``@file`` argument is hashed by its bytes (a vault-encrypted file
    stays encrypted), any other argument by its text. None without -e."""
    if not arguments:
        return None
    digest = hashlib.sha256()
    for argument in arguments:
        argument = str(argument)
        if argument.startswith("@") and os.path.isfile(argument[1:]):
            digest.update(_file_bytes(argument[1:]) + b"\0")
        else:
            digest.update(argument.encode("utf-8") + b"\0")
    return digest.hexdigest()


def collection_info(root):
    """name, version (MANIFEST.json of an installed build, else galaxy.yml) and the git commit when ``root`` is the
    top of a git checkout (not merely inside some other repository)."""
    info = {"name": "gpuops.nvidia", "version": None, "git_commit": None}
    manifest = os.path.join(root, "MANIFEST.json")
    if os.path.isfile(manifest):
        with open(manifest) as stream:
            info["version"] = json.load(stream).get("collection_info", {}).get("version")
    elif os.path.isfile(os.path.join(root, "galaxy.yml")):
        with open(os.path.join(root, "galaxy.yml")) as stream:
            for line in stream:
                if line.startswith("version:"):
                    info["version"] = line.split(":", 1)[1].strip().strip("'\"")
    try:
        done = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=False)
        lines = done.stdout.split()
        if done.returncode == 0 and len(lines) == 2 and os.path.realpath(lines[0]) == os.path.realpath(root):
            info["git_commit"] = lines[1]
    except (OSError, subprocess.SubprocessError):
        pass
    return info
