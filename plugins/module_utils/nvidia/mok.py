# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Machine Owner Key decisions (private to this collection): the openssl command that makes a module-signing
key pair, reading mokutil's answers, the DKMS framework drop-in that points DKMS at the same key, and the
plan of what mok_signing_key must do. No I/O here.
"""

from __future__ import annotations

import re

# EKUs of a module-signing MOK: code signing, and the kernel's "module signing only" OID (1.3.6.1.4.1.2312.16.1.2,
# which shim and the kernel's keyring treat as restricted to modules).
CODE_SIGNING_EKU = "codeSigning"
MODULE_SIGNING_OID = "1.3.6.1.4.1.2312.16.1.2"
DEFAULT_DAYS = 36500
KEY_BITS = 2048


def openssl_generate_argv(openssl, key_path, certificate_path, subject_cn, days=DEFAULT_DAYS):
    """`openssl req` making a self-signed RSA key pair for module signing, certificate in DER as mokutil wants."""
    return [openssl, "req", "-new", "-x509", "-newkey", "rsa:%d" % KEY_BITS, "-nodes", "-sha256",
            "-days", str(days), "-subj", "/CN=%s/" % subject_cn.replace("/", "\\/"),
            "-keyout", key_path, "-outform", "DER", "-out", certificate_path,
            "-addext", "basicConstraints=critical,CA:FALSE",
            "-addext", "keyUsage=digitalSignature",
            "-addext", "extendedKeyUsage=%s,%s" % (CODE_SIGNING_EKU, MODULE_SIGNING_OID),
            "-addext", "subjectKeyIdentifier=hash"]


def has_code_signing_usage(certificate_text):
    """`openssl x509 -text` output -> the certificate carries the Code Signing extended key usage."""
    match = re.search(r"X509v3 Extended Key Usage:[^\n]*\n\s*(?P<usages>[^\n]+)", certificate_text or "")
    return bool(match and "Code Signing" in match.group("usages"))


def certificate_subject_cn(subject_line):
    """`openssl x509 -noout -subject` ('subject=CN = x' or 'subject= /CN=x') -> 'x'."""
    match = re.search(r"CN\s*=\s*(?P<cn>[^,/\n]+)", subject_line or "")
    return match.group("cn").strip() if match else None


def parse_test_key(output):
    """`mokutil --test-key FILE` -> 'enrolled', 'not_enrolled', or None when it could not tell (no EFI, ...)."""
    text = output or ""
    if "is already enrolled" in text:
        return "enrolled"
    if "is not enrolled" in text:
        return "not_enrolled"
    return None


def dkms_framework_conf(private_key_path, certificate_path):
    """A /etc/dkms/framework.conf.d drop-in that makes DKMS sign with the enrolled MOK (not a key of its own)."""
    return ("# Managed by gpuops.nvidia (mok_signing_key): DKMS signs the modules it builds, also after a kernel\n"
            "# update, with the key enrolled as Machine Owner Key.\n"
            "mok_signing_key=%s\nmok_certificate=%s\n" % (private_key_path, certificate_path))


def plan(key_files, content_given, enrollment, password_given, enroll):
    """What to do, decided before anything changes.

    key_files: {'private_key': bool, 'certificate': bool} existing on the node; content_given: key material came
    in as variables; enrollment of the certificate that will be used: 'enrolled', 'pending', 'not_enrolled', or
    None when unknown (no EFI, or no certificate yet).
    Returns {'key_action': 'keep'|'write'|'generate', 'stage': bool, 'error': str|None}.
    """
    if content_given:
        key_action = "write"
    elif key_files["private_key"] and key_files["certificate"]:
        key_action = "keep"
    elif key_files["private_key"] or key_files["certificate"]:
        missing = "certificate" if key_files["private_key"] else "private key"
        return {"key_action": None, "stage": False,
                "error": "only half of the MOK key pair is on the node (the %s is missing); refusing to replace "
                         "the other half: restore it or remove both files" % missing}
    else:
        key_action = "generate"
    # a key generated now cannot be enrolled yet; mokutil gives no answer without EFI (nothing to stage then)
    must_stage = enroll and (key_action == "generate" or enrollment == "not_enrolled")
    if must_stage and not password_given:
        return {"key_action": key_action, "stage": False,
                "error": "the MOK must be staged for enrolment and no one-time password was given "
                         "(password): the console asks for it at the next boot"}
    return {"key_action": key_action, "stage": must_stage, "error": None}
