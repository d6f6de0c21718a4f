# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one Kubernetes connection layer of gpuops.nvidia (private: other collections must not import it).

Every Kubernetes module of this collection uses it the same way::

    from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
        K8S_AUTH_ARG_SPEC, api_client_from_module, api_error_message)

    argument_spec = dict(K8S_AUTH_ARG_SPEC, name=dict(type='str', required=True))
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    api = api_client_from_module(module)          # fails the task cleanly without the kubernetes library
    try:
        node = request_json(api, 'GET', resource_path('v1', 'nodes', module.params['name']))
    except Exception as error:                    # ApiError, urllib3 connection and TLS errors
        module.fail_json(msg=api_error_message(error, 'read node %s' % module.params['name']))

- ``K8S_AUTH_ARG_SPEC``: kubernetes.core's connection options with the same names, aliases and ``K8S_AUTH_*``
  environment fallbacks (documented once in the ``gpuops.nvidia.k8s_auth`` doc fragment), so a playbook's
  ``module_defaults`` for ``group/gpuops.nvidia.k8s`` (or copied from kubernetes.core) carry over.
- ``api_client_from_module(module)`` -> ``kubernetes.client.ApiClient``: a missing library is
  ``missing_required_lib('kubernetes')``, a bad kubeconfig a one-line message; never a traceback.
- ``build_api_client(params)``: the same without a module (raises ``K8sConfigError``), for tests and benchmarks.
- ``request_json(api, method, path, query=None, body=None, content_type=None, timeout_s=None)``: one API request
  as plain JSON over the ``ApiClient``'s connection pool, headers and auth (``request(..., stream=True)`` gives the
  urllib3 response of a watch); ``list_call(api, path, **selectors)`` is the ``list_call`` of ``_k8s_watch``.
  The client's typed API classes and models are never loaded: building them costs ~0.4 s CPU per module run with
  kubernetes >= 35 (pydantic models), and the modules work on JSON anyway. A non-2xx answer raises ``ApiError``.
- ``api_error_message(error, action)``: "ACTION: MESSAGE (reason REASON, HTTP CODE)" from the API's Status body;
  plain text for connection errors. ``status_of(error)`` gives ``(code, reason, message)`` for decisions
  (409 Conflict, 404 NotFound, 410 Expired, 429 TooManyRequests).
"""

from __future__ import annotations

import json
import os
import re
import time
import traceback

from urllib.parse import quote, urlencode

from ansible.module_utils.basic import env_fallback, missing_required_lib

try:
    import urllib3
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    k8s_client = k8s_config = urllib3 = None
else:
    KUBERNETES_IMPORT_ERROR = None


USER_AGENT = 'gpuops.nvidia'

JSON = 'application/json'
MERGE_PATCH = 'application/merge-patch+json'
STRATEGIC_MERGE_PATCH = 'application/strategic-merge-patch+json'
JSON_PATCH = 'application/json-patch+json'

# the keyword arguments of the typed list methods (and of _k8s_watch's list calls) -> the API's query parameters
QUERY_NAMES = dict(field_selector='fieldSelector', label_selector='labelSelector', resource_version='resourceVersion',
                   allow_watch_bookmarks='allowWatchBookmarks', timeout_seconds='timeoutSeconds', watch='watch',
                   limit='limit', _continue='continue', grace_period_seconds='gracePeriodSeconds')


# every request has a connect and a read timeout (the request_timeout option, or this): an API server that accepts
# and never answers fails the call instead of hanging the task
DEFAULT_REQUEST_TIMEOUT_S = 60
CONNECT_TIMEOUT_CAP_S = 10
# answers of an overloaded or restarting API server (and its load balancer) that an idempotent call may retry
RETRY_STATUSES = (500, 502, 503, 504)
# a transient failure is retried with capped exponential back-off (0.5, 1, 2, 4, 4, ... s) until the retry window
# has passed since the first attempt: long enough to ride out an API server restart (10-30 s), never longer than
# the request's own timeout (``timeout_s`` or ``request_timeout``), so a short timeout keeps a short window
RETRY_FIRST_DELAY_S = 0.5
RETRY_MAX_DELAY_S = 4
RETRY_WINDOW_S = 30


def _env(*names):
    return (env_fallback, list(names))


K8S_AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type='raw', fallback=_env('K8S_AUTH_KUBECONFIG')),
    context=dict(type='str', fallback=_env('K8S_AUTH_CONTEXT')),
    host=dict(type='str', fallback=_env('K8S_AUTH_HOST')),
    api_key=dict(type='str', no_log=True, fallback=_env('K8S_AUTH_API_KEY')),
    username=dict(type='str', fallback=_env('K8S_AUTH_USERNAME')),
    password=dict(type='str', no_log=True, fallback=_env('K8S_AUTH_PASSWORD')),
    validate_certs=dict(type='bool', aliases=['verify_ssl'], fallback=_env('K8S_AUTH_VERIFY_SSL')),
    ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=_env('K8S_AUTH_SSL_CA_CERT')),
    client_cert=dict(type='path', aliases=['cert_file'], fallback=_env('K8S_AUTH_CERT_FILE')),
    client_key=dict(type='path', aliases=['key_file'], no_log=False, fallback=_env('K8S_AUTH_KEY_FILE')),
    proxy=dict(type='str', fallback=_env('K8S_AUTH_PROXY')),
    no_proxy=dict(type='str', fallback=_env('K8S_AUTH_NO_PROXY')),
    proxy_headers=dict(type='dict', apply_defaults=True, options=dict(
        proxy_basic_auth=dict(type='str', no_log=True, fallback=_env('K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH')),
        basic_auth=dict(type='str', no_log=True, fallback=_env('K8S_AUTH_PROXY_HEADERS_BASIC_AUTH')),
        user_agent=dict(type='str', fallback=_env('K8S_AUTH_PROXY_HEADERS_USER_AGENT')),
    )),
    persist_config=dict(type='bool', fallback=_env('K8S_AUTH_PERSIST_CONFIG')),
    impersonate_user=dict(type='str', fallback=_env('K8S_AUTH_IMPERSONATE_USER')),
    impersonate_groups=dict(type='list', elements='str', fallback=_env('K8S_AUTH_IMPERSONATE_GROUPS')),
    request_timeout=dict(type='float', default=DEFAULT_REQUEST_TIMEOUT_S, fallback=_env('K8S_AUTH_REQUEST_TIMEOUT')),
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
    # the client's loader writes refreshed tokens back to the file unless told not to; kubernetes.core's default
    loaded = dict(context=params.get('context'), client_configuration=configuration,
                  persist_config=bool(params.get('persist_config')))
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(kubeconfig, **loaded)
        elif kubeconfig:
            path = os.path.expanduser(str(kubeconfig))
            if not os.path.exists(path):
                raise K8sConfigError('kubeconfig %s does not exist' % path)
            k8s_config.load_kube_config(config_file=path, **loaded)
        elif not params.get('host'):
            default_paths = [os.path.expanduser(one) for one in
                             os.environ.get('KUBECONFIG', '~/.kube/config').split(os.pathsep) if one]
            if any(os.path.exists(one) for one in default_paths):
                k8s_config.load_kube_config(**loaded)
            elif os.environ.get('KUBERNETES_SERVICE_HOST'):
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                raise K8sConfigError('no cluster to talk to: set kubeconfig or host (or K8S_AUTH_KUBECONFIG, '
                                     '$KUBECONFIG, ~/.kube/config, or run in a pod)')
    except k8s_config.ConfigException as error:
        raise K8sConfigError('cannot load kubeconfig: %s' % error)
    _apply_overrides(configuration, params)
    api = k8s_client.ApiClient(configuration)
    api.request_timeout_s = _request_timeout(params.get('request_timeout'))
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


def _request_timeout(value):
    if value is None:
        return DEFAULT_REQUEST_TIMEOUT_S
    if value <= 0:
        raise K8sConfigError('request_timeout must be a positive number of seconds, got %s' % value)
    return value


def _apply_overrides(configuration, params):
    if params.get('host'):
        configuration.host = params['host']
    if params.get('api_key'):
        _set_authorization(configuration, 'Bearer ' + params['api_key'])
    elif params.get('username') and params.get('password'):
        # the client's auth_settings() carries only the api_key entry: basic auth goes through it as well
        _set_authorization(configuration, urllib3.util.make_headers(
            basic_auth='%s:%s' % (params['username'], params['password']))['authorization'])
    if params.get('validate_certs') is not None:
        configuration.verify_ssl = params['validate_certs']
    for option, attribute in (('ca_cert', 'ssl_ca_cert'), ('client_cert', 'cert_file'), ('client_key', 'key_file'),
                              ('proxy', 'proxy'), ('no_proxy', 'no_proxy')):
        if params.get(option):
            setattr(configuration, attribute, params[option])
    proxy_headers = dict((name, value) for name, value in (params.get('proxy_headers') or {}).items()
                         if value is not None)
    if proxy_headers:
        configuration.proxy_headers = urllib3.util.make_headers(**proxy_headers)


def _set_authorization(configuration, value):
    # 'BearerToken' is the key of kubernetes >= 30 (with 'authorization' as its alias), 'authorization' before
    configuration.api_key = {'BearerToken': value, 'authorization': value}
    configuration.api_key_prefix = {}
    configuration.refresh_api_key_hook = None   # the kubeconfig loader's hook would put its own token back


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
        retried = getattr(error, 'attempts', 1) or 1
        text = '%s (reason %s, HTTP %s%s)' % (message, reason or 'unknown', code, '; %s, %d attempts' % (
            error.call, retried) if retried > 1 else '')
    return '%s: %s' % (action, text) if action else text


class ApiError(Exception):
    """A non-2xx answer of the API server, with what ``status_of`` reads: ``status`` (the HTTP code), ``reason``
    (the HTTP reason phrase), ``body`` (the answer as text, a ``metav1.Status`` in JSON) and ``headers``."""

    def __init__(self, status, reason, body, headers=None, call=None, attempts=1):
        self.status = status
        self.reason = reason
        self.body = body.decode('utf-8', 'replace') if isinstance(body, bytes) else body
        self.headers = headers or {}
        self.call = call
        self.attempts = attempts
        super(ApiError, self).__init__('%sHTTP %s %s' % (call + ': ' if call else '', status, reason))


def resource_path(group_version, plural, name=None, namespace=None, subresource=None):
    """The API path of a collection or an object: ``resource_path('v1', 'pods', 'p', 'ns', 'eviction')`` is
    ``/api/v1/namespaces/ns/pods/p/eviction``; a group's version is ``coordination.k8s.io/v1``."""
    parts = ['/api/v1' if group_version == 'v1' else '/apis/' + group_version]
    if namespace is not None:
        parts += ['namespaces', quote(namespace, safe='')]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=''))
    if subresource:
        parts.append(subresource)
    return '/'.join(parts)


DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')


def object_name_problem(option, value):
    """Why ``value`` of module option ``option`` cannot name a node, Lease or namespace (None when it can): such
    names are DNS subdomains, and an empty one would make ``resource_path`` address the whole collection."""
    if not value or not value.strip():
        return '%s must not be empty' % option
    if len(value) > 253 or not DNS_SUBDOMAIN.match(value):
        return ('%s must be a DNS subdomain name (at most 253 lower case letters, digits, "-" and ".", starting and '
                'ending with a letter or digit), got %r' % (option, value))
    return None


def typed_patch_content_type(body):
    """The content type the client's typed ``patch_*`` methods send: JSON patch for a list of operations, else
    strategic merge patch (their rest layer turns the JSON patch they select into one for any other body)."""
    return JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH


def _query_pairs(query):
    pairs = []
    for name, value in (query.items() if isinstance(query, dict) else query or ()):
        if value is None:
            continue
        if isinstance(value, bool):
            value = 'true' if value else 'false'
        pairs.append((QUERY_NAMES.get(name, name), str(value)))
    return pairs


def request(api, method, path, query=None, body=None, content_type=None, timeout_s=None, stream=False):
    """One request to the API server over ``api`` (a ``kubernetes.client.ApiClient``): its host, default headers
    (User-Agent, impersonation), auth (``configuration.auth_settings()`` also runs the kubeconfig's token refresh
    hook) and connection pool (client certificate, CA, proxy). Returns the urllib3 response, read already unless
    ``stream``; a non-2xx answer raises ``ApiError``, no answer (timeout, refused or reset connection)
    ``K8sRequestError``; both name the call.

    ``query``: a dict or pairs (the typed methods' snake_case names are mapped, ``None`` values left out, booleans
    sent as ``true``/``false``); ``body``: sent as JSON with ``content_type`` (default ``application/json``; a
    PATCH must name its patch type, see ``typed_patch_content_type``).

    Timeouts: connect within ``min(10, t)`` and each read within ``t`` seconds, ``t`` being ``timeout_s`` or the
    client's ``request_timeout`` option; a watch (``watch=true`` with ``timeoutSeconds``) may stay quiet until the
    server ends it, so its reads wait ``timeoutSeconds + t``.

    Retries (``retry_after``): a transient failure is tried again with capped exponential back-off (0.5, 1, 2, 4,
    4, ... s) until ``min(RETRY_WINDOW_S, t)`` seconds have passed since the first attempt; then the last error is
    raised, naming the attempts. Transient: a refused connection (the request never reached the server: any call);
    a connection reset or closed without an answer, or an answer 500/502/503/504 (an idempotent call only,
    ``idempotent_call``: the server may have acted on it); 429 Too Many Requests (the API server's priority and
    fairness refused it unprocessed: any call but an eviction, whose 429 is the disruption budget's answer for the
    drain to decide), waiting what its Retry-After (or its Status's ``retryAfterSeconds``) asks, and not at all
    when that is past the window. A timeout is
    never retried (the wait was already long), nor any other answer: a 409 Conflict goes back to the caller, who
    reads the object again and decides.
    """
    method = method.upper()
    configuration = api.configuration
    headers = dict(api.default_headers)
    headers['Accept'] = JSON
    pairs = _query_pairs(query)
    for setting in configuration.auth_settings().values():
        if not setting.get('value'):
            continue
        if setting.get('in') == 'header':
            headers[setting['key']] = setting['value']
        elif setting.get('in') == 'query':
            pairs.append((setting['key'], setting['value']))
    encoded = None
    if method == 'PATCH' and content_type not in (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH):
        raise ValueError('a PATCH needs its patch type (merge, strategic merge or JSON patch), got %r' % content_type)
    if body is not None:
        headers['Content-Type'] = content_type or JSON
        encoded = json.dumps(body).encode('utf-8')
    url = configuration.host.rstrip('/') + path + ('?' + urlencode(pairs) if pairs else '')
    call = '%s %s' % (method, path)
    budget_s = timeout_s or getattr(api, 'request_timeout_s', DEFAULT_REQUEST_TIMEOUT_S)
    timeout = _timeout(budget_s, pairs)
    idempotent = idempotent_call(method, path, body)
    deadline = time.monotonic() + min(RETRY_WINDOW_S, budget_s)
    attempt = 0
    while True:
        attempt += 1
        try:
            response = api.rest_client.pool_manager.request(method, url, body=encoded, headers=headers,
                                                            timeout=timeout, retries=False,
                                                            preload_content=not stream)
        except urllib3.exceptions.NewConnectionError as error:     # refused: nothing was sent
            wait_s = retry_after(attempt, deadline, True)
            if wait_s is None:
                raise K8sRequestError(call, error, attempt)
        except urllib3.exceptions.ProtocolError as error:          # reset, or closed without an answer
            wait_s = retry_after(attempt, deadline, idempotent)
            if wait_s is None:
                raise K8sRequestError(call, error, attempt)
        except urllib3.exceptions.HTTPError as error:   # timeouts (never retried: the wait is already long), TLS
            raise K8sRequestError(call, error, attempt)
        else:
            if 200 <= response.status < 300:
                return response
            data = response.data
            if stream:
                response.release_conn()
            wait_s = None
            if response.status == 429:
                wait_s = retry_after(attempt, deadline, not path.endswith('/eviction'), asked_wait(response, data))
            elif response.status in RETRY_STATUSES:
                wait_s = retry_after(attempt, deadline, idempotent, asked_wait(response, data))
            if wait_s is None:
                raise ApiError(response.status, response.reason, data, dict(response.headers), call=call,
                               attempts=attempt)
        time.sleep(wait_s)


def asked_wait(response, data):
    """The wait an error answer asks for: its Retry-After header, else its Status's
    ``details.retryAfterSeconds`` (None when neither)."""
    header = response.headers.get('Retry-After')
    if header is not None:
        return header
    try:
        status = json.loads(data.decode('utf-8', 'replace') if isinstance(data, bytes) else data or '')
    except ValueError:
        return None
    details = status.get('details') if isinstance(status, dict) else None
    return details.get('retryAfterSeconds') if isinstance(details, dict) else None


def retry_after(attempt, deadline, retriable, asked=None, now=None):
    """Seconds to wait before attempt ``attempt + 1`` of a call whose retry window ends at ``deadline``
    (``time.monotonic()``), or None to give up: not ``retriable``, the window over, or a Retry-After (``asked``,
    seconds as the API server sends it) past the window. The wait doubles from ``RETRY_FIRST_DELAY_S`` up to
    ``RETRY_MAX_DELAY_S`` (at least what Retry-After asks) and is cut to end at the deadline, where the last
    attempt is made."""
    if not retriable:
        return None
    left_s = deadline - (time.monotonic() if now is None else now)
    if left_s <= 0:
        return None
    wait_s = min(RETRY_FIRST_DELAY_S * 2 ** (attempt - 1), RETRY_MAX_DELAY_S)
    try:
        asked_s = float(asked) if asked is not None else None
    except ValueError:      # an HTTP date: not sent by the API server; the back-off stands
        asked_s = None
    if asked_s is not None and asked_s >= 0:
        if asked_s > left_s:
            return None
        wait_s = max(wait_s, asked_s)
    return min(wait_s, left_s)


def _timeout(read_s, pairs):
    query = dict(pairs)
    if query.get('watch') == 'true' and query.get('timeoutSeconds'):
        read_s += float(query['timeoutSeconds'])
    return urllib3.Timeout(connect=min(CONNECT_TIMEOUT_CAP_S, read_s), read=read_s)


def idempotent_call(method, path, body):
    """Whether sending the call twice does no more than sending it once: reads, evictions (a second one of a pod
    already evicted is answered 404 or 429, it never evicts another pod), and replaces or patches guarded by the
    resourceVersion read (a second one after the first was applied is answered 409 Conflict)."""
    if method in ('GET', 'HEAD'):
        return True
    if method == 'POST':
        return path.endswith('/eviction')
    if method in ('PUT', 'PATCH'):
        if isinstance(body, dict):
            return bool((body.get('metadata') or {}).get('resourceVersion'))
        if isinstance(body, list):
            return any(isinstance(op, dict) and op.get('op') == 'test' and op.get('path') == '/metadata/resourceVersion'
                       for op in body)
    return False


class K8sRequestError(Exception):
    """No answer from the API server: the call (``GET /api/v1/nodes``), what happened and after how many
    attempts; ``timed_out`` when it was a read timeout (a watch re-lists on it)."""

    def __init__(self, call, error, attempts=1):
        self.call = call
        self.attempts = attempts
        self.timed_out = isinstance(error, urllib3.exceptions.ReadTimeoutError)
        what = 'no answer within the read timeout' if self.timed_out else _reason_of(error)
        tries = ' (%d attempts)' % attempts if attempts > 1 else ''
        super(K8sRequestError, self).__init__('%s: %s%s' % (call, what, tries))


def _reason_of(error):
    reason = getattr(error, 'reason', None) or (error.args[-1] if getattr(error, 'args', None) else None)
    return '%s: %s' % (error.__class__.__name__, reason or error)


def is_read_timeout(error):
    """Whether ``error`` is a read that got no answer in time (from ``request`` or from reading a stream)."""
    return getattr(error, 'timed_out', False) or (
        urllib3 is not None and isinstance(error, urllib3.exceptions.ReadTimeoutError))


def request_json(api, method, path, query=None, body=None, content_type=None, timeout_s=None):
    """``request(...)``'s answer decoded from JSON (``None`` for an empty one)."""
    data = request(api, method, path, query=query, body=body, content_type=content_type, timeout_s=timeout_s).data
    return json.loads(data) if data else None


def list_call(api, path, **selectors):
    """A ``list_call(**query)`` for ``_k8s_watch`` (``ListWatch``, ``list_json``) that lists ``path`` with
    ``selectors`` (``field_selector=...``, ``label_selector=...``): the urllib3 response, streamed for a watch."""
    def call(_preload_content=False, **query):  # pylint: disable=unused-argument
        merged = dict(selectors, **query)
        return request(api, 'GET', path, query=merged, stream=bool(merged.get('watch')))
    return call


def served_versions(api, group):
    """The versions of API group ``group`` the server serves (one discovery request, ``GET /apis/`` as the typed
    ApisApi sends it)."""
    groups = request_json(api, 'GET', '/apis/').get('groups') or []
    return [version.get('version') for one in groups if one.get('name') == group
            for version in one.get('versions') or []]


class NodeApi:
    """``read_node`` and ``patch_node`` as the typed CoreV1Api has them, on JSON: the patch type is the one the
    typed ``patch_node`` sends (``typed_patch_content_type``)."""

    def __init__(self, api):
        self.api = api

    def read_node(self, name):
        return request_json(self.api, 'GET', resource_path('v1', 'nodes', name))

    def patch_node(self, name, body):
        return request_json(self.api, 'PATCH', resource_path('v1', 'nodes', name), body=body,
                            content_type=typed_patch_content_type(body))


def set_connection_pool_size(api, size):
    """Gives ``api`` a connection pool of ``size`` connections per host (the client's default is 5 per CPU)."""
    api.configuration.connection_pool_maxsize = size
    api.rest_client = type(api.rest_client)(api.configuration)
