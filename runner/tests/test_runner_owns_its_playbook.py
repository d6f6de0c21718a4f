"""Issue 27 point 11: the runner owns its playbook. When the runner fails (an exception inside it) or is stopped
by a signal (SIGTERM, SIGHUP: ansible-runner's pexpect child ignores SIGHUP and leads its own session), the
playbook's process group is stopped and the stop is recorded in the trail; no ansible-playbook is left running.
A real ansible-playbook run on localhost, through the real audit callback, from a collection whose diagnose
runbook sleeps."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO_DIR
from gpuops_runner import exitcodes, process, runbook
from gpuops_runner.cli import main

pytest.importorskip("ansible_runner")
RUNNER_SRC = os.path.join(REPO_DIR, "runner", "src")
SLEEPING_PLAY = """
- name: Sleep on the node ({marker})
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
    - name: Sleep like a long drain
      ansible.builtin.command: sleep 60
      changed_when: true
"""


@pytest.fixture
def sleeping(tmp_path, monkeypatch):
    if shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("ansible-playbook is not installed beside this python")
    marker = "gpuops-owned-%d-%s" % (os.getpid(), tmp_path.name)
    collection = tmp_path / "collections" / "ansible_collections" / "gpuops" / "nvidia"
    (collection / "playbooks").mkdir(parents=True)
    for name in ("plugins", "meta", "galaxy.yml"):
        os.symlink(os.path.join(REPO_DIR, name), str(collection / name))
    (collection / "playbooks" / "diagnose.yml").write_text(SLEEPING_PLAY.format(marker=marker))
    (tmp_path / "inventory.yml").write_text(
        "gpu_nodes:\n  hosts:\n    n1:\n      ansible_connection: local\n      gpuops_cluster_name: lab\n"
        "      ansible_python_interpreter: %s\n" % sys.executable)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return {"collections": str(tmp_path / "collections"), "inventory": str(tmp_path / "inventory.yml"),
            "data": str(tmp_path / "data"), "marker": marker}


def playbooks_running(marker):
    """pids of processes whose command line names the sleeping playbook's marker or its sleep."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as stream:
                command = stream.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open("/proc/%s/environ" % pid, "rb") as stream:
                environ = stream.read()
        except OSError:
            continue
        if "ansible-playbook" in command and marker.encode() in environ:
            found.append(int(pid))
    return found


def trail(data):
    with open(os.path.join(data, "audit.jsonl")) as stream:
        return [json.loads(line) for line in stream]


def wait_for(predicate, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_runner_that_fails_mid_run_stops_its_playbook_and_records_it(sleeping, monkeypatch, capsys):
    real_censor = runbook.censor_event

    def failing_censor(event, secrets):
        if event.get("event") == "runner_on_start" and "Sleep" in (event.get("event_data") or {}).get("task", ""):
            raise RuntimeError("the runner broke")
        return real_censor(event, secrets)

    monkeypatch.setattr(runbook, "censor_event", failing_censor)
    monkeypatch.setenv("GPUOPS_TEST_MARKER", sleeping["marker"])
    code = main(["diagnose", "-i", sleeping["inventory"], "--data-dir", sleeping["data"],
                 "--collections-path", sleeping["collections"]])
    assert code == exitcodes.INTERRUPTED
    assert "the runner failed (RuntimeError: the runner broke); the playbook was stopped" in capsys.readouterr().err
    assert playbooks_running(sleeping["marker"]) == []
    end = trail(sleeping["data"])[-1]
    assert end["event"] == "runner_end" and end["playbook_stopped"] is True and "the runner broke" in end["reason"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signalled_runner_stops_its_playbook_and_records_it(sleeping, signum):
    env = dict(os.environ, PYTHONPATH=RUNNER_SRC, GPUOPS_TEST_MARKER=sleeping["marker"])
    runner = subprocess.Popen([sys.executable, "-m", "gpuops_runner", "diagnose", "-i", sleeping["inventory"],
                               "--data-dir", sleeping["data"], "--collections-path", sleeping["collections"]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              stdin=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: os.path.exists(os.path.join(sleeping["data"], "audit.jsonl")) and any(
            record.get("task") == "Say hello" for record in trail(sleeping["data"])))
        assert playbooks_running(sleeping["marker"])
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == exitcodes.INTERRUPTED, out + err
    assert "Traceback" not in err and "interrupted by %s" % signal.Signals(signum).name in err
    assert wait_for(lambda: playbooks_running(sleeping["marker"]) == [], 15)
    end = trail(sleeping["data"])[-1]
    assert end["event"] == "runner_end" and end["playbook_stopped"] is True
    assert end["reason"] == "stopped by %s" % signal.Signals(signum).name


def test_stop_tree_ends_detached_descendants_too():
    leader = subprocess.Popen(["sh", "-c", "setsid sleep 60 & sleep 60; wait"], start_new_session=True)
    try:
        assert wait_for(lambda: len(process.tree([leader.pid])) >= 3, 10)
        family = process.tree([leader.pid])
        assert sorted(process.stop_tree([leader.pid], grace_s=5)) == sorted(family)
        assert leader.wait(10) is not None
        assert all(not os.path.exists("/proc/%d/cmdline" % pid) or open("/proc/%d/stat" % pid).read().split(
            ")")[-1].split()[0] == "Z" for pid in family)
    finally:
        if leader.poll() is None:
            leader.kill()
