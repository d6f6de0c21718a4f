"""Authentication and RBAC in the Kubernetes API twin, through real kubectl: the admin token may do anything;
`kubectl create token` (TokenRequest) issues ServiceAccount tokens that authenticate as
`system:serviceaccount:NS:NAME` and get exactly what their Role/ClusterRole bindings grant, with kube-apiserver's
403 message otherwise; `kubectl auth can-i` answers from the same rules."""
from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest

from gpulab.kube.api.kubeconfig import write_kubeconfig
from gpulab.kube.api.rbac import Attributes, rule_allows
from gpulab.kube.api.server import ApiServer
from gpulab.kube.api.store import Store

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

ROLES = textwrap.dedent("""\
    apiVersion: v1
    kind: ServiceAccount
    metadata: {name: operator, namespace: ops}
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: node-reader}
    rules:
      - {apiGroups: [""], resources: [nodes], verbs: [get, list]}
      - {apiGroups: [""], resources: [nodes/status], verbs: [patch]}
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRoleBinding
    metadata: {name: operator-reads-nodes}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-reader}
    subjects: [{kind: ServiceAccount, name: operator, namespace: ops}]
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: one-configmap, namespace: ops}
    rules:
      - {apiGroups: [""], resources: [configmaps], verbs: [get, update], resourceNames: [settings]}
      - {apiGroups: [""], resources: [configmaps], verbs: [create]}
    ---
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: operator-settings, namespace: ops}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: one-configmap}
    subjects: [{kind: ServiceAccount, name: operator}]
    """)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    state = tmp_path_factory.mktemp("rbac")
    store = Store()
    for namespace in ("ops", "other"):
        store.create("namespaces", {"metadata": {"name": namespace}})
    for name in ("gpu-0", "gpu-1"):
        store.create("nodes", {"metadata": {"name": name}})
    server = ApiServer(store, ca_dir=str(state / "ca")).start()
    admin = str(state / "admin.kubeconfig")
    write_kubeconfig(admin, server.url, server.ca_pem, server.token)
    yield {"server": server, "store": store, "admin": admin, "dir": state}
    server.stop()


def kubectl(kubeconfig, *args, stdin=None, check=True):
    done = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True,
                          timeout=60)
    if check and done.returncode != 0:
        raise AssertionError("kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr))
    return done


@pytest.fixture(scope="module")
def operator(api):
    kubectl(api["admin"], "apply", "-f", "-", stdin=ROLES)
    token = kubectl(api["admin"], "-n", "ops", "create", "token", "operator").stdout.strip()
    path = str(api["dir"] / "operator.kubeconfig")
    write_kubeconfig(path, api["server"].url, api["server"].ca_pem, token)
    return path


def test_rule_matching_covers_subresources_names_and_wildcards():
    patch_status = Attributes("patch", "", "nodes", "status", "", "gpu-0")
    assert rule_allows({"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}, patch_status)
    assert not rule_allows({"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}, patch_status)
    assert rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, patch_status)
    assert rule_allows({"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]}, patch_status)
    named = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"], "resourceNames": ["gpu-0"]}
    assert rule_allows(named, Attributes("get", "", "nodes", name="gpu-0"))
    assert not rule_allows(named, Attributes("get", "", "nodes", name="gpu-1"))
    assert not rule_allows(named, Attributes("list", "", "nodes"))
    assert not rule_allows({"apiGroups": ["apps"], "resources": ["nodes"], "verbs": ["get"]},
                           Attributes("get", "", "nodes", name="gpu-0"))


@needs_kubectl
def test_admin_token_keeps_every_right(api):
    kubectl(api["admin"], "cordon", "gpu-1")
    assert kubectl(api["admin"], "auth", "can-i", "delete", "nodes").stdout.strip() == "yes"


@needs_kubectl
def test_service_account_token_gets_what_its_bindings_grant(api, operator):
    assert "gpu-0" in kubectl(operator, "get", "nodes").stdout
    kubectl(operator, "-n", "ops", "create", "configmap", "settings", "--from-literal=a=1")
    assert kubectl(operator, "-n", "ops", "get", "configmap", "settings", "-o", "name").stdout.strip() == \
        "configmap/settings"


@needs_kubectl
@pytest.mark.parametrize("args, message", [
    (["cordon", "gpu-0"], 'nodes "gpu-0" is forbidden: User "system:serviceaccount:ops:operator" cannot patch '
                          'resource "nodes" in API group "" at the cluster scope'),
    (["-n", "other", "get", "configmaps"], 'configmaps is forbidden: User "system:serviceaccount:ops:operator" '
                                           'cannot list resource "configmaps" in API group "" in the namespace "other"'),
    (["-n", "ops", "get", "configmap", "others"], 'configmaps "others" is forbidden: User '
                                                  '"system:serviceaccount:ops:operator" cannot get resource '
                                                  '"configmaps" in API group "" in the namespace "ops"'),
    (["get", "leases", "-A"], 'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:ops:operator" '
                              'cannot list resource "leases" in API group "coordination.k8s.io" at the cluster scope'),
    (["delete", "node", "gpu-0"], 'nodes "gpu-0" is forbidden: User "system:serviceaccount:ops:operator" cannot '
                                  'delete resource "nodes" in API group "" at the cluster scope'),
])
def test_a_denied_request_gets_kube_apiservers_403(api, operator, args, message):
    done = kubectl(operator, *args, check=False)
    assert message in done.stderr   # (kubectl cordon reports it but exits 0)


@needs_kubectl
def test_the_forbidden_status_body(api, operator):
    done = kubectl(operator, "get", "--raw", "/api/v1/namespaces/ops/pods/p/eviction", check=False)
    assert 'pods "p" is forbidden' in done.stderr and 'cannot get resource "pods/eviction"' in done.stderr
    import ssl
    import urllib.request
    token = json.loads(kubectl(operator, "config", "view", "--raw", "-o", "json").stdout)["users"][0]["user"]["token"]
    context = ssl.create_default_context(cadata=api["server"].ca_pem)
    request = urllib.request.Request(api["server"].url + "/api/v1/nodes/gpu-0", method="DELETE",
                                     headers={"Authorization": "Bearer " + token})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, context=context)
    status = json.loads(raised.value.read())
    assert (status["code"], status["reason"], status["details"]) == (
        403, "Forbidden", {"name": "gpu-0", "group": "", "kind": "nodes"})


@needs_kubectl
def test_auth_can_i_answers_from_the_rules(api, operator):
    def can_i(*args):
        return kubectl(operator, "auth", "can-i", *args, check=False).stdout.strip()
    assert can_i("list", "nodes") == "yes"
    assert can_i("patch", "nodes") == "no"
    assert can_i("patch", "nodes", "--subresource", "status") == "yes"
    assert can_i("-n", "ops", "update", "configmap/settings") == "yes"
    assert can_i("-n", "ops", "update", "configmap/other") == "no"


@needs_kubectl
def test_a_token_stops_working_when_its_service_account_goes_and_bad_tokens_are_401(api, operator):
    kubectl(api["admin"], "-n", "ops", "create", "serviceaccount", "shortlived")
    token = kubectl(api["admin"], "-n", "ops", "create", "token", "shortlived", "--duration", "10m").stdout.strip()
    path = str(api["dir"] / "shortlived.kubeconfig")
    write_kubeconfig(path, api["server"].url, api["server"].ca_pem, token)
    assert "forbidden" in kubectl(path, "get", "nodes", check=False).stderr
    kubectl(api["admin"], "-n", "ops", "delete", "serviceaccount", "shortlived")
    assert "Unauthorized" in kubectl(path, "get", "nodes", check=False).stderr
    write_kubeconfig(path, api["server"].url, api["server"].ca_pem, token[:-4] + "AAAA")
    assert "Unauthorized" in kubectl(path, "get", "nodes", check=False).stderr
    done = kubectl(api["admin"], "-n", "ops", "create", "token", "missing", check=False)
    assert 'serviceaccounts "missing" not found' in done.stderr
    done = kubectl(api["admin"], "-n", "ops", "create", "token", "operator", "--duration", "1m", check=False)
    assert "may not specify a duration less than 10 minutes" in done.stderr
