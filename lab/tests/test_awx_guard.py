"""deploy/awx/playbooks/guard.yml, run with real ansible-playbook on two local hosts: the gpuops runner's safety
rules as AWX job templates get them. A check-mode job (the "dry run" templates) passes; a job that acts needs the
ticket and the cluster's name typed out, equal to gpuops_cluster_name of every GPU node, else it stops before
the runbook. No root, no twin: the guard only reads variables."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import REPO_DIR, lab_env

GUARD = os.path.join(REPO_DIR, "deploy", "awx", "playbooks", "guard.yml")


def run_guard(tmp_path, extra_vars, check=False, clusters=("gpu-prod-1", "gpu-prod-1")):
    inventory = {"gpu_nodes": {"hosts": {
        "gpu-node-%d" % index: {"ansible_connection": "local", "gpuops_cluster_name": cluster}
        for index, cluster in enumerate(clusters, 1)}}}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    argv = ["ansible-playbook", "-i", str(path), GUARD, "-e", json.dumps(extra_vars)] + (["--check"] if check else [])
    done = subprocess.run(argv, capture_output=True, text=True, env=lab_env(), timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_a_dry_run_job_passes_without_ticket_or_confirmation(tmp_path):
    code, output = run_guard(tmp_path, {}, check=True)
    assert code == 0, output


def test_a_job_that_acts_with_ticket_and_the_typed_cluster_name_passes(tmp_path):
    code, output = run_guard(tmp_path, {"gpuops_ticket": "CHG-1234", "gpuops_confirm": "gpu-prod-1"})
    assert code == 0, output


@pytest.mark.parametrize("extra_vars", [
    {"gpuops_confirm": "gpu-prod-1"},
    {"gpuops_ticket": "  ", "gpuops_confirm": "gpu-prod-1"},
    {"gpuops_ticket": "CHG-1234"},
    {"gpuops_ticket": "CHG-1234", "gpuops_confirm": "gpu-prod-2"},
], ids=["no ticket", "blank ticket", "no confirmation", "other cluster"])
def test_a_job_that_acts_without_ticket_or_with_the_wrong_name_is_refused(tmp_path, extra_vars):
    code, output = run_guard(tmp_path, extra_vars)
    assert code != 0
    assert "refused: a job that acts needs the change ticket" in output


def test_one_node_of_another_cluster_stops_the_whole_job(tmp_path):
    code, output = run_guard(tmp_path, {"gpuops_ticket": "CHG-1234", "gpuops_confirm": "gpu-prod-1"},
                             clusters=("gpu-prod-1", "gpu-staging"))
    assert code != 0
    assert "gpu-node-2 (gpu-staging)" in output
