# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real mok_signing_key main() with the real openssl on key files under tmp_path and a mokutil script
that answers like mokutil for a key that is not enrolled; the refusals must leave every file as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import mok_signing_key
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

pytestmark = pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")


@pytest.fixture
def node(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "mokutil.calls"
    mokutil = bin_dir / "mokutil"
    mokutil.write_text('#!/bin/sh\necho "$*" >> "%s"\ncase "$1" in\n  --sb-state) echo "SecureBoot enabled" ;;\n'
                       '  --test-key) echo "$2 is not enrolled" ;;\n  --list-new) echo "MokNew is empty" ;;\n'
                       '  --import) cat > /dev/null ;;\nesac\nexit 0\n' % calls)
    mokutil.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    return {"dir": tmp_path / "mok", "conf": tmp_path / "dkms" / "gpuops-mok.conf", "calls": calls}


def run(capsys, node, **args):
    args.setdefault("private_key_path", str(node["dir"] / "MOK.priv"))
    args.setdefault("certificate_path", str(node["dir"] / "MOK.der"))
    args.setdefault("dkms_framework_conf", str(node["conf"]))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mok_signing_key.main()
    return json.loads(capsys.readouterr().out)


def listing(path):
    return sorted(os.listdir(str(path))) if os.path.isdir(str(path)) else None


def test_without_a_password_nothing_is_made(capsys, node):
    result = run(capsys, node)
    assert result["failed"] and "no one-time password was given" in result["msg"] and "nothing was changed" in result["msg"]
    assert listing(node["dir"]) is None and not node["conf"].exists()


def test_a_new_key_is_made_private_pointed_at_by_dkms_and_staged(capsys, node):
    result = run(capsys, node, password="s3cret", subject="node signing key")
    assert result["changed"] and result["key_action"] == "generate" and result["staged"]
    assert result["subject"] == "node signing key" and len(result["fingerprint"]) == 40
    assert oct(os.stat(str(node["dir"] / "MOK.priv")).st_mode & 0o777) == "0o600"
    assert oct(os.stat(str(node["dir"])).st_mode & 0o777) == "0o700"
    assert "mok_signing_key=%s" % (node["dir"] / "MOK.priv") in node["conf"].read_text()
    assert "--import %s" % (node["dir"] / "MOK.der") in node["calls"].read_text()
    assert "s3cret" not in json.dumps(result)


def test_half_a_key_pair_is_left_alone(capsys, node):
    node["dir"].mkdir()
    (node["dir"] / "MOK.priv").write_text("a key someone still needs")
    result = run(capsys, node, password="s3cret")
    assert result["failed"] and "only half of the MOK key pair" in result["msg"]
    assert (node["dir"] / "MOK.priv").read_text() == "a key someone still needs"
    assert not node["conf"].exists()


def make_pair(directory, extensions):
    directory.mkdir(exist_ok=True)
    argv = ["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x/",
            "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")]
    for extension in extensions:
        argv += ["-addext", extension]
    subprocess.run(argv, check=True, capture_output=True)
    return (directory / "key.pem").read_text(), (directory / "cert.pem").read_text()


def test_vault_material_without_code_signing_is_refused(capsys, node, tmp_path):
    key, cert = make_pair(tmp_path / "tls", ["extendedKeyUsage=serverAuth"])
    result = run(capsys, node, private_key_content=key, certificate_content=cert, password="s3cret")
    assert result["failed"] and "no Code Signing extended key usage" in result["msg"]
    assert listing(node["dir"]) is None


def test_vault_key_that_is_not_the_certificates_is_refused(capsys, node, tmp_path):
    key, _cert = make_pair(tmp_path / "one", ["extendedKeyUsage=codeSigning"])
    _key, cert = make_pair(tmp_path / "two", ["extendedKeyUsage=codeSigning"])
    result = run(capsys, node, private_key_content=key, certificate_content=cert, password="s3cret")
    assert result["failed"] and "does not belong to the certificate" in result["msg"]
    assert listing(node["dir"]) is None


def test_vault_material_is_written_and_a_second_run_changes_nothing_but_the_staging(capsys, node, tmp_path):
    key, cert = make_pair(tmp_path / "vault", ["extendedKeyUsage=codeSigning"])
    first = run(capsys, node, private_key_content=key, certificate_content=cert, password="s3cret")
    assert first["changed"] and first["key_action"] == "write" and first["subject"] == "x"
    second = run(capsys, node, private_key_content=key, certificate_content=cert, password="s3cret", enroll=False)
    assert second["changed"] is False


def test_check_mode_changes_nothing(capsys, node):
    result = run(capsys, node, password="s3cret", _ansible_check_mode=True)
    assert result["changed"] and result["key_action"] == "generate"
    assert listing(node["dir"]) is None and not node["conf"].exists()
