"""The -e arguments: read as ansible-playbook reads them, then refused unless they are plain data that the
runner does not own. Refusals name the variable, never its value."""

from __future__ import annotations

import yaml

from gpuops_runner.options import holds_template

# variables the runner or the inventory sets: a -e would override what the confirmation and the trail rely on
RESERVED = {
    "gpuops_ticket": "the ticket comes from --ticket",
    "gpuops_confirm": "gpuops sets it, from --apply and the cluster name typed (--confirm)",
    "gpuops_run_id": "gpuops names the run",
    "gpuops_cluster_name": "the cluster name comes from the inventory: it is what --confirm is checked against",
    "gpuops_approved_plan": "gpuops apply sets it, for the plan whose two-person rule it checked",
}
RESERVED_PREFIX = ("ansible_", "gpuops_audit_")


class ExtraVarsRefused(Exception):
    pass


def mapping_of(argument):
    """What one -e gives: KEY=VALUE (a string), a JSON/YAML mapping (lists, numbers, booleans) or @FILE."""
    if argument.startswith("@"):
        try:
            with open(argument[1:], encoding="utf-8") as stream:
                content = stream.read()
        except (OSError, UnicodeDecodeError) as error:
            raise ExtraVarsRefused("-e %s: cannot read the file: %s" % (argument, getattr(error, "strerror", error)))
    elif argument.lstrip().startswith("{"):
        content = argument
    else:
        name, sep, value = argument.partition("=")
        if not sep:
            raise ExtraVarsRefused("-e: an argument is not KEY=VALUE, a JSON/YAML mapping or @FILE")
        return {name: value}
    try:
        mapping = yaml.safe_load(content)
    except yaml.YAMLError as error:
        raise ExtraVarsRefused("-e: an argument is not valid JSON/YAML (%s)"
                               % str(getattr(error, "problem", None) or "syntax error"))
    if not isinstance(mapping, dict):
        raise ExtraVarsRefused("-e: an argument is not a mapping of variables")
    return mapping


def templated_path(value, path=""):
    """The path (``name[0].key``) of the first string in ``value`` that holds a Jinja template, or None."""
    if isinstance(value, str):
        return path if holds_template(value) else None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and holds_template(key):
            return "%s key" % path
        found = templated_path(item, "%s[%r]" % (path, key))
        if found is not None:
            return found
    return None


def parse(arguments, is_secret_name):
    """The -e arguments as one dict (later ones win). Refused: names that are not identifiers, reserved or look
    secret (they would land in the command line and artifacts), and values holding a template (a lookup would run
    with the runner's environment: the HMAC key, tokens)."""
    extra_vars = {}
    for argument in arguments or ():
        for name, value in mapping_of(argument).items():
            if not isinstance(name, str) or not name.isidentifier():
                shown = name if isinstance(name, (int, float)) else "a key"
                raise ExtraVarsRefused("-e: %s is not a variable name" % shown)
            if name in RESERVED:
                raise ExtraVarsRefused("-e %s is reserved: %s" % (name, RESERVED[name]))
            if name.startswith(RESERVED_PREFIX):
                raise ExtraVarsRefused("-e %s is reserved: connection and audit settings come from the inventory "
                                       "and gpuops" % name)
            if is_secret_name(name):
                raise ExtraVarsRefused("-e %s looks like a secret: pass secrets through ansible-vault or the "
                                       "environment, never on the command line" % name)
            where = templated_path(value, name)
            if where is not None:
                raise ExtraVarsRefused("-e %s holds a Jinja template ({{, {%% or {#) at %s: gpuops passes extra "
                                       "vars as data; put templates in the inventory" % (name, where))
            extra_vars[name] = value
    return extra_vars
