"""The runner's unit tests import the package from runner/src and the collection's audit helpers from this
checkout (through a temporary ansible_collections/gpuops/nvidia symlink)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

RUNNER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(RUNNER_DIR)
sys.path.insert(0, os.path.join(RUNNER_DIR, "src"))


@pytest.fixture(scope="session")
def collections_path(tmp_path_factory):
    tree = tmp_path_factory.mktemp("collections")
    os.makedirs(tree / "ansible_collections" / "gpuops")
    os.symlink(REPO_DIR, str(tree / "ansible_collections" / "gpuops" / "nvidia"))
    return str(tree)


@pytest.fixture(scope="session")
def chain(collections_path):
    from gpuops_runner import collection
    return collection.audit_api(collections_path)[0]


@pytest.fixture(scope="session")
def events(collections_path):
    from gpuops_runner import collection
    return collection.audit_api(collections_path)[1]


def keypair(tmp_path, name):
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


@pytest.fixture()
def people(tmp_path):
    """alice@ops and bob@ops: an SSH key each and the allowed-signers file naming both (real ssh-keygen)."""
    from gpuops_runner import approval
    alice, bob = keypair(tmp_path, "alice"), keypair(tmp_path, "bob")
    signers = tmp_path / "allowed_signers"
    lines = []
    for who, key in (("alice@ops", alice), ("bob@ops", bob)):
        pub = (tmp_path / (key.name + ".pub")).read_text().split()
        lines.append('%s namespaces="%s" %s %s' % (who, approval.NAMESPACE, pub[0], pub[1]))
    signers.write_text("\n".join(lines) + "\n")
    return {"alice": str(alice), "bob": str(bob), "signers": str(signers)}
