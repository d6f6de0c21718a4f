# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import base64
import json

import pytest
import yaml

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s import client as _k8s_client
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC, K8sConfigError, api_error_message, build_api_client, status_from_response, status_of)

pytest.importorskip("kubernetes")
from kubernetes.client.rest import ApiException  # noqa: E402

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

# The Status body kube-apiserver answers a conflicting update with (resourceVersion changed meanwhile).
CONFLICT_BODY = json.dumps({
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "gpu-rollout": the object has been '
               'modified; please apply your changes to the latest version and try again',
    "reason": "Conflict", "details": {"name": "gpu-rollout", "group": "coordination.k8s.io", "kind": "leases"},
    "code": 409})


def kubeconfig_dict(server="https://127.0.0.1:6443", token="t0ken", contexts=("twin",)):
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": contexts[0],
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": base64.b64encode(CA_PEM).decode()}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}} for name in contexts],
    }


def bearer_token(api):
    """The Authorization header value the client sends."""
    return next(setting["value"] for setting in api.configuration.auth_settings().values()
                if setting["key"] == "authorization")


def params(**given):
    values = dict.fromkeys(K8S_AUTH_ARG_SPEC)
    values.update(given)
    return values


def test_option_names_and_environment_variables_are_those_of_kubernetes_core():
    expected = {
        "kubeconfig": "K8S_AUTH_KUBECONFIG", "context": "K8S_AUTH_CONTEXT", "host": "K8S_AUTH_HOST",
        "api_key": "K8S_AUTH_API_KEY", "validate_certs": "K8S_AUTH_VERIFY_SSL", "ca_cert": "K8S_AUTH_SSL_CA_CERT",
        "client_cert": "K8S_AUTH_CERT_FILE", "client_key": "K8S_AUTH_KEY_FILE", "proxy": "K8S_AUTH_PROXY",
        "impersonate_user": "K8S_AUTH_IMPERSONATE_USER", "impersonate_groups": "K8S_AUTH_IMPERSONATE_GROUPS",
        "username": "K8S_AUTH_USERNAME", "password": "K8S_AUTH_PASSWORD", "no_proxy": "K8S_AUTH_NO_PROXY",
        "persist_config": "K8S_AUTH_PERSIST_CONFIG",
        "request_timeout": "K8S_AUTH_REQUEST_TIMEOUT"}
    assert {name: spec["fallback"][1] for name, spec in K8S_AUTH_ARG_SPEC.items() if name != "proxy_headers"} == {
        name: [env] for name, env in expected.items()}
    assert {name: spec["fallback"][1] for name, spec in K8S_AUTH_ARG_SPEC["proxy_headers"]["options"].items()} == {
        name: ["K8S_AUTH_PROXY_HEADERS_" + name.upper()] for name in ("proxy_basic_auth", "basic_auth", "user_agent")}
    assert K8S_AUTH_ARG_SPEC["api_key"]["no_log"] is True
    assert K8S_AUTH_ARG_SPEC["password"]["no_log"] is True
    assert K8S_AUTH_ARG_SPEC["validate_certs"]["aliases"] == ["verify_ssl"]


def test_kubeconfig_file_gives_server_and_bearer_token(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_dict()))
    api = build_api_client(params(kubeconfig=str(path)))
    assert api.configuration.host == "https://127.0.0.1:6443"
    assert bearer_token(api) == "Bearer t0ken"
    assert api.configuration.verify_ssl is True
    assert api.user_agent.startswith("gpuops.nvidia ")


def test_explicit_options_override_the_kubeconfig():
    api = build_api_client(params(kubeconfig=kubeconfig_dict(), host="https://10.0.0.1:443", api_key="other",
                                  validate_certs=False, ca_cert="/etc/ca.pem", proxy="http://proxy:3128",
                                  impersonate_user="sre", impersonate_groups=["gpu-admins"]))
    configuration = api.configuration
    assert configuration.host == "https://10.0.0.1:443"
    assert bearer_token(api) == "Bearer other"
    assert configuration.verify_ssl is False
    assert configuration.ssl_ca_cert == "/etc/ca.pem"
    assert configuration.proxy == "http://proxy:3128"
    assert api.default_headers["Impersonate-User"] == "sre"
    assert api.default_headers["Impersonate-Group"] == "gpu-admins"


def test_username_and_password_give_basic_auth_unless_an_api_key_is_set():
    api = build_api_client(params(host="https://10.0.0.1:443", username="admin", password="s3cret"))
    assert bearer_token(api) == "Basic " + base64.b64encode(b"admin:s3cret").decode()
    api = build_api_client(params(host="https://10.0.0.1:443", username="admin", password="s3cret", api_key="tok"))
    assert bearer_token(api) == "Bearer tok"


def test_proxy_headers_reach_the_proxy_and_no_proxy_hosts_bypass_it():
    proxied = build_api_client(params(host="https://10.0.0.1:443", proxy="http://proxy:3128",
                                      proxy_headers=dict(proxy_basic_auth="me:pw", basic_auth=None,
                                                         user_agent="gpuops/1")))
    sent = proxied.rest_client.pool_manager.proxy_headers
    assert sent["proxy-authorization"] == "Basic " + base64.b64encode(b"me:pw").decode()
    assert sent["user-agent"] == "gpuops/1"
    bypassed = build_api_client(params(host="https://10.0.0.1:443", proxy="http://proxy:3128",
                                       no_proxy="localhost,10.0.0.0/8"))
    assert bypassed.configuration.no_proxy == "localhost,10.0.0.0/8"
    assert getattr(bypassed.rest_client.pool_manager, "proxy", None) is None


def test_proxy_headers_come_from_the_environment_as_in_kubernetes_core(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_PROXY_HEADERS_USER_AGENT", "from-env/1")
    result = ArgumentSpecValidator(K8S_AUTH_ARG_SPEC).validate({})
    assert not result.errors.messages
    assert result.validated_parameters["proxy_headers"]["user_agent"] == "from-env/1"


def gcp_kubeconfig_with_expired_token():
    """A user whose token has expired and is refreshed by a command (the gcp provider's cmd-path), as OIDC and
    cloud logins refresh theirs: what persist_config decides is whether the new token is written back."""
    config = kubeconfig_dict()
    refreshed = json.dumps({"credential": {"access_token": "n3w", "token_expiry": "2099-01-01T00:00:00Z"}})
    config["users"] = [{"name": "u", "user": {"auth-provider": {"name": "gcp", "config": {
        "access-token": "old", "expiry": "2000-01-01T00:00:00Z", "cmd-path": "/bin/echo", "cmd-args": refreshed,
        "token-key": "{.credential.access_token}", "expiry-key": "{.credential.token_expiry}"}}}}]
    return config


@pytest.mark.parametrize("persist_config, written_back", [(None, False), (False, False), (True, True)])
def test_refreshed_token_is_written_to_the_kubeconfig_only_with_persist_config(
        tmp_path, persist_config, written_back):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(gcp_kubeconfig_with_expired_token()))
    api = build_api_client(params(kubeconfig=str(path), persist_config=persist_config))
    assert bearer_token(api) == "Bearer n3w"
    saved = yaml.safe_load(path.read_text())["users"][0]["user"]["auth-provider"]["config"]["access-token"]
    assert saved == ("n3w" if written_back else "old")


def test_context_selects_the_named_context():
    config = kubeconfig_dict(contexts=("first", "second"))
    config["clusters"].append({"name": "c2", "cluster": {"server": "https://127.0.0.2:6443"}})
    config["contexts"][1]["context"]["cluster"] = "c2"
    assert build_api_client(params(kubeconfig=config, context="second")).configuration.host == "https://127.0.0.2:6443"


def test_unknown_context_and_missing_file_are_clear_errors(tmp_path):
    with pytest.raises(K8sConfigError, match="cannot load kubeconfig.*nope"):
        build_api_client(params(kubeconfig=kubeconfig_dict(), context="nope"))
    with pytest.raises(K8sConfigError, match="does not exist"):
        build_api_client(params(kubeconfig=str(tmp_path / "missing")))


def test_several_impersonated_groups_are_refused_before_any_request():
    with pytest.raises(K8sConfigError, match="only one group"):
        build_api_client(params(kubeconfig=kubeconfig_dict(), impersonate_groups=["a", "b"]))


def test_no_cluster_configured_says_how_to_configure(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(K8sConfigError, match="set kubeconfig or host"):
        build_api_client(params())


def test_missing_library_is_reported_as_missing_required_lib(monkeypatch):
    monkeypatch.setattr(_k8s_client, "k8s_client", None)
    with pytest.raises(K8sConfigError, match="kubernetes"):
        build_api_client(params(host="https://x"))


def test_api_error_carries_status_message_reason_and_code():
    error = ApiException(status=409, reason="Conflict")
    error.body = CONFLICT_BODY
    assert status_of(error) == (409, "Conflict", json.loads(CONFLICT_BODY)["message"])
    message = api_error_message(error, "acquire lock kube-system/gpu-rollout")
    assert message.startswith("acquire lock kube-system/gpu-rollout: Operation cannot be fulfilled")
    assert message.endswith("(reason Conflict, HTTP 409)")


def test_non_json_error_body_and_plain_exceptions_still_give_a_message():
    assert status_from_response(502, "Bad Gateway", b"<html>upstream down</html>") == (
        502, "Bad Gateway", "<html>upstream down</html>")
    assert status_from_response(500, "Internal Server Error", "") == (
        500, "Internal Server Error", "Internal Server Error")
    assert api_error_message(ConnectionRefusedError("[Errno 111] Connection refused"), "list nodes") == (
        "list nodes: [Errno 111] Connection refused")
