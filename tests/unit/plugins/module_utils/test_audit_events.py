# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What an audit record may hold: summarised results, names instead of values, scrubbed failure messages."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.events import (
    MESSAGE_MAX_CHARS, REDACTED, collection_info, is_secret_name, operator_identity, scrub, secret_values_from_mapping,
    sha256_of_extra_vars, sha256_of_paths, summarise_result,
)


@pytest.mark.parametrize("name", ["gpuops_mok_password", "K8S_AUTH_API_KEY", "GPUOPS_AUDIT_HMAC_KEY", "api_token",
                                  "vault_signing_passphrase", "aws_secret_access_key", "ssh_private_key_file"])
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["gpuops_cluster_name", "nvidia_driver_version", "ansible_host", "HOME"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_secret_values_are_taken_from_secret_names_only_and_short_ones_are_not_scrubbed():
    values = secret_values_from_mapping({"MY_TOKEN": "tok-123456", "HOME": "/root", "pin_key": "12",
                                         "api_key": None, "nested_secret": {"a": 1}})
    assert values == {"tok-123456"}


def test_scrub_replaces_the_longest_secret_first():
    assert scrub("pw=hunter22 and hunter2", {"hunter2", "hunter22"}) == "pw=%s and %s" % (REDACTED, REDACTED)


def test_vaulted_values_count_as_secrets_whatever_their_name():
    class Vaulted:
        def __str__(self):
            return "decrypted-blob"

    class Undecryptable:
        def __str__(self):
            raise ValueError("no vault secret")

    mapping = {"signing_blob": Vaulted(), "other": Undecryptable(), "plain": "visible-value",
               "hostvars": {"h": {"x_password": "nested-secret"}}, "enabled_token": True}
    found = secret_values_from_mapping(mapping, lambda value: isinstance(value, (Vaulted, Undecryptable)))
    assert found == {"decrypted-blob"}


def test_failure_message_is_dropped_when_the_secrets_are_unknown():
    assert summarise_result("failed", {"msg": "anything"}, None)["msg"] == (
        "not recorded (the secrets to scrub from it are unknown)")


def test_ok_result_keeps_flags_and_rc_but_never_its_data():
    result = {"changed": True, "rc": 0, "stdout": "top secret output", "ansible_facts": {"x": 1}, "msg": "done",
              "diff": {"before": "a", "after": "b"}}
    assert summarise_result("ok", result, set()) == {"status": "changed", "changed": True, "failed": False,
                                                     "skipped": False, "unreachable": False, "rc": 0}


def test_failure_message_is_kept_short_and_scrubbed():
    summary = summarise_result("failed", {"msg": "login as admin with S3cretPW failed " + "x" * 1000},
                               {"S3cretPW"})
    assert summary["status"] == "failed" and "S3cretPW" not in summary["msg"] and REDACTED in summary["msg"]
    assert len(summary["msg"]) == MESSAGE_MAX_CHARS and summary["msg"].endswith("...")


def test_no_log_failure_is_censored_even_if_a_message_survived():
    summary = summarise_result("failed", {"censored": "hidden", "msg": "password is hunter2"}, set())
    assert summary["msg"] == "censored (no_log)"


def test_ignored_failure_and_loop_results_are_marked():
    summary = summarise_result("failed", {"results": [{}, {}], "msg": "one item failed"}, set(), ignore_errors=True)
    assert summary["ignored"] is True and summary["items"] == 2


def test_unreachable_and_skipped():
    assert summarise_result("unreachable", {"msg": "ssh: timeout"}, set())["unreachable"] is True
    assert summarise_result("skipped", {"skip_reason": "Conditional result was False"}, set())["status"] == "skipped"


def test_operator_identity_names_the_user_behind_sudo():
    identity = operator_identity({"SUDO_USER": "alice", "SUDO_UID": "1001", "USER": "root"}, "root", "alice", "bastion")
    assert identity == {"user": "root", "login": "alice", "host": "bastion", "sudo_user": "alice", "sudo_uid": 1001}
    assert "sudo_user" not in operator_identity({}, "ops", None, "bastion")


def test_paths_digest_covers_file_content_and_directory_layout(tmp_path):
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("all: {}\n")
    first = sha256_of_paths([str(tmp_path / "inv")])
    (tmp_path / "inv" / "group_vars").mkdir()
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text("x: 1\n")
    assert sha256_of_paths([str(tmp_path / "inv")]) != first
    assert sha256_of_paths([str(tmp_path / "inv" / "hosts.yml")]) == hashlib.sha256(b"all: {}\n\0").hexdigest()
    assert sha256_of_paths([]) is None


def test_extra_vars_digest_reads_at_files_as_bytes(tmp_path):
    varfile = tmp_path / "vars.yml"
    varfile.write_text("a: 1\n")
    digest = sha256_of_extra_vars(["@" + str(varfile), "b=2"])
    assert digest == hashlib.sha256(b"a: 1\n\0b=2\0").hexdigest()
    assert sha256_of_extra_vars(()) is None


def test_collection_info_reads_the_manifest_of_an_installed_build(tmp_path):
    (tmp_path / "MANIFEST.json").write_text('{"collection_info": {"version": "1.2.3"}}')
    assert collection_info(str(tmp_path)) == {"name": "gpuops.nvidia", "version": "1.2.3", "git_commit": None}


def test_collection_info_reads_galaxy_yml_and_the_commit_of_a_checkout(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "galaxy.yml").write_text("namespace: gpuops\nversion: '0.9.0'\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for argv in (["init", "-q"], ["add", "galaxy.yml"], ["commit", "-q", "-m", "x"]):
        subprocess.run(git + argv, check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert collection_info(str(tmp_path)) == {"name": "gpuops.nvidia", "version": "0.9.0", "git_commit": head}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "galaxy.yml").write_text("version: 0.1.0\n")
    assert collection_info(str(tmp_path / "sub"))["git_commit"] is None  # inside another repository
