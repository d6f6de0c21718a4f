"""A running twin driven from outside, as an operator would: ``start_lab(state_dir, *up_args)`` gives a ``Lab``
(its CLI, ssh, ansible, playbook and event-log helpers), ``stop_lab`` takes it down; ``collections_path()`` finds
the collection tree under test. Used by lab/tests (through conftest) and benchmarks/."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpulab.events import read_events

LAB_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO_DIR = os.path.dirname(LAB_DIR)
VENV_BIN = os.path.dirname(sys.executable)


def lab_env(extra_pythonpath=()) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([LAB_DIR] + list(extra_pythonpath))
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env["ANSIBLE_DEPRECATION_WARNINGS"] = "false"
    env["ANSIBLE_HOST_KEY_CHECKING"] = "true"
    return env


class Lab:
    """A running lab: CLI, ssh, ansible and event-log helpers."""

    def __init__(self, state_dir: str, extra_pythonpath=()):
        self.state_dir = state_dir
        self.extra_pythonpath = list(extra_pythonpath)
        self.env = lab_env(self.extra_pythonpath)

    def gpulab(self, *args, check=True, timeout=180) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "gpulab"] + [args[0], "--state-dir", self.state_dir] + list(args[1:])
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError("gpulab %s failed (%d): %s%s" % (" ".join(args), done.returncode, done.stdout,
                                                                  done.stderr))
        return done

    @property
    def info(self) -> dict:
        with open(os.path.join(self.state_dir, "lab.json")) as stream:
            return json.load(stream)

    @property
    def node_names(self) -> list:
        return [node["name"] for node in self.info["nodes"]]

    def ssh(self, node: str, command: str, check=True, timeout=30) -> subprocess.CompletedProcess:
        done = subprocess.run(["ssh", "-F", os.path.join(self.state_dir, "ssh_config"), "-o", "ControlMaster=no",
                               node, command], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError("ssh %s %r failed (%d): %s%s" % (node, command, done.returncode, done.stdout,
                                                                  done.stderr))
        return done

    def ansible(self, pattern: str, module: str, args: str = "", check=True, timeout=120, env=None):
        argv = ["ansible", "-i", os.path.join(self.state_dir, "inventory.yml"), pattern, "-m", module]
        if args:
            argv += ["-a", args]
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(self.env, **(env or {})),
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError("ansible %s -m %s failed (%d): %s%s" % (pattern, module, done.returncode,
                                                                         done.stdout, done.stderr))
        return done

    def playbook(self, path: str, check=True, timeout=180, env=None):
        done = subprocess.run(["ansible-playbook", "-i", os.path.join(self.state_dir, "inventory.yml"), path],
                              capture_output=True, text=True, env=dict(self.env, **(env or {})), timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError("ansible-playbook failed (%d): %s%s" % (done.returncode, done.stdout, done.stderr))
        return done

    def events(self, node=None, kind=None, since=0.0) -> list:
        return read_events(self.state_dir, node=node, kind=kind, since=since)

    def node_status(self, node: str) -> dict:
        status = json.loads(self.gpulab("status", "--json").stdout)
        return next(one for one in status["nodes"] if one["name"] == node)

    def wait_status(self, node: str, status: str, timeout_s: float = 30) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            current = self.node_status(node)
            if current["status"] == status and (status != "up" or current["ssh"]):
                return current
            time.sleep(0.2)
        raise AssertionError("%s not %s after %ss: %s" % (node, status, timeout_s, self.node_status(node)))

    def wait_event(self, node: str, kind: str, since: float, timeout_s: float = 30) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.events(node=node, kind=kind, since=since)
            if found:
                return found[0]
            time.sleep(0.1)
        raise AssertionError("no %s event for %s within %ss" % (kind, node, timeout_s))

    def reboot_from_inside(self, node: str) -> str:
        """`reboot` run by the operator on the node; returns the new boot_id once sshd is back."""
        before = self.node_status(node)["boot_id"]
        since = time.time()
        self.ssh(node, "reboot")
        self.wait_event(node, "up", since)
        after = self.wait_status(node, "up")
        assert after["boot_id"] != before
        return after["boot_id"]


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the fleet twin needs root (namespaces, mounts, sshd)")


def start_lab(state_dir: str, *up_args, extra_pythonpath=()) -> Lab:
    require_root()
    lab = Lab(state_dir, extra_pythonpath)
    try:
        lab.gpulab("up", *up_args)
    except BaseException:
        # a lab that failed to start keeps its daemon, nodes and mounts (for `status`): the test gets no Lab to
        # stop, so take it down here
        stop_lab(lab)
        raise
    return lab


def stop_lab(lab: Lab) -> None:
    if os.path.exists(os.path.join(lab.state_dir, "lab.json")):
        lab.gpulab("down", check=False)


def collections_path():
    """A folder holding ansible_collections/gpuops/nvidia with the facts module: $ANSIBLE_COLLECTIONS_PATH (make
    lab-test sets it to the collection tree), an entry of $PYTHONPATH or the checkout's .tree symlink tree."""
    candidates = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep)
    candidates += os.environ.get("PYTHONPATH", "").split(os.pathsep) + [os.path.join(REPO_DIR, ".tree")]
    for candidate in candidates:
        module = os.path.join(candidate, "ansible_collections", "gpuops", "nvidia", "plugins", "modules",
                              "nvidia_driver_facts.py")
        if candidate and os.path.exists(module):
            return candidate
    return None


def module_command(module: str, args: dict):
    """``(argv, env)`` of an ad-hoc ``ansible localhost -m MODULE`` run with this interpreter and the collection
    tree (the way a test drives one of the collection's controller modules outside a playbook)."""
    path = collections_path()
    if path is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test`")
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
            "ansible_python_interpreter=%s" % sys.executable, "-m", module, "-a", json.dumps(args)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=path, ANSIBLE_DEPRECATION_WARNINGS="false",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return argv, env
