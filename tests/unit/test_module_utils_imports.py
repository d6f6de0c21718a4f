# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Who may import whom among the plugins (the table of plugins/module_utils/README.md), checked by
hack/check_module_utils_imports.py on this collection and on synthetic trees that break each rule."""

from __future__ import annotations

import os
import subprocess
import sys

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(COLLECTION, "hack", "check_module_utils_imports.py")
PREFIX = "ansible_collections.gpuops.nvidia.plugins."


def run_check(root):
    return subprocess.run([sys.executable, CHECK, "--root", str(root)], capture_output=True, text=True, timeout=60,
                          check=False)


def failures(done):
    return [line[len("FAIL "):] for line in done.stdout.splitlines() if line.startswith("FAIL ")]


def write(root, path, text=""):
    target = root / "plugins" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_the_collection_follows_the_import_table_without_cycles():
    done = run_check(COLLECTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   every import follows the table of plugins/module_utils/README.md" in done.stdout
    assert "ok   no import cycle" in done.stdout


def test_a_wing_importing_across_the_table_fails_naming_what_it_may_import(tmp_path):
    write(tmp_path, "module_utils/k8s/client.py", "from %smodule_utils.monitoring import http\n" % PREFIX)
    write(tmp_path, "module_utils/monitoring/http.py")
    write(tmp_path, "module_utils/rollout/plan.py", "from %smodule_utils.k8s.client import request\n" % PREFIX)
    done = run_check(tmp_path)
    assert done.returncode == 1
    assert failures(done) == ["module_utils.k8s.client imports module_utils.monitoring.http: k8s may import k8s"]


def test_a_cycle_fails_also_through_an_import_inside_a_function(tmp_path):
    write(tmp_path, "module_utils/k8s/watch.py", "def f():\n    from . import client\n")
    write(tmp_path, "module_utils/k8s/client.py", "from %smodule_utils.k8s.watch import f\n" % PREFIX)
    done = run_check(tmp_path)
    assert failures(done) == ["import cycle: module_utils.k8s.client <-> module_utils.k8s.watch"]


def test_importing_a_module_a_flat_helper_an_unknown_side_and_ansible_in_audit_fail(tmp_path):
    write(tmp_path, "modules/node_drain.py")
    write(tmp_path, "modules/gpu_fleet_report.py", "from %smodules.node_drain import main\n" % PREFIX)
    write(tmp_path, "module_utils/_flat.py")
    write(tmp_path, "lookup/nodes.py")
    write(tmp_path, "module_utils/audit/chain.py", "import json\nfrom ansible.module_utils.common.text import converters\n")
    done = run_check(tmp_path)
    assert done.returncode == 1
    assert sorted(failures(done)) == [
        "lookup.nodes: no rule for the side lookup in MAY_IMPORT",
        "module_utils._flat is in no wing (plugins/module_utils/<wing>/)",
        "module_utils.audit.chain imports ansible: the audit wing imports the standard library only",
        "modules.gpu_fleet_report imports the module modules.node_drain: move what they share into a wing",
    ]
