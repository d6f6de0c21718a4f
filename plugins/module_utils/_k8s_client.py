# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one Kubernetes connection layer of gpuops.nvidia (private: other collections must not import it).

Every Kubernetes module of this collection uses it the same way::

    from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import (
        K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message)

    argument_spec = dict(K8S_AUTH_ARG_SPEC, name=dict(type='str', required=True))
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    api = api_client_from_module(module)          # fails the task cleanly without the kubernetes library
    core = kubernetes.client.CoreV1Api(api)       # import kubernetes inside the module with try/except too
    try:
        node = core.read_node(module.params['name'])
    except Exception as error:                    # ApiException, urllib3 connection and TLS errors
        module.fail_json(msg=api_error_message(error, 'read node %s' % module.params['name']))

- ``K8S_AUTH_ARG_SPEC``: kubernetes.core's connection options with the same names, aliases and ``K8S_AUTH_*``
  environment fallbacks (documented once in the ``gpuops.nvidia.k8s_auth`` doc fragment), so a playbook's
  ``module_defaults`` for ``group/gpuops.nvidia.k8s`` (or copied from kubernetes.core) carry over.
- ``api_client_from_module(module)`` -> ``kubernetes.client.ApiClient``: a missing library is
  ``missing_required_lib('kubernetes')``, a bad kubeconfig a one-line message; never a traceback.
- ``build_api_client(params)``: the same without a module (raises ``K8sConfigError``), for tests and benchmarks.
- ``api_error_message(error, action)``: "ACTION: MESSAGE (reason REASON, HTTP CODE)" from the API's Status body;
  plain text for connection errors. ``status_of(error)`` gives ``(code, reason, message)`` for decisions
  (409 Conflict, 404 NotFound, 410 Expired, 429 TooManyRequests).
"""

from __future__ import annotations

import json
import os
import traceback

from ansible.module_utils.basic import env_fallback, missing_required_lib

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    k8s_client = k8s_config = None
else:
    KUBERNETES_IMPORT_ERROR = None


USER_AGENT = 'gpuops.nvidia'


def _env(*names):
    return (env_fallback, list(names))


K8S_AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type='raw', fallback=_env('K8S_AUTH_KUBECONFIG')),
    context=dict(type='str', fallback=_env('K8S_AUTH_CONTEXT')),
    host=dict(type='str', fallback=_env('K8S_AUTH_HOST')),
    api_key=dict(type='str', no_log=True, fallback=_env('K8S_AUTH_API_KEY')),
    validate_certs=dict(type='bool', aliases=['verify_ssl'], fallback=_env('K8S_AUTH_VERIFY_SSL')),
    ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=_env('K8S_AUTH_SSL_CA_CERT')),
    client_cert=dict(type='path', aliases=['cert_file'], fallback=_env('K8S_AUTH_CERT_FILE')),
    client_key=dict(type='path', aliases=['key_file'], no_log=False, fallback=_env('K8S_AUTH_KEY_FILE')),
    proxy=dict(type='str', fallback=_env('K8S_AUTH_PROXY')),
    impersonate_user=dict(type='str', fallback=_env('K8S_AUTH_IMPERSONATE_USER')),
    impersonate_groups=dict(type='list', elements='str', fallback=_env('K8S_AUTH_IMPERSONATE_GROUPS')),
)


class K8sConfigError(Exception):
    """The connection options do not give a usable client configuration."""


def build_api_client(params):
    """A ``kubernetes.client.ApiClient`` from connection options (the keys of ``K8S_AUTH_ARG_SPEC``).

    As kubernetes.core: ``kubeconfig`` (a path or the parsed dict) and ``context`` are loaded first; without them
    and without ``host``, the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``) is used, else the
    in-cluster service account. The explicit options then override what the kubeconfig says.
    """
    if k8s_client is None:
        raise K8sConfigError(missing_required_lib('kubernetes'))
    configuration = k8s_client.Configuration()
    kubeconfig = params.get('kubeconfig')
    context = params.get('context')
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(kubeconfig, context=context, client_configuration=configuration)
        elif kubeconfig:
            path = os.path.expanduser(str(kubeconfig))
            if not os.path.exists(path):
                raise K8sConfigError('kubeconfig %s does not exist' % path)
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        elif not params.get('host'):
            default_paths = [os.path.expanduser(one) for one in
                             os.environ.get('KUBECONFIG', '~/.kube/config').split(os.pathsep) if one]
            if any(os.path.exists(one) for one in default_paths):
                k8s_config.load_kube_config(context=context, client_configuration=configuration)
            elif os.environ.get('KUBERNETES_SERVICE_HOST'):
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                raise K8sConfigError('no cluster to talk to: set kubeconfig or host (or K8S_AUTH_KUBECONFIG, '
                                     '$KUBECONFIG, ~/.kube/config, or run in a pod)')
    except k8s_config.ConfigException as error:
        raise K8sConfigError('cannot load kubeconfig: %s' % error)
    _apply_overrides(configuration, params)
    api = k8s_client.ApiClient(configuration)
    api.user_agent = '%s %s' % (USER_AGENT, api.user_agent)   # the API server's audit log names the collection
    if params.get('impersonate_user'):
        api.set_default_header('Impersonate-User', params['impersonate_user'])
    groups = params.get('impersonate_groups') or []
    if len(groups) > 1:
        # the API server wants one Impersonate-Group header per group; the Python client sends one value per name
        raise K8sConfigError('impersonate_groups: the kubernetes Python client can send only one group, got %s'
                             % ', '.join(groups))
    if groups:
        api.set_default_header('Impersonate-Group', groups[0])
    return api


def _apply_overrides(configuration, params):
    if params.get('host'):
        configuration.host = params['host']
    if params.get('api_key'):
        # 'BearerToken' is the key of kubernetes >= 30 (with 'authorization' as its alias), 'authorization' before
        bearer = 'Bearer ' + params['api_key']
        configuration.api_key = {'BearerToken': bearer, 'authorization': bearer}
        configuration.api_key_prefix = {}
        configuration.refresh_api_key_hook = None   # the kubeconfig loader's hook would put its own token back
    if params.get('validate_certs') is not None:
        configuration.verify_ssl = params['validate_certs']
    for option, attribute in (('ca_cert', 'ssl_ca_cert'), ('client_cert', 'cert_file'), ('client_key', 'key_file'),
                              ('proxy', 'proxy')):
        if params.get(option):
            setattr(configuration, attribute, params[option])


def api_client_from_module(module):
    """``build_api_client(module.params)``, failing the task with a clear message instead of raising."""
    if k8s_client is None:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_IMPORT_ERROR)
    try:
        return build_api_client(module.params)
    except K8sConfigError as error:
        module.fail_json(msg=str(error))


def status_of(error):
    """``(code, reason, message)`` of an API error: HTTP code, the Status ``reason`` (e.g. ``Conflict``,
    ``NotFound``, ``Expired``) and its ``message``; ``(None, None, str(error))`` for anything else."""
    code = getattr(error, 'status', None)   # ApiException, or any error carrying an HTTP code and a Status body
    if not isinstance(code, int) or isinstance(code, bool):
        return None, None, str(error)
    return status_from_response(code, getattr(error, 'reason', None), getattr(error, 'body', None))


def status_from_response(code, http_reason, body):
    """``(code, reason, message)`` from an HTTP error response whose body should be a ``metav1.Status``."""
    status = {}
    if body:
        try:
            status = json.loads(body.decode('utf-8', 'replace') if isinstance(body, bytes) else body)
        except ValueError:
            status = {}
    if not isinstance(status, dict):
        status = {}
    text = body.decode('utf-8', 'replace') if isinstance(body, bytes) else (body or '')
    message = status.get('message') or text.strip() or http_reason or 'no message'
    return code, status.get('reason') or http_reason, message


def api_error_message(error, action=None):
    """One line for a failed API call: ``ACTION: MESSAGE (reason REASON, HTTP CODE)``."""
    code, reason, message = status_of(error)
    if code is None:
        text = message or error.__class__.__name__
    else:
        text = '%s (reason %s, HTTP %s)' % (message, reason or 'unknown', code)
    return '%s: %s' % (action, text) if action else text
