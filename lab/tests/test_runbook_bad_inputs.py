"""Every bad input of the driver upgrade runbook is refused in its first play, before anything changes: the
confirmed run (`gpuops upgrade --apply`) on a small twin, one bad input at a time over ONE fleet.

Each case asserts, from the twin's own state: no node cordoned, no record annotation, no lock Lease; the message
names the runbook's variable; no traceback; and the refusal exit path (the runbook's gate `inputs` fails, which
`gpuops` reports as refused, exit 3, not as a failed node).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import start_lab, stop_lab
from gpuops_cli import gpuops, records
from upgrade_helpers import NEW, OLD, RECORD, Fleet

pytest.importorskip("ansible_runner")

REFUSED = 3     # runner/src/gpuops_runner/exitcodes.py

BAD_INPUTS = [
    ({"gpuops_drain_timeout": -5}, "gpuops_drain_timeout: must be whole seconds from 1 to 604800"),
    ({"gpuops_ready_timeout": "２5"}, "gpuops_ready_timeout: must be whole seconds from 1 to 604800 (digits 0-9)"),
    ({"gpuops_reboot_timeout": "soon"}, "gpuops_reboot_timeout"),
    ({"gpuops_upgrade_batches": [1, "２5%"]}, "gpuops_upgrade_batches: entries must be counts >= 1 or percentages"),
    ({"gpuops_wait_for_pods_selector": "app=(x"}, "gpuops_wait_for_pods_selector: not a label selector"),
    ({"gpuops_operator_validator_selector": "app===x"}, "gpuops_operator_validator_selector: not a label selector"),
    ({"gpuops_prometheus_url": "prometheus:9090"}, "gpuops_prometheus_url: 'prometheus:9090' is not an http(s) URL"),
    ({"gpuops_pre_node_tasks": ["hooks/drain.sh"]}, "gpuops_pre_node_tasks: entries must be paths of task files"),
    ({"gpuops_maintenance_window": {"start": "25:00", "end": "04:00"}}, "gpuops_maintenance_window: start must be HH:MM"),
    ({"gpuops_driver_version": "６15.71.09"}, "gpuops_driver_version: '６15.71.09' is not a driver version"),
    ({"gpuops_driver_install_method": "magic"}, "gpuops_driver_install_method must be one of"),
    ({"gpuops_lock_ttl": 0}, "gpuops_lock_ttl: must be whole seconds from 1 to 604800"),
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two nodes on the old driver; no case may change anything on them."""
    state_dir = str(tmp_path_factory.mktemp("bad-inputs") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    yield Fleet(lab, tmp_path_factory.mktemp("bad-inputs-runs"))
    stop_lab(lab)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


@pytest.mark.parametrize("bad,message", BAD_INPUTS, ids=[next(iter(bad)) + "-%d" % index
                                                         for index, (bad, _message) in enumerate(BAD_INPUTS)])
def test_a_bad_input_is_refused_before_the_lock_any_record_or_any_cordon(fleet, tmp_path, bad, message):
    data_dir = str(tmp_path / "gpuops-data")
    # gpuops passes -e as data, never templates: the runfile's path with the version written out
    extra_vars = {name: value.replace("{{ nvidia_driver_version }}", NEW) if isinstance(value, str) else value
                  for name, value in fleet.extra_vars(gpuops_driver_version=NEW).items()}
    done = gpuops("upgrade", "-i", os.path.join(fleet.lab.state_dir, "inventory.yml"), "-v",
                  "-e", json.dumps(dict(extra_vars, **bad)),
                  "--apply", "--ticket", "CHG-1", "--confirm", "gpulab", "--data-dir", data_dir, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == REFUSED, output[-4000:]
    assert message in output, output[-4000:]
    assert "Traceback" not in output
    failed = [record for record in records(os.path.join(data_dir, "audit.jsonl"))
              if record["event"] in ("task", "gate") and record.get("status") == "failed"]
    assert [(record["event"], record.get("gate")) for record in failed] == [("gate", "inputs")], failed
    for name, node in fleet.nodes().items():
        assert not node["spec"].get("unschedulable"), name
        assert RECORD not in (node["metadata"].get("annotations") or {}), name
    leases = fleet.kubectl_json("get", "leases", "-n", "kube-system")["items"]
    assert "gpuops-nvidia-rollout" not in [lease["metadata"]["name"] for lease in leases]
