"""Running the collection's modules against a twin with real ansible (``ansible localhost -m gpuops.nvidia.X``),
and reading the twin's Kubernetes API with the official client. Used by lab/tests and benchmarks/."""
from __future__ import annotations

import json
import subprocess
import time

from gpulab.testkit.lab import collections_path


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


def gpu_allocatable(lab, name: str):
    """The node's allocatable nvidia.com/gpu as the API reports it (a string), None when it has none."""
    return (read_node(lab, name)["status"].get("allocatable") or {}).get("nvidia.com/gpu")


def wait_allocatable(lab, name: str, wanted: str, timeout_s: float = 60):
    """Poll the node's allocatable nvidia.com/gpu until it is `wanted` or `timeout_s` passed; the last value seen."""
    deadline, seen = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        seen = gpu_allocatable(lab, name)
        if seen == wanted:
            break
        time.sleep(0.3)
    return seen


def read_lease(lab, namespace: str, name: str) -> dict:
    import kubernetes
    response = kubernetes.client.CoordinationV1Api(kube_client(lab)).read_namespaced_lease(
        name, namespace, _preload_content=False)
    return json.loads(response.data)
