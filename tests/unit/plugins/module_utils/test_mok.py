# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import mok

KERNEL_FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernel"))


def mokutil_outputs():
    with open(os.path.join(KERNEL_FIXTURES, "mokutil_outputs.txt")) as stream:
        return stream.read()


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl not installed")
def test_the_generated_certificate_is_a_der_code_signing_certificate(tmp_path):
    key, cert = str(tmp_path / "MOK.priv"), str(tmp_path / "MOK.der")
    subprocess.run(mok.openssl_generate_argv("openssl", key, cert, "node-7 / module signing", days=30), check=True,
                   capture_output=True)
    text = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", cert, "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout
    subject = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", cert, "-noout", "-subject"], check=True,
                             capture_output=True, text=True).stdout
    assert mok.has_code_signing_usage(text)
    assert "1.3.6.1.4.1.2312.16.1.2" in text and "CA:FALSE" in text and "Digital Signature" in text
    assert mok.certificate_subject_cn(subject).startswith("node-7")
    assert "RSA Public-Key: (2048 bit)" in text or "Public-Key: (2048 bit)" in text


def test_a_certificate_without_code_signing_is_told_apart():
    text = "        X509v3 extensions:\n            X509v3 Extended Key Usage: \n                TLS Web Server Authentication\n"
    assert not mok.has_code_signing_usage(text)
    assert not mok.has_code_signing_usage("")


@pytest.mark.parametrize("line, cn", [
    ("subject=CN = gpuops.nvidia module signing key\n", "gpuops.nvidia module signing key"),
    ("subject= /CN=old openssl style", "old openssl style"),
    ("subject=O = Example, CN = node signing", "node signing"),
    ("subject=O = Example\n", None),
])
def test_subject_common_name(line, cn):
    assert mok.certificate_subject_cn(line) == cn


def test_test_key_answers_from_mokutil_text():
    text = mokutil_outputs()
    assert "is already enrolled" in text
    assert mok.parse_test_key("/var/lib/gpuops/mok/MOK.der is already enrolled\n") == "enrolled"
    assert mok.parse_test_key("/var/lib/gpuops/mok/MOK.der is not enrolled\n") == "not_enrolled"
    assert mok.parse_test_key("EFI variables are not supported on this system\n") is None


def test_dkms_drop_in_points_at_the_same_pair():
    text = mok.dkms_framework_conf("/var/lib/gpuops/mok/MOK.priv", "/var/lib/gpuops/mok/MOK.der")
    assert "mok_signing_key=/var/lib/gpuops/mok/MOK.priv\nmok_certificate=/var/lib/gpuops/mok/MOK.der\n" in text
    assert all(line.startswith("#") or "=" in line for line in text.splitlines())


NONE = {"private_key": False, "certificate": False}
BOTH = {"private_key": True, "certificate": True}


@pytest.mark.parametrize("files, content, enrollment, password, enroll, expected", [
    (NONE, False, None, True, True, {"key_action": "generate", "stage": True, "error": None}),
    (NONE, False, None, False, False, {"key_action": "generate", "stage": False, "error": None}),
    (BOTH, False, "enrolled", False, True, {"key_action": "keep", "stage": False, "error": None}),
    (BOTH, False, "pending", False, True, {"key_action": "keep", "stage": False, "error": None}),
    (BOTH, False, "not_enrolled", True, True, {"key_action": "keep", "stage": True, "error": None}),
    (BOTH, True, "enrolled", False, True, {"key_action": "write", "stage": False, "error": None}),
    (BOTH, False, None, False, True, {"key_action": "keep", "stage": False, "error": None}),
])
def test_plan(files, content, enrollment, password, enroll, expected):
    assert mok.plan(files, content, enrollment, password, enroll) == expected


def test_staging_without_a_password_is_refused_before_anything():
    decision = mok.plan(NONE, False, None, False, True)
    assert decision["stage"] is False and "(password)" in decision["error"]
    assert "nvidia_driver_mok_password" not in decision["error"]  # the module option, never the role variable


def test_half_a_key_pair_is_never_replaced():
    decision = mok.plan({"private_key": True, "certificate": False}, False, None, True, True)
    assert decision["key_action"] is None and "the certificate is missing" in decision["error"]
