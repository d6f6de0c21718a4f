"""The bastion examples shipped in inventories/example/ and the execution-environment files, read by the real
tools: ansible-inventory resolves the inventory, `ssh -G` shows the options every GPU node and the bastion hop
get, ansible-builder (where installed) validates the EE definition and introspects the collection metadata."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_DIR

EXAMPLE = os.path.join(REPO_DIR, "inventories", "example")
VENV_BIN = os.path.dirname(sys.executable)


def ssh_options(host: str) -> dict:
    done = subprocess.run(["ssh", "-G", "-F", os.path.join(EXAMPLE, "ssh_config"), host], capture_output=True,
                          text=True, check=True, stdin=subprocess.DEVNULL)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def test_inventory_resolves_to_a_non_root_login_with_sudo_and_the_example_ssh_config():
    done = subprocess.run([os.path.join(VENV_BIN, "ansible-inventory"), "-i", os.path.join(EXAMPLE, "bastion.yml"),
                           "--host", "gpu-node-01"], capture_output=True, text=True, check=True)
    hostvars = json.loads(done.stdout)
    assert hostvars["ansible_user"] == "gpuops" and hostvars["ansible_become"] is True
    assert hostvars["ansible_become_method"] == "ansible.builtin.sudo"
    assert hostvars["ansible_ssh_common_args"] == "-F {{ inventory_dir }}/ssh_config"
    assert hostvars["gpuops_cluster_name"] == "gpu-prod-1"


def test_every_gpu_node_goes_through_the_bastion_in_batch_mode_with_strict_managed_host_keys():
    node = ssh_options("198.51.100.11")
    assert node["proxyjump"] == "bastion" and node["user"] == "gpuops"
    assert node["batchmode"] == "yes" and node["connecttimeout"] == "10"
    assert node["stricthostkeychecking"] == "true"
    assert node["userknownhostsfile"] == "/etc/gpuops/known_hosts" and node["globalknownhostsfile"] == "/dev/null"
    assert node["forwardagent"] == "no" and node["identitiesonly"] == "yes"


def test_the_bastion_hop_itself_is_strict_too():
    bastion = ssh_options("bastion")
    assert bastion["hostname"] == "192.0.2.10" and "proxyjump" not in bastion
    assert bastion["batchmode"] == "yes" and bastion["stricthostkeychecking"] == "true"
    assert bastion["userknownhostsfile"] == "/etc/gpuops/known_hosts"


def test_execution_environment_definition_is_valid_for_ansible_builder(tmp_path):
    ee_schema = pytest.importorskip("ansible_builder.ee_schema", reason="ansible-builder is not installed")
    with open(os.path.join(REPO_DIR, "ee", "execution-environment.yml")) as stream:
        definition = yaml.safe_load(stream)
    ee_schema.validate_schema(definition)
    with open(os.path.join(REPO_DIR, "meta", "execution-environment.yml")) as stream:
        metadata = yaml.safe_load(stream)
    for kind in ("python", "system"):
        assert os.path.isfile(os.path.join(REPO_DIR, metadata["dependencies"][kind]))


def test_ansible_builder_introspects_the_collection_requirements(tmp_path):
    pytest.importorskip("ansible_builder", reason="ansible-builder is not installed")
    tree = tmp_path / "collections"
    os.makedirs(tree / "ansible_collections" / "gpuops")
    os.symlink(REPO_DIR, str(tree / "ansible_collections" / "gpuops" / "nvidia"))
    done = subprocess.run([os.path.join(VENV_BIN, "ansible-builder"), "introspect", "--sanitize", str(tree)],
                          capture_output=True, text=True, check=True)
    found = yaml.safe_load(done.stdout)
    assert any(line.startswith("kubernetes") for line in found["python"])
    assert any(line.startswith("openssh-client [platform:dpkg]") for line in found["system"])
