"""The `gpuops` command of the checkout (runner/src) as the twin tests run it, and its audit trail's records."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_DIR, collections_path

RUNNER_SRC = os.path.join(REPO_DIR, "runner", "src")


def collection_path() -> str:
    path = collections_path()
    if path is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test`")
    return path


def gpuops(*args, env=None, collections=None, timeout=300) -> subprocess.CompletedProcess:
    """`gpuops ARGS` (the console script's entry point, run from the checkout's runner/src)."""
    full_env = dict(os.environ)
    full_env.update({"PYTHONPATH": RUNNER_SRC, "ANSIBLE_COLLECTIONS_PATH": collections or collection_path(),
                     "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                     "ANSIBLE_DEPRECATION_WARNINGS": "false"})
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpuops_runner"] + list(args), capture_output=True, text=True,
                          env=full_env, timeout=timeout, stdin=subprocess.DEVNULL)


def records(path) -> list:
    with open(path) as stream:
        return [json.loads(line) for line in stream]
