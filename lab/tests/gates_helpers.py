"""Running the collection's Kubernetes gate modules against a twin lab with real ansible, and reading the twin's
API with the official client (shared by test_gates_wait.py, test_gates_lock.py and benchmarks/gates_wait.py)."""
from __future__ import annotations

import json
import os
import subprocess
import time

from conftest import collections_path


def module_env(lab) -> dict:
    env = dict(lab.env)
    env.update(ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=collections_path() or "")
    return env


def module_argv(module: str, args: dict, check: bool = False) -> list:
    argv = ["ansible", "localhost", "-m", "gpuops.nvidia." + module, "-a", json.dumps(args)]
    return argv + (["--check"] if check else [])


def parse_adhoc(stdout: str) -> dict:
    """The result dict of `ansible localhost -m ...` ('localhost | SUCCESS => {...}')."""
    return json.loads(stdout[stdout.index("=> ") + 3:])


def run_module(lab, module: str, args: dict, check: bool = False, timeout: float = 180):
    """(ok, result) of one module run on localhost with the lab's kubeconfig."""
    args = dict({"kubeconfig": lab.info["kube"]["kubeconfig"]}, **args)
    done = subprocess.run(module_argv(module, args, check), capture_output=True, text=True, env=module_env(lab),
                          timeout=timeout)
    if "=> " not in done.stdout:
        raise AssertionError("no module result (%d): %s%s" % (done.returncode, done.stdout, done.stderr))
    return done.returncode == 0, parse_adhoc(done.stdout)


def start_module(lab, module: str, args: dict) -> subprocess.Popen:
    args = dict({"kubeconfig": lab.info["kube"]["kubeconfig"]}, **args)
    return subprocess.Popen(module_argv(module, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=module_env(lab))


def kube_client(lab):
    import kubernetes
    return kubernetes.config.new_client_from_config(config_file=lab.info["kube"]["kubeconfig"])


def read_node(lab, name: str) -> dict:
    import kubernetes
    response = kubernetes.client.CoreV1Api(kube_client(lab)).read_node(name, _preload_content=False)
    return json.loads(response.data)


def requests(state_dir: str, since: float, verb=None, path_part: str = "", user_agent_part: str = "") -> list:
    """Requests the twin's API server recorded (when each ended) since `since` (epoch seconds)."""
    found = []
    with open(os.path.join(state_dir, "kube-records.jsonl")) as stream:
        for line in stream:
            if '"record":"request"' not in line:
                continue
            record = json.loads(line)
            if record["ts"] >= since and (verb is None or record.get("verb") == verb) \
                    and path_part in record.get("path", "") and user_agent_part in (record.get("user_agent") or ""):
                found.append(record)
    return found


def read_lease(lab, namespace: str, name: str) -> dict:
    import kubernetes
    response = kubernetes.client.CoordinationV1Api(kube_client(lab)).read_namespaced_lease(
        name, namespace, _preload_content=False)
    return json.loads(response.data)


def watch_requests(state_dir: str, since: float, path_part: str = "/nodes") -> int:
    """Watch requests on paths containing `path_part` that ended since `since` (a watch is recorded when it
    closes)."""
    return len(requests(state_dir, since, "watch", path_part))


def wait_listed(state_dir: str, since: float, user_agent_part: str, path_part: str = "/nodes",
                timeout_s: float = 120.0) -> None:
    """Waits until a client (by user agent) has listed `path_part` since `since`: its watch follows at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if requests(state_dir, since, "list", path_part, user_agent_part):
            return
        time.sleep(0.1)
    raise AssertionError("no list of %s by %s within %ss" % (path_part, user_agent_part, timeout_s))
