"""The twin's own certificate authority and server certificate (made with the ``openssl`` CLI), and the
bearer token clients present."""
from __future__ import annotations

import os
import secrets
import ssl
import subprocess
from typing import List, Optional, Sequence, Tuple

_CA_SUBJECT = "/CN=gpulab-kube-ca"
_VALID_DAYS = "3650"


def _openssl(args: List[str]) -> None:
    try:
        result = subprocess.run(["openssl"] + args, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("the Kubernetes twin makes its TLS certificates with the openssl CLI, which is not"
                           " installed (apt-get install openssl)")
    if result.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], result.stderr.strip()))


def ensure_ca(ca_dir: str) -> Tuple[str, str]:
    """Create ``ca.crt``/``ca.key`` in ``ca_dir`` once (EC P-256, ten years); returns their paths."""
    os.makedirs(ca_dir, exist_ok=True)
    cert_path, key_path = os.path.join(ca_dir, "ca.crt"), os.path.join(ca_dir, "ca.key")
    if not (os.path.exists(cert_path) and os.path.exists(key_path)):
        _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key_path, "-out", cert_path, "-days", _VALID_DAYS, "-subj", _CA_SUBJECT,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        os.chmod(key_path, 0o600)
    return cert_path, key_path


def issue_server_certificate(ca_dir: str, ip_addresses=("127.0.0.1",), dns_names=("localhost",)) -> Tuple[str, str]:
    """Issue ``apiserver.crt``/``apiserver.key`` signed by the twin CA for the given SANs (reissued each call,
    so a changed address is always covered); returns their paths."""
    ca_cert, ca_key = ensure_ca(ca_dir)
    cert_path, key_path = os.path.join(ca_dir, "apiserver.crt"), os.path.join(ca_dir, "apiserver.key")
    csr_path, ext_path = os.path.join(ca_dir, "apiserver.csr"), os.path.join(ca_dir, "apiserver.ext")
    san = ",".join(["IP:%s" % ip for ip in ip_addresses] + ["DNS:%s" % name for name in dns_names])
    with open(ext_path, "w", encoding="utf-8") as handle:
        handle.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n"
                     "basicConstraints=CA:FALSE\n" % san)
    try:
        _openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key_path, "-out", csr_path, "-subj", "/CN=kube-apiserver"])
        _openssl(["x509", "-req", "-in", csr_path, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
                  "-out", cert_path, "-days", _VALID_DAYS, "-extfile", ext_path])
        os.chmod(key_path, 0o600)
    finally:   # the request and extension files are scratch, also when openssl fails
        for leftover in (csr_path, ext_path):
            if os.path.exists(leftover):
                os.remove(leftover)
    return cert_path, key_path


def issue_client_certificate(ca_dir: str, user: str, groups: Sequence[str] = (),
                             name: str = "client") -> Tuple[str, str]:
    """Issue ``<name>.crt``/``<name>.key`` in ``ca_dir``, signed by the twin CA, for ``user`` (CN) in ``groups``
    (O), as kubeadm's ``admin.conf`` certificate (``CN=kubernetes-admin``); returns their paths."""
    ca_cert, ca_key = ensure_ca(ca_dir)
    cert_path, key_path = os.path.join(ca_dir, name + ".crt"), os.path.join(ca_dir, name + ".key")
    csr_path, ext_path = os.path.join(ca_dir, name + ".csr"), os.path.join(ca_dir, name + ".ext")
    subject = "".join("/O=%s" % group for group in groups) + "/CN=%s" % user
    with open(ext_path, "w", encoding="utf-8") as handle:
        handle.write("extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n")
    try:
        _openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key_path, "-out", csr_path, "-subj", subject])
        _openssl(["x509", "-req", "-in", csr_path, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
                  "-out", cert_path, "-days", _VALID_DAYS, "-extfile", ext_path])
        os.chmod(key_path, 0o600)
    finally:
        for leftover in (csr_path, ext_path):
            if os.path.exists(leftover):
                os.remove(leftover)
    return cert_path, key_path


def new_token() -> str:
    return secrets.token_urlsafe(32)


def server_ssl_context(cert_path: str, key_path: str, client_ca_path: Optional[str] = None) -> ssl.SSLContext:
    """TLS 1.2+ server context offering only HTTP/1.1 over ALPN (kubectl then skips HTTP/2); with
    ``client_ca_path``, a client certificate signed by that CA is asked for (optional, as kube-apiserver's
    ``--client-ca-file``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    if client_ca_path:
        context.load_verify_locations(client_ca_path)
        context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    return context


def read_pem(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()
