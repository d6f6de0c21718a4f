"""The fake mokutil over a node's efi.json behaves like mokutil 0.6 on a real host, and MokManager's rule holds:
a staged key is enrolled at the next boot only when someone confirmed it at the console."""
from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(LAB_DIR)
sys.path.insert(0, LAB_DIR)

from conftest import fixture_path  # noqa: E402
from gpulab.nvidia import mok  # noqa: E402


def make_key(directory, common_name: str) -> str:
    """A MOK key pair like the one `openssl req -x509` makes for module signing; returns the DER cert path."""
    key, cert = os.path.join(directory, common_name + ".priv"), os.path.join(directory, common_name + ".der")
    subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "36500",
                    "-subj", "/CN=%s/" % common_name, "-keyout", key, "-outform", "DER", "-out", cert],
                   check=True, capture_output=True)
    return cert


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("mok-keys"))
    return {"ops": make_key(directory, "gpu ops Secure Boot Module Signature key"),
            "other": make_key(directory, "someone else")}


@pytest.fixture
def efi_path(tmp_path):
    path = str(tmp_path / "efi.json")
    mok.save_efi_state(path, mok.default_efi_state(efi=True, secure_boot=True))
    return path


def mokutil(efi_path: str, *argv, stdin: str = "") -> tuple:
    out, err = io.StringIO(), io.StringIO()
    rc = mok.run(list(argv), efi_path, mok.Console(io.StringIO(stdin), out, err))
    return rc, out.getvalue(), err.getvalue()


def real_strings() -> list:
    with open(fixture_path("mokutil_outputs.txt"), encoding="utf-8") as handle:
        return [line for line in handle.read().splitlines() if line and not line.startswith("#")]


def test_sb_state_prints_the_real_texts_and_exit_codes(efi_path):
    assert mokutil(efi_path, "--sb-state")[:2] == (0, "SecureBoot enabled\n")
    state = dict(mok.load_efi_state(efi_path), secure_boot=False, setup_mode=True)
    mok.save_efi_state(efi_path, state)
    rc, out, _err = mokutil(efi_path, "--sb-state")
    assert rc == 1 and out.splitlines() == ["SecureBoot disabled", "Platform is in Setup Mode"]
    assert set(out.splitlines()) <= set(real_strings())


def test_legacy_bios_node_says_efi_variables_are_not_supported_on_stderr(tmp_path):
    path = str(tmp_path / "efi.json")
    mok.save_efi_state(path, mok.default_efi_state(efi=False))
    rc, out, err = mokutil(path, "--sb-state")
    assert rc != 0 and out == "" and err == "EFI variables are not supported on this system\n"
    assert "EFI variables are not supported on this system" in real_strings()


def test_import_prompts_twice_and_stages_the_key_without_enrolling_it(efi_path, keys):
    rc, out, _err = mokutil(efi_path, "--import", keys["ops"], stdin="s3cret\ns3cret\n")
    assert rc == 0 and out == "input password: \ninput password again: \n"
    rc, listed, _err = mokutil(efi_path, "--list-new")
    assert listed.startswith("[key 1]\nSHA1 Fingerprint: ") and "Subject: CN = gpu ops Secure Boot" in listed
    assert mokutil(efi_path, "--test-key", keys["ops"])[1] == "%s is not enrolled\n" % keys["ops"]
    assert mokutil(efi_path, "--list-enrolled")[1] == "MokListRT is empty\n"


def test_import_with_mismatching_passwords_aborts_and_stages_nothing(efi_path, keys):
    rc, out, err = mokutil(efi_path, "--import", keys["ops"], stdin="a\nb\na\nc\nd\ne\n")
    assert rc != 0 and out.count("password doesn't match") == 3 and "Abort" in err
    assert mok.load_efi_state(efi_path)["pending"] == []


def test_import_of_a_file_that_is_not_a_der_certificate_is_refused(efi_path, tmp_path):
    bogus = tmp_path / "key.pem"
    bogus.write_text("-----BEGIN CERTIFICATE-----\nnope\n")
    rc, _out, err = mokutil(efi_path, "--import", str(bogus), "--root-pw")
    assert rc != 0 and err == "Abort!!! %s is not a valid x509 certificate in DER format\n" % bogus


def test_staged_key_is_enrolled_at_boot_only_when_confirmed_at_the_console(efi_path, keys):
    mokutil(efi_path, "--import", keys["ops"], "--root-pw")
    unconfirmed, enrolled = mok.apply_staged_keys(mok.load_efi_state(efi_path))
    assert enrolled == [] and unconfirmed["enrolled"] == [] and unconfirmed["pending"] == []

    mokutil(efi_path, "--import", keys["ops"], "--root-pw")
    state = dict(mok.load_efi_state(efi_path), pending_confirmed=True)
    after_boot, enrolled = mok.apply_staged_keys(state)
    mok.save_efi_state(efi_path, after_boot)
    assert len(enrolled) == 1 and after_boot["pending"] == [] and after_boot["pending_confirmed"] is False
    rc, out, _err = mokutil(efi_path, "--test-key", keys["ops"])
    assert (rc, out) == (1, "%s is already enrolled\n" % keys["ops"])
    assert mokutil(efi_path, "--test-key", keys["other"])[1].endswith("is not enrolled\n")
    assert mokutil(efi_path, "--import", keys["ops"], "--root-pw")[1] == "SKIP: %s is already enrolled\n" % keys["ops"]


def test_list_enrolled_prints_key_blocks_with_sha1_and_openssl_text(efi_path, keys):
    with open(keys["ops"], "rb") as handle:
        der = handle.read()
    state = dict(mok.load_efi_state(efi_path), enrolled=[{"der_b64": __import__("base64").b64encode(der).decode()}])
    mok.save_efi_state(efi_path, state)
    out = mokutil(efi_path, "--list-enrolled")[1]
    openssl_text = subprocess.run(["openssl", "x509", "-inform", "DER", "-text", "-noout", "-in", keys["ops"]],
                                  capture_output=True, text=True, check=True).stdout
    fingerprint = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-fingerprint", "-sha1", "-in",
                                  keys["ops"]], capture_output=True, text=True, check=True).stdout
    assert out == "[key 1]\nSHA1 Fingerprint: %s\n%s" % (fingerprint.split("=", 1)[1].strip().lower(), openssl_text)


def test_collection_parser_reads_the_fake_mokutil_as_the_efi_state_says(efi_path, keys, tmp_path):
    tree = tmp_path / "tree"
    os.makedirs(tree / "ansible_collections" / "gpuops")
    os.symlink(REPO_DIR, str(tree / "ansible_collections" / "gpuops" / "nvidia"))
    sys.path.insert(0, str(tree))
    try:
        state_parser = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state")
    except ImportError as error:
        pytest.skip("collection parsers not importable: %s" % error)
    mokutil(efi_path, "--import", keys["ops"], keys["other"], "--root-pw")
    after_boot, _enrolled = mok.apply_staged_keys(dict(mok.load_efi_state(efi_path), pending_confirmed=True))
    mok.save_efi_state(efi_path, after_boot)
    mokutil(efi_path, "--import", keys["ops"], "--root-pw")   # already enrolled: skipped, nothing new staged
    enrolled = state_parser.parse_mok_list(mokutil(efi_path, "--list-enrolled")[1])
    assert [(key["fingerprint"], state_parser.common_name(key["subject"])) for key in enrolled] == \
        [(entry["fingerprint"], entry["subject"]) for entry in mok.key_summaries(after_boot["enrolled"])]
    assert state_parser.parse_sb_state(mokutil(efi_path, "--sb-state")[1]) == {"enabled": True, "setup_mode": False}
    assert state_parser.parse_mok_list(mokutil(efi_path, "--list-new")[1]) == []


def test_entry_script_runs_in_a_node_root_like_the_real_binary(tmp_path, keys):
    firmware = tmp_path / "run" / "gpulab-firmware"
    firmware.mkdir(parents=True)
    mok.save_efi_state(str(firmware / "efi.json"), mok.default_efi_state(secure_boot=False))
    script = os.path.join(LAB_DIR, "gpulab", "nvidia", "bin", "mokutil")
    done = subprocess.run([script, "--import", keys["ops"]], input="pw\npw\n", capture_output=True, text=True,
                          env=dict(os.environ, GPULAB_NODE_ROOT=str(tmp_path)))
    assert done.returncode == 0 and done.stdout == "input password: \ninput password again: \n"
    assert len(json.loads((firmware / "efi.json").read_text())["pending"]) == 1
