"""ServiceAccount token Secrets, impersonation and client certificates in the Kubernetes API twin, through real
kubectl: a `kubernetes.io/service-account-token` Secret gets `data.token`/`ca.crt`/`namespace` from the tokens
controller and that token authenticates as its ServiceAccount (RBAC applies; deleting the ServiceAccount deletes
the Secret and the token stops working); `--as` (Impersonate-User) needs the `impersonate` verb, with
kube-apiserver's 403 otherwise; a client certificate signed by the twin CA authenticates as its CN and O groups;
`stringData` is merged into `data`."""
from __future__ import annotations

import base64
import json
import shutil
import textwrap

import pytest

from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store
from gpulab.kube.api.tls import issue_client_certificate
from gpulab.kube.sim.tokens import TokensController
from test_kube_api_rbac import kubectl

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

OBJECTS = textwrap.dedent("""\
    apiVersion: v1
    kind: ServiceAccount
    metadata: {name: pods-sa, namespace: work}
    ---
    apiVersion: v1
    kind: ServiceAccount
    metadata: {name: plain-sa, namespace: work}
    ---
    apiVersion: v1
    kind: Secret
    type: kubernetes.io/service-account-token
    metadata: {name: pods-sa, namespace: work, annotations: {kubernetes.io/service-account.name: pods-sa}}
    ---
    apiVersion: v1
    kind: Secret
    type: kubernetes.io/service-account-token
    metadata: {name: plain-sa, namespace: work, annotations: {kubernetes.io/service-account.name: plain-sa}}
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: pod-manager, namespace: work}
    rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: pod-manager, namespace: work}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-manager}
    subjects: [{kind: ServiceAccount, name: pods-sa}]
    """)

IMPERSONATOR = textwrap.dedent("""\
    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: impersonate-pods-sa, namespace: work}
    rules: [{apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [pods-sa]}]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: plain-impersonates, namespace: work}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: impersonate-pods-sa}
    subjects: [{kind: ServiceAccount, name: plain-sa}]
    """)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    state = tmp_path_factory.mktemp("tokens")
    store = Store()
    store.create("namespaces", {"metadata": {"name": "work"}})
    server = ApiServer(store, ca_dir=str(state / "ca")).start()
    admin = str(state / "admin.kubeconfig")
    write_kubeconfig(admin, server.url, server.ca_pem, server.token)
    tokens = TokensController(store, server.access.authenticator.legacy_token, server.ca_pem)
    kubectl(admin, "apply", "-f", "-", stdin=OBJECTS)
    tokens.sync()
    yield {"server": server, "store": store, "admin": admin, "dir": state, "tokens": tokens}
    server.stop()


def secret(api, name):
    return json.loads(kubectl(api["admin"], "-n", "work", "get", "secret", name, "-o", "json").stdout)


def token_kubeconfig(api, name):
    token = base64.b64decode(secret(api, name)["data"]["token"]).decode()
    path = str(api["dir"] / (name + ".kubeconfig"))
    write_kubeconfig(path, api["server"].url, api["server"].ca_pem, token)
    return path


def test_token_secret_is_filled_and_authenticates_as_its_service_account(api):
    filled = secret(api, "pods-sa")
    account = json.loads(kubectl(api["admin"], "-n", "work", "get", "sa", "pods-sa", "-o", "json").stdout)
    assert base64.b64decode(filled["data"]["namespace"]).decode() == "work"
    assert base64.b64decode(filled["data"]["ca.crt"]).decode() == api["server"].ca_pem
    assert filled["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == account["metadata"]["uid"]
    as_pods_sa = token_kubeconfig(api, "pods-sa")
    assert kubectl(as_pods_sa, "-n", "work", "get", "pods").returncode == 0
    refused = kubectl(as_pods_sa, "-n", "work", "get", "configmaps", check=False)
    assert refused.returncode != 0
    assert 'User "system:serviceaccount:work:pods-sa" cannot list resource "configmaps"' in refused.stderr
    api["tokens"].sync()   # a filled Secret is left as it is
    assert secret(api, "pods-sa")["metadata"]["resourceVersion"] == filled["metadata"]["resourceVersion"]


def test_impersonation_needs_the_impersonate_verb(api):
    as_plain = token_kubeconfig(api, "plain-sa")
    assert kubectl(as_plain, "-n", "work", "get", "pods", check=False).returncode != 0
    refused = kubectl(as_plain, "-n", "work", "get", "pods", "--as", "system:serviceaccount:work:pods-sa", check=False)
    assert refused.returncode != 0
    assert ('serviceaccounts "pods-sa" is forbidden: User "system:serviceaccount:work:plain-sa" cannot impersonate'
            ' resource "serviceaccounts" in API group "" in the namespace "work"') in refused.stderr
    kubectl(api["admin"], "apply", "-f", "-", stdin=IMPERSONATOR)
    assert kubectl(as_plain, "-n", "work", "get", "pods", "--as", "system:serviceaccount:work:pods-sa").returncode == 0
    # acting as pods-sa: its rights, not more
    refused = kubectl(as_plain, "-n", "work", "get", "configmaps", "--as", "system:serviceaccount:work:pods-sa",
                      check=False)
    assert 'User "system:serviceaccount:work:pods-sa" cannot list resource "configmaps"' in refused.stderr
    # another user or a group is not granted
    refused = kubectl(as_plain, "-n", "work", "get", "pods", "--as", "someone", check=False)
    assert 'cannot impersonate resource "users"' in refused.stderr
    refused = kubectl(as_plain, "-n", "work", "get", "pods", "--as", "system:serviceaccount:work:pods-sa",
                      "--as-group", "system:masters", check=False)
    assert 'cannot impersonate resource "groups"' in refused.stderr
    # the admin may impersonate anyone
    refused = kubectl(api["admin"], "-n", "work", "get", "configmaps", "--as", "someone", check=False)
    assert 'User "someone" cannot list resource "configmaps"' in refused.stderr


def test_client_certificate_authenticates_as_its_subject(api):
    ca_dir = str(api["dir"] / "ca")
    for user, groups, name in (("kubernetes-admin", ["system:masters"], "admin-cert"), ("someone", [], "someone")):
        cert, key = issue_client_certificate(ca_dir, user, groups, name)
        path = str(api["dir"] / (name + ".kubeconfig"))
        write_kubeconfig(path, api["server"].url, api["server"].ca_pem, "unused")
        document = json.load(open(path))
        document["users"][0]["user"] = {"client-certificate": cert, "client-key": key}
        json.dump(document, open(path, "w"))
        done = kubectl(path, "-n", "work", "get", "secrets", check=False)
        if groups:
            assert done.returncode == 0, done.stderr
        else:
            assert 'User "someone" cannot list resource "secrets"' in done.stderr


def test_deleting_the_service_account_deletes_its_token_secret(api):
    as_pods_sa = token_kubeconfig(api, "pods-sa")
    kubectl(api["admin"], "-n", "work", "delete", "sa", "pods-sa")
    api["tokens"].sync()
    assert kubectl(api["admin"], "-n", "work", "get", "secret", "pods-sa", check=False).returncode != 0
    refused = kubectl(as_pods_sa, "-n", "work", "get", "pods", check=False)
    assert "Unauthorized" in refused.stderr or "provide credentials" in refused.stderr


def test_string_data_is_merged_into_data(api):
    created = api["store"].create("secrets", {"metadata": {"name": "plain", "namespace": "work"},
                                              "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "bar"}})
    assert created["type"] == "Opaque"
    assert "stringData" not in created
    assert created["data"] == {"a": "eA==", "b": base64.b64encode(b"bar").decode()}


NETWORK_POLICY = textwrap.dedent("""\
    apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: netpol, namespace: work, labels: {app: netpol}}
    spec:
      podSelector: {matchLabels: {app: netpol}}
      policyTypes: [Ingress, Egress]
      ingress: [{ports: [{port: 9093, protocol: TCP}]}]
      egress: [{}]
    """)


def test_network_policies_are_served_and_an_unchanged_apply_changes_nothing(api):
    assert "created" in kubectl(api["admin"], "apply", "-f", "-", stdin=NETWORK_POLICY).stdout
    assert "unchanged" in kubectl(api["admin"], "apply", "-f", "-", stdin=NETWORK_POLICY).stdout
    stored = json.loads(kubectl(api["admin"], "-n", "work", "get", "netpol", "netpol", "-o", "json").stdout)
    assert stored["spec"]["egress"] == [{}]
