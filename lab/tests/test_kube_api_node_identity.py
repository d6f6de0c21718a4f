"""A kubelet's identity in the Kubernetes API twin, through real kubectl with a kubeadm-style kubeconfig: a client
certificate ``CN=system:node:NAME, O=system:nodes`` signed by the twin's CA authenticates as that node, which may
read and annotate its own Node object and nothing else (NodeRestriction's 403 on another node, RBAC's on the rest);
a certificate from another CA is refused at the TLS handshake."""
from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from gpulab.kube.api import tls
from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

KUBELET_CONF = """apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: %(ca)s
    server: %(server)s
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: system:node:%(node)s
  name: system:node:%(node)s@kubernetes
current-context: system:node:%(node)s@kubernetes
users:
- name: system:node:%(node)s
  user:
    client-certificate: %(cert)s
    client-key: %(key)s
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    base = tmp_path_factory.mktemp("node-identity")
    ca_dir = str(base / "ca")
    server = ApiServer(Store(), ca_dir=ca_dir).start()
    admin = write_kubeconfig(str(base / "admin.conf"), server.url, server.ca_pem, server.token)
    for name in ("node-a", "node-b"):
        subprocess.run([KUBECTL, "--kubeconfig", admin, "create", "-f", "-"], check=True, capture_output=True,
                       text=True, timeout=60,
                       input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
    cert, key = tls.issue_client_certificate(ca_dir, "system:node:node-a", ["system:nodes"], name="kubelet-node-a")
    kubelet = str(base / "kubelet.conf")
    with open(kubelet, "w") as stream:
        stream.write(KUBELET_CONF % {"ca": os.path.join(ca_dir, "ca.crt"), "server": server.url, "node": "node-a",
                                     "cert": cert, "key": key})
    yield {"server": server, "admin": admin, "kubelet": kubelet, "ca_dir": ca_dir, "base": base, "cert": cert,
           "key": key}
    server.stop()


def kubectl(conf: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, "--kubeconfig", conf] + list(args), capture_output=True, text=True, timeout=60)


def test_a_kubelet_certificate_annotates_its_own_node(api):
    done = kubectl(api["kubelet"], "annotate", "node", "node-a", "gpuops.nvidia/selfcheck=ok", "--overwrite")
    assert done.returncode == 0, done.stderr
    node = json.loads(kubectl(api["admin"], "get", "node", "node-a", "-o", "json").stdout)
    assert node["metadata"]["annotations"]["gpuops.nvidia/selfcheck"] == "ok"


def test_a_kubelet_certificate_may_not_modify_another_node(api):
    # a direct PATCH, as the self-check sends it (kubectl patch would GET the other node first, also refused)
    context = ssl.create_default_context(cafile=os.path.join(api["ca_dir"], "ca.crt"))
    context.load_cert_chain(api["cert"], api["key"])
    request = urllib.request.Request(api["server"].url + "/api/v1/nodes/node-b", method="PATCH",
                                     data=json.dumps({"metadata": {"annotations": {"gpuops.nvidia/selfcheck": "ok"}}})
                                     .encode(), headers={"Content-Type": "application/merge-patch+json"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, context=context, timeout=10)
    assert error.value.code == 403
    assert json.loads(error.value.read())["message"] == (
        'nodes "node-b" is forbidden: node "node-a" is not allowed to modify node "node-b"')
    assert "cannot get resource" in kubectl(api["kubelet"], "get", "node", "node-b").stderr
    node = json.loads(kubectl(api["admin"], "get", "node", "node-b", "-o", "json").stdout)
    assert "gpuops.nvidia/selfcheck" not in (node["metadata"].get("annotations") or {})
    deleted = kubectl(api["kubelet"], "delete", "node", "node-a")
    assert deleted.returncode == 1
    assert 'User "system:node:node-a" cannot delete resource "nodes"' in deleted.stderr, deleted.stderr
    pods = kubectl(api["kubelet"], "get", "pods", "-A")
    assert 'User "system:node:node-a" cannot list resource "pods"' in pods.stderr, pods.stderr


def test_a_certificate_from_another_ca_is_refused(api):
    cert, key = tls.issue_client_certificate(str(api["base"] / "other-ca"), "system:node:node-a", ["system:nodes"],
                                             name="x")
    context = ssl.create_default_context(cafile=os.path.join(api["ca_dir"], "ca.crt"))
    context.load_cert_chain(cert, key)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(api["server"].url + "/api/v1/nodes/node-a", context=context, timeout=10)


def test_a_client_without_a_certificate_or_token_is_unauthorized(api):
    context = ssl.create_default_context(cafile=os.path.join(api["ca_dir"], "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(api["server"].url + "/api/v1/nodes/node-a", context=context, timeout=10)
    assert error.value.code == 401
