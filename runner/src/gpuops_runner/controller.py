"""The bastion's Ansible settings for a fleet run, as code: what a run of hundreds of nodes needs from the
controller, chosen from the inventory and the runbook's own spec, and printed before the run starts.

- forks: at least the largest batch could be (the nodes of the inventory), capped: each fork is a Python process
  of about 60-100 MiB on the controller (docs/scale.md), so the cap, not the fleet, bounds the bastion's memory.
- SSH pipelining: one SSH round trip per task and node instead of three (no temporary file to copy then run).
- ControlPersist longer than the longest step of the runbook (its largest ``*_timeout`` input): a node's SSH
  master must outlive its drain and reboot wait, or every node of a batch opens a new connection afterwards.

An operator's own setting wins: ANSIBLE_FORKS, ANSIBLE_PIPELINING and ANSIBLE_SSH_ARGS already in the
environment are kept as they are, and so is any host variable of the inventory (ansible_ssh_pipelining,
ansible_ssh_args), which ansible ranks above the environment.
"""

from __future__ import annotations

import os

import yaml

FORKS_FLOOR = 5          # ansible's own default: never fewer
FORKS_CAP_DEFAULT = 50   # about 5 GiB of forks at most on the bastion; --forks-cap moves it
CONTROL_PERSIST_FLOOR_S = 600
CONTROL_PERSIST_MARGIN_S = 120
SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=%ds"
TRUE_WORDS = ("1", "true", "yes", "on")


class ControllerSettings:
    """``env``: the variables to add to the run's environment; ``shown``: (setting, value, why) for the plan."""

    def __init__(self, env, shown):
        self.env = env
        self.shown = shown

    def line(self):
        return "controller: " + "; ".join("%s %s (%s)" % item for item in self.shown)

    def as_record(self):
        return {name: value for name, value, _why in self.shown}


def forks_for(node_count, cap):
    return max(FORKS_FLOOR, min(node_count, cap))


def _seconds(value):
    try:
        seconds = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def longest_step_s(spec_path, extra_vars):
    """The largest ``*_timeout`` input of the runbook (an extra var, else its spec default); None without any."""
    try:
        with open(spec_path, encoding="utf-8") as stream:
            spec = yaml.safe_load(stream) or {}
        options = spec["argument_specs"]["main"]["options"] or {}
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    found = []
    for name, option in options.items():
        if not name.endswith("_timeout") or not isinstance(option, dict):
            continue
        seconds = _seconds(extra_vars[name]) if name in extra_vars else _seconds(option.get("default"))
        if seconds:
            found.append(seconds)
    return max(found) if found else None


def control_persist_s(longest_s):
    return max(CONTROL_PERSIST_FLOOR_S, (longest_s or 0) + CONTROL_PERSIST_MARGIN_S)


def settings(node_count, spec_path, extra_vars, environ=None, forks_cap=FORKS_CAP_DEFAULT):
    """The settings of one run over ``node_count`` inventory nodes."""
    environ = os.environ if environ is None else environ
    env, shown = {}, []
    if environ.get("ANSIBLE_FORKS"):
        shown.append(("forks", environ["ANSIBLE_FORKS"], "ANSIBLE_FORKS"))
    else:
        forks = forks_for(node_count, forks_cap)
        env["ANSIBLE_FORKS"] = str(forks)
        shown.append(("forks", str(forks), "%d nodes, cap %d" % (node_count, forks_cap)))
    if environ.get("ANSIBLE_PIPELINING"):
        on = environ["ANSIBLE_PIPELINING"].strip().lower() in TRUE_WORDS
        shown.append(("pipelining", "on" if on else "off", "ANSIBLE_PIPELINING"))
    else:
        env["ANSIBLE_PIPELINING"] = "True"
        shown.append(("pipelining", "on", "gpuops default"))
    if environ.get("ANSIBLE_SSH_ARGS"):
        shown.append(("ssh_args", environ["ANSIBLE_SSH_ARGS"], "ANSIBLE_SSH_ARGS"))
    else:
        longest = longest_step_s(spec_path, extra_vars)
        persist = control_persist_s(longest)
        env["ANSIBLE_SSH_ARGS"] = SSH_ARGS % persist
        why = "floor"
        if longest:
            why = "longest step %ss + %ss" % (longest, CONTROL_PERSIST_MARGIN_S)
        shown.append(("ControlPersist", "%ds" % persist, why))
    return ControllerSettings(env, shown)
