# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The gpuops.nvidia.audit callback in a real ansible-playbook run on localhost (connection local): batches,
steps, gates, ignored failures, no_log and secret-named variables, and the chain it leaves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.chain import verify_file

# the folder holding ansible_collections/ (this file is ansible_collections/gpuops/nvidia/tests/unit/plugins/callback/)
COLLECTIONS_PATH = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 7))
SECRET_ENV = "tok-env-0123456789"
SECRET_EXTRA = "pw-extra-0123456789"
NO_LOG_VALUE = "nolog-0123456789"
VAULTED_VALUE = "vaulted-0123456789"
HOST_PASSWORD = "bmc-0123456789"
PLAYBOOK = """
- name: Roll two hosts one by one
  hosts: nodes
  gather_facts: false
  serial: 1
  tasks:
    - name: Drain the node
      ansible.builtin.debug:
        msg: draining
      vars:
        gpuops_audit_step: drain
    - name: Soak the node
      vars:
        gpuops_audit_step: soak
      block:
        - name: Read the node after the soak
          ansible.builtin.debug:
            msg: soaked
    - name: Handle a value under no_log
      ansible.builtin.debug:
        msg: "%(no_log)s"
      no_log: true
    - name: Fail but go on
      ansible.builtin.fail:
        msg: "ignored failure with {{ lookup('ansible.builtin.env', 'MY_API_TOKEN') }} and {{ db_password }}"
      ignore_errors: true
    - name: Fail with host secrets in the message
      ansible.builtin.fail:
        msg: "signing with {{ signing_blob }} as {{ bmc_admin_password }}"
      ignore_errors: true
    - name: Check the node is healthy
      ansible.builtin.assert:
        that: inventory_hostname != 'node-b'
        fail_msg: "{{ inventory_hostname }} is not healthy"
      vars:
        gpuops_audit_gate: node_healthy
""" % {"no_log": NO_LOG_VALUE}


@pytest.fixture(scope="module")
def trail(tmp_path_factory):
    if shutil.which("ansible-playbook", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]) is None:
        pytest.skip("ansible-playbook is not installed")
    work = tmp_path_factory.mktemp("callback")
    (work / "play.yml").write_text(PLAYBOOK)
    (work / "hosts.ini").write_text("[nodes]\nnode-a\nnode-b\n[nodes:vars]\nansible_connection=local\n"
                                    "ansible_python_interpreter=%s\n" % sys.executable)
    # host secrets: a vault-encrypted variable with an ordinary name, a plain one with a secret-looking name
    (work / "vault-pass").write_text("unit-vault-password")
    encrypted = subprocess.run(["ansible-vault", "encrypt_string", "--vault-password-file", str(work / "vault-pass"),
                                "--name", "signing_blob", VAULTED_VALUE], capture_output=True, text=True, check=True,
                               env=dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep
                                        + os.environ["PATH"])).stdout
    (work / "group_vars").mkdir()
    (work / "group_vars" / "nodes.yml").write_text("---\nbmc_admin_password: %s\n%s" % (HOST_PASSWORD, encrypted))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_CALLBACKS_ENABLED="gpuops.nvidia.audit",
               GPUOPS_AUDIT_LOG=str(work / "audit.jsonl"), GPUOPS_AUDIT_HMAC_KEY="unit-key", GPUOPS_RUN_ID="run-1",
               MY_API_TOKEN=SECRET_ENV, SUDO_USER="alice", ANSIBLE_NOCOLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run(["ansible-playbook", "-i", str(work / "hosts.ini"), str(work / "play.yml"), "--check",
                           "-e", "gpuops_ticket=CHG-9", "-e", "db_password=" + SECRET_EXTRA,
                           "--vault-password-file", str(work / "vault-pass")],
                          capture_output=True, text=True, env=env, timeout=240, cwd=str(work), check=False)
    assert os.path.exists(work / "audit.jsonl"), done.stdout + done.stderr
    with open(work / "audit.jsonl") as stream:
        text = stream.read()
    return {"rc": done.returncode, "path": str(work / "audit.jsonl"), "text": text,
            "records": [json.loads(line) for line in text.splitlines()]}


def of(trail, event):
    return [record for record in trail["records"] if record["event"] == event]


def test_run_start_says_who_which_ticket_and_mode(trail):
    start = of(trail, "run_start")[0]
    assert start["run_id"] == "run-1" and start["ticket"] == "CHG-9" and start["mode"] == "check"
    assert start["operator"]["sudo_user"] == "alice" and start["playbook"] == "play.yml"
    assert start["extra_vars"]["names"] == ["db_password", "gpuops_ticket"]
    assert start["extra_vars"]["secret_names"] == ["db_password"] and len(start["inventory"]["sha256"]) == 64


def test_each_serial_batch_is_recorded_with_its_host(trail):
    batches = [(batch["batch"], batch["hosts"]) for batch in of(trail, "batch_start")]
    assert batches == [(1, ["node-a"]), (2, ["node-b"])]


def test_each_task_per_host_with_lane_status_and_duration(trail):
    tasks = {(task["host"], task["task"]): task for task in of(trail, "task")}
    drain = tasks[("node-a", "Drain the node")]
    assert drain["step"] == "drain" and drain["status"] == "ok" and drain["batch"] == 1
    assert drain["duration_s"] >= 0 and drain["action"] == "ansible.builtin.debug"
    assert tasks[("node-a", "Read the node after the soak")]["step"] == "soak"      # the lane of its block
    assert "step" not in tasks[("node-a", "Fail but go on")]
    ignored = tasks[("node-b", "Fail but go on")]
    assert ignored["status"] == "failed" and ignored["ignored"] is True


def test_gates_pass_and_fail_per_host(trail):
    gates = {gate["host"]: gate for gate in of(trail, "gate")}
    assert gates["node-a"]["passed"] is True and gates["node-b"]["passed"] is False
    assert gates["node-b"]["gate"] == "node_healthy" and gates["node-b"]["msg"] == "node-b is not healthy"
    assert trail["rc"] != 0


def test_run_end_has_the_stats_of_every_host(trail):
    end = of(trail, "run_end")[0]
    assert end["status"] == "failed" and end["hosts"]["node-b"]["failures"] == 1
    assert end["hosts"]["node-a"]["ignored"] == 2


def test_no_secret_value_is_written(trail):
    failure = next(task for task in of(trail, "task") if task["task"] == "Fail but go on")
    assert failure["msg"] == "ignored failure with ******** and ********"
    host_failure = next(task for task in of(trail, "task") if task["task"] == "Fail with host secrets in the message")
    assert host_failure["msg"] == "signing with ******** as ********"
    for value in (SECRET_ENV, SECRET_EXTRA, NO_LOG_VALUE, "unit-key", VAULTED_VALUE, HOST_PASSWORD):
        assert value not in trail["text"]


def test_the_trail_verifies_with_the_key(trail):
    assert verify_file(trail["path"], b"unit-key")["ok"]
    assert not verify_file(trail["path"], b"other-key")["ok"]


BREAKING_PLAYBOOK = """
- name: Change a host while the trail breaks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Replace the trail by a directory
      ansible.builtin.shell: rm -f {{ trail_path }} && mkdir {{ trail_path }}
      when: break_the_trail | bool
      changed_when: true
    - name: Change something
      ansible.builtin.file:
        path: "{{ marker }}"
        state: touch
      changed_when: true
"""


def run_with_trail(work, trail_path, break_the_trail):
    (work / "play.yml").write_text(BREAKING_PLAYBOOK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_CALLBACKS_ENABLED="gpuops.nvidia.audit",
               GPUOPS_AUDIT_LOG=str(trail_path), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run(["ansible-playbook", str(work / "play.yml"), "-e", "trail_path=%s" % trail_path,
                           "-e", "marker=%s" % (work / "changed"), "-e", "break_the_trail=%s" % break_the_trail,
                           "-e", "ansible_python_interpreter=%s" % sys.executable],
                          capture_output=True, text=True, env=env, timeout=240, cwd=str(work), check=False)


def test_a_trail_that_cannot_be_written_stops_the_run_before_any_change(tmp_path):
    (tmp_path / "trail-dir").mkdir()
    done = run_with_trail(tmp_path, tmp_path / "trail-dir", False)
    assert done.returncode != 0 and not (tmp_path / "changed").exists(), done.stdout + done.stderr
    assert "cannot write the audit trail %s" % (tmp_path / "trail-dir") in done.stderr


def test_a_trail_that_breaks_mid_run_stops_the_run_before_the_next_change(tmp_path):
    done = run_with_trail(tmp_path, tmp_path / "audit.jsonl", True)
    assert done.returncode != 0 and not (tmp_path / "changed").exists(), done.stdout + done.stderr
    assert "stopping the run, nothing more may change unrecorded" in done.stderr
