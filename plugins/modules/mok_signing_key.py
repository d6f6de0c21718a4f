#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: mok_signing_key
short_description: Keep a kernel-module signing key (MOK) on a node, point DKMS at it and stage its enrolment
version_added: 0.1.0
description:
  - Makes sure a Machine Owner Key pair for signing kernel modules is on the node, generated there with
    C(openssl) (RSA 2048, self-signed, Code Signing and kernel module-signing extended key usages, certificate
    in DER) or written from O(private_key_content) and O(certificate_content) (vault variables). The private key
    is mode 0600 in a 0700 directory and never leaves the node.
  - Writes a DKMS C(framework.conf.d) drop-in setting C(mok_signing_key) and C(mok_certificate) to the same
    pair, so modules DKMS rebuilds after a kernel update are signed by the enrolled key, not by a key DKMS
    would create on its own.
  - Enrolment is idempotent through C(mokutil --test-key) and C(mokutil --list-new); a key neither enrolled nor
    staged is staged with C(mokutil --import) and the one-time O(password), which someone types at the console
    (MokManager) at the next boot. The module then reports RV(enrollment_pending).
  - Everything is decided before anything changes; a half key pair on the node, a certificate without the
    Code Signing usage, a key that does not match its certificate or a missing password fail with nothing
    changed.
author: gpuops.nvidia contributors (@gpuops)
options:
  private_key_path:
    description: Where the private key (PEM) lives on the node.
    type: path
    default: /var/lib/gpuops/mok/MOK.priv
  certificate_path:
    description: Where the certificate (DER, as C(mokutil) and the runfile take it) lives on the node.
    type: path
    default: /var/lib/gpuops/mok/MOK.der
  private_key_content:
    description:
      - The private key in PEM, to use instead of generating one (e.g. from Ansible Vault). Needs
        O(certificate_content).
    type: str
  certificate_content:
    description: The certificate in PEM that goes with O(private_key_content).
    type: str
  subject:
    description: The common name of a generated certificate; it is what C(modinfo) shows as the module's signer.
    type: str
    default: gpuops.nvidia module signing key
  days:
    description: Validity of a generated certificate, in days (the kernel does not check it).
    type: int
    default: 36500
  enroll:
    description:
      - Stage the key for enrolment when it is neither enrolled nor staged. Ignored on hosts without EFI.
    type: bool
    default: true
  password:
    description:
      - The one-time password C(mokutil --import) stages the key with; the console asks for it at the next boot.
      - Required only when the key must be staged.
    type: str
  dkms_framework_conf:
    description:
      - The DKMS drop-in to write. Set to an empty string to leave DKMS alone.
    type: str
    default: /etc/dkms/framework.conf.d/gpuops-mok.conf
  timeout:
    description: Seconds each external command may run (under coreutils C(timeout) when present).
    type: int
    default: 60
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: linux
notes:
  - Needs root, C(openssl) and, for enrolment, C(mokutil).
seealso:
  - name: Kernel module signing
    description: The kernel's documentation of module signing and its keys.
    link: https://docs.kernel.org/admin-guide/module-signing.html
"""

EXAMPLES = r"""
- name: Signing key made on the node, DKMS pointed at it, staged for enrolment
  gpuops.nvidia.mok_signing_key:
    password: "{{ vault_mok_password }}"
  register: mok

- name: Key pair from the vault
  gpuops.nvidia.mok_signing_key:
    private_key_content: "{{ vault_mok_private_key }}"
    certificate_content: "{{ vault_mok_certificate }}"
    password: "{{ vault_mok_password }}"
"""

RETURN = r"""
private_key_path:
  description: The private key's path.
  returned: always
  type: str
certificate_path:
  description: The certificate's path (DER).
  returned: always
  type: str
subject:
  description: The certificate's common name (what C(modinfo -F signer) shows for modules it signed); null in check mode before a key is generated.
  returned: always
  type: str
  sample: gpuops.nvidia module signing key
fingerprint:
  description: SHA1 of the DER certificate, lower-case hex (as C(nvidia_driver_facts) reports MOK keys).
  returned: always
  type: str
key_action:
  description: V(keep), V(write) or V(generate).
  returned: always
  type: str
enrolled:
  description: The key is in the MOK list (null without EFI).
  returned: always
  type: bool
enrollment_pending:
  description: The key is staged and waits for confirmation at the console at the next boot.
  returned: always
  type: bool
staged:
  description: This run staged the key with C(mokutil --import).
  returned: always
  type: bool
dkms_framework_conf_changed:
  description: The DKMS drop-in was written.
  returned: always
  type: bool
"""

import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.files import read_bytes, write_atomic
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.driver_state import parse_mok_list, parse_sb_state
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.mok import (
    certificate_subject_cn,
    dkms_framework_conf,
    has_code_signing_usage,
    openssl_generate_argv,
    parse_test_key,
    plan,
)


def openssl(runner, args, what):
    """openssl's stdout; the module fails naming `what` when openssl is missing or fails."""
    return runner.run_or_fail([runner.find("openssl", required=True)] + args, what=what).stdout


def certificate_facts(runner, der_path):
    text = openssl(runner, ["x509", "-inform", "DER", "-in", der_path, "-noout", "-text"], "reading the certificate")
    subject = openssl(runner, ["x509", "-inform", "DER", "-in", der_path, "-noout", "-subject"], "reading its subject")
    return {"code_signing": has_code_signing_usage(text), "subject": certificate_subject_cn(subject),
            "fingerprint": hashlib.sha1(read_bytes(der_path)).hexdigest()}


def pair_matches(runner, key_path, der_path):
    certificate_key = openssl(runner, ["x509", "-inform", "DER", "-in", der_path, "-noout", "-pubkey"],
                              "reading the certificate's public key")
    private_key = openssl(runner, ["pkey", "-in", key_path, "-pubout"], "reading the private key")
    return certificate_key.strip() == private_key.strip()


def enrollment_of(runner, mokutil, der_path, fingerprint):
    """'enrolled', 'pending', 'not_enrolled', or None (no EFI or mokutil could not tell)."""
    test = runner.run([mokutil, "--test-key", der_path])
    answer = parse_test_key(test.stdout + test.stderr)
    if answer != "not_enrolled":
        return answer
    staged = runner.run([mokutil, "--list-new"])
    if staged.rc == 0 and any(key["fingerprint"] == fingerprint for key in parse_mok_list(staged.stdout)):
        return "pending"
    return "not_enrolled"


def stage_from_content(module, runner, workdir):
    """The vault key pair in a private work dir: (key path, DER path) to check before anything is written."""
    params = module.params
    key_path = os.path.join(workdir, "key.pem")
    pem_path = os.path.join(workdir, "cert.pem")
    der_path = os.path.join(workdir, "cert.der")
    write_atomic(key_path, params["private_key_content"].encode(), 0o600)
    write_atomic(pem_path, params["certificate_content"].encode(), 0o600)
    openssl(runner, ["x509", "-inform", "PEM", "-in", pem_path, "-outform", "DER", "-out", der_path],
            "converting certificate_content (PEM) to DER")
    return key_path, der_path


def efi_present(runner, mokutil):
    if not mokutil:
        return os.path.isdir("/sys/firmware/efi")
    result = runner.run([mokutil, "--sb-state"])
    state = parse_sb_state(result.stdout + "\n" + result.stderr)
    return state is not None and state["enabled"] is not None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            private_key_path=dict(type="path", default="/var/lib/gpuops/mok/MOK.priv"),
            certificate_path=dict(type="path", default="/var/lib/gpuops/mok/MOK.der"),
            private_key_content=dict(type="str", no_log=True),
            certificate_content=dict(type="str"),
            subject=dict(type="str", default="gpuops.nvidia module signing key"),
            days=dict(type="int", default=36500),
            enroll=dict(type="bool", default=True),
            password=dict(type="str", no_log=True),
            dkms_framework_conf=dict(type="str", default="/etc/dkms/framework.conf.d/gpuops-mok.conf"),
            timeout=dict(type="int", default=60),
        ),
        required_together=[("private_key_content", "certificate_content")],
        supports_check_mode=True,
    )
    params = module.params
    runner = CommandRunner(module, params["timeout"])
    key_path, cert_path = params["private_key_path"], params["certificate_path"]
    mokutil = runner.find("mokutil")
    enroll = params["enroll"] and efi_present(runner, mokutil)
    if enroll and not mokutil:
        module.fail_json(msg="mokutil is needed to stage the MOK for enrolment and is not installed")
    content_given = bool(params["private_key_content"])
    workdir = tempfile.mkdtemp(prefix="gpuops-mok-", dir=module.tmpdir)

    # read and decide; nothing on the node changes before the plan holds
    candidate_key, candidate_der = key_path, cert_path
    if content_given:
        candidate_key, candidate_der = stage_from_content(module, runner, workdir)
    have = {"private_key": os.path.exists(key_path), "certificate": os.path.exists(cert_path)}
    certificate = None
    enrollment = None
    if content_given or (have["private_key"] and have["certificate"]):
        certificate = certificate_facts(runner, candidate_der)
        if not certificate["code_signing"]:
            module.fail_json(msg="the certificate %s has no Code Signing extended key usage: the kernel would not "
                                 "accept modules it signs; nothing was changed" % (
                                     "certificate_content" if content_given else cert_path))
        if not pair_matches(runner, candidate_key, candidate_der):
            module.fail_json(msg="the private key does not belong to the certificate (%s); nothing was changed"
                             % ("private_key_content" if content_given else key_path))
        if enroll:
            enrollment = enrollment_of(runner, mokutil, candidate_der, certificate["fingerprint"])
    decision = plan(have, content_given, enrollment, bool(params["password"]), enroll)
    if decision["error"]:
        module.fail_json(msg="%s; nothing was changed" % decision["error"])

    conf_path = params["dkms_framework_conf"]
    conf_text = dkms_framework_conf(key_path, cert_path) if conf_path else None
    conf_before = (read_bytes(conf_path) or b"").decode() if conf_path else None
    conf_changed = bool(conf_path) and conf_before != conf_text
    key_changed = decision["key_action"] == "generate" or (
        decision["key_action"] == "write" and (read_bytes(key_path) != read_bytes(candidate_key)
                                               or read_bytes(cert_path) != read_bytes(candidate_der)))
    result = {"changed": key_changed or conf_changed or decision["stage"], "private_key_path": key_path,
              "certificate_path": cert_path, "key_action": decision["key_action"],
              "subject": certificate["subject"] if certificate else None,
              "fingerprint": certificate["fingerprint"] if certificate else None,
              "enrolled": (enrollment == "enrolled") if enroll else None,
              "enrollment_pending": enrollment == "pending" or decision["stage"],
              "staged": decision["stage"], "dkms_framework_conf_changed": conf_changed,
              "diff": {"before": {"dkms_framework_conf": conf_before, "key_pair": "present" if all(have.values())
                                  else "absent"},
                       "after": {"dkms_framework_conf": conf_text, "key_pair": "present"}}}
    if module.check_mode:
        module.exit_json(**result)

    for directory in sorted(set([os.path.dirname(key_path), os.path.dirname(cert_path)])):
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
    if decision["key_action"] == "generate":
        subject = params["subject"]
        runner.run_or_fail(openssl_generate_argv(runner.find("openssl", required=True), key_path, cert_path, subject,
                                                 params["days"]), what="openssl req (generating the MOK)")
    elif key_changed:
        write_atomic(key_path, read_bytes(candidate_key), 0o600)
        write_atomic(cert_path, read_bytes(candidate_der), 0o644)
    os.chmod(key_path, 0o600)
    if decision["key_action"] == "generate":
        certificate = certificate_facts(runner, cert_path)
        result.update(subject=certificate["subject"], fingerprint=certificate["fingerprint"])
    if conf_changed:
        write_atomic(conf_path, conf_text.encode(), 0o644)
    if decision["stage"]:
        password = params["password"]
        runner.run_or_fail([mokutil, "--import", cert_path], data="%s\n%s" % (password, password),
                           what="mokutil --import")
        if enrollment_of(runner, mokutil, cert_path, certificate["fingerprint"]) != "pending":
            module.fail_json(msg="mokutil --import returned success but the key is not in the pending MOK list",
                             **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
