"""Running the collection's roles on twin nodes: a one-role playbook with its variables, and what it reported.

The playbook includes the role on the hosts asked for and, after it, writes the role's result variable (when
set) to a JSON file per host on the controller (a task that reports no change, so the recap counts only the
role's), so tests read what the role said without parsing its output.
"""
from __future__ import annotations

import json
import os
import subprocess

import yaml

from conftest import collections_path


def run_role(lab, role: str, role_vars: dict, workdir: str, hosts: str = "gpu_nodes", result_var: str | None = None,
             check_mode: bool = False, timeout: int = 300) -> dict:
    """Run `gpuops.nvidia.<role>` with `role_vars`; returns {rc, output, results: {host: result_var value}}."""
    os.makedirs(workdir, exist_ok=True)
    results_dir = os.path.join(workdir, "results")
    os.makedirs(results_dir, exist_ok=True)
    for name in os.listdir(results_dir):
        os.unlink(os.path.join(results_dir, name))
    tasks = [{"name": "Run the role", "ansible.builtin.include_role": {"name": "gpuops.nvidia.%s" % role}}]
    if result_var:
        tasks.append({"name": "Hand the role's result to the test",
                      "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % result_var,
                                               "dest": results_dir + "/{{ inventory_hostname }}.json",
                                               "mode": "0644"},
                      "delegate_to": "localhost", "check_mode": False, "changed_when": False})
    play = [{"name": "Role %s on the twin" % role, "hosts": hosts, "gather_facts": True, "vars": role_vars,
             "tasks": tasks}]
    path = os.path.join(workdir, "play-%s.yml" % role)
    with open(path, "w") as stream:
        yaml.safe_dump(play, stream, sort_keys=False)
    argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), path]
    if check_mode:
        argv.append("--check")
    env = dict(lab.env)
    found = collections_path()
    if found:
        env["ANSIBLE_COLLECTIONS_PATH"] = found
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    results = {}
    for name in os.listdir(results_dir):
        with open(os.path.join(results_dir, name)) as stream:
            results[name[:-len(".json")]] = json.load(stream)
    return {"rc": done.returncode, "output": done.stdout + done.stderr, "results": results}


def recap(output: str, host: str) -> dict:
    """The PLAY RECAP counters of one host: {'ok': 20, 'changed': 0, ...}."""
    for line in output.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return {key: int(value) for key, value in (pair.split("=") for pair in line.split(":", 1)[1].split())}
    raise AssertionError("no PLAY RECAP line for %s in:\n%s" % (host, output[-3000:]))
