"""The runbooks say what they accept: each has one spec (playbooks/specs/<runbook>.yml) that holds every default of
its variables once, and its guide's variable table is what hack/runbook_docs.py makes of that spec."""
from __future__ import annotations

import glob
import importlib.util
import os
import re

import yaml

from conftest import REPO_DIR

PLAYBOOKS_DIR = os.path.join(REPO_DIR, "playbooks")
RUNBOOKS = ("driver_upgrade", "node_bootstrap", "diagnose", "health_check", "change")
# `VARIABLE | default(` followed by a literal: a number, a quoted string, a list, a mapping, true/false/none
LITERAL_DEFAULT = r"\b%s\s*\|\s*default\(\s*(-?[0-9]|['\"\[{]|(true|false|none|True|False|None)\b)"


def load_runbook_docs():
    spec = importlib.util.spec_from_file_location("runbook_docs", os.path.join(REPO_DIR, "hack", "runbook_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spec_options(runbook: str) -> dict:
    with open(os.path.join(PLAYBOOKS_DIR, "specs", runbook + ".yml")) as stream:
        return yaml.safe_load(stream)["argument_specs"]["main"]["options"]


def playbook_files() -> list:
    return sorted(glob.glob(os.path.join(PLAYBOOKS_DIR, "*.yml")) + glob.glob(os.path.join(PLAYBOOKS_DIR, "tasks", "*.yml")))


def test_every_runbook_has_one_spec_and_validates_against_it_first():
    specs = [name for name in os.listdir(os.path.join(PLAYBOOKS_DIR, "specs")) if name.endswith(".yml")]
    assert sorted(specs) == sorted(name + ".yml" for name in RUNBOOKS)
    for runbook in RUNBOOKS:
        with open(os.path.join(PLAYBOOKS_DIR, runbook + ".yml")) as stream:
            first_play = yaml.safe_load(stream)[0]
        first_task = first_play["tasks"][0]
        assert first_task["ansible.builtin.include_tasks"] == "tasks/runbook_inputs.yml", runbook
        assert first_task["vars"] == {"gpuops_runbook": runbook}


def test_no_runbook_variable_has_a_literal_default_in_the_playbooks():
    variables = sorted(set(name for runbook in RUNBOOKS for name in spec_options(runbook)))
    pattern = re.compile(LITERAL_DEFAULT % ("(%s)" % "|".join(variables)))
    found = []
    for path in playbook_files():
        with open(path) as stream:
            for number, line in enumerate(stream, 1):
                if pattern.search(line):
                    found.append("%s:%d: %s" % (os.path.relpath(path, REPO_DIR), number, line.strip()))
    assert found == [], "defaults belong in playbooks/specs/:\n" + "\n".join(found)
    assert re.search(LITERAL_DEFAULT % "gpuops_drain_timeout", "{{ gpuops_drain_timeout | default(900) }}")
    assert not re.search(LITERAL_DEFAULT % "gpuops_kubeconfig", "{{ gpuops_kubeconfig | default(omit) }}")


def test_every_option_of_a_spec_is_read_by_its_runbook():
    text = "".join(open(path).read() for path in playbook_files() + glob.glob(os.path.join(PLAYBOOKS_DIR, "templates", "*")))
    for runbook in RUNBOOKS:
        unread = [name for name in spec_options(runbook) if not re.search(r"\b%s\b" % name, text)]
        assert unread == [], "%s: options no task reads: %s" % (runbook, unread)


def test_every_guide_table_is_generated_from_its_spec(capsys):
    assert load_runbook_docs().main(["--check"]) == 0, "run: python hack/runbook_docs.py (%s)" % capsys.readouterr().err
