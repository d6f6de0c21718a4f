"""HTTPS front of the Kubernetes API twin: the REST paths kubectl and client-go use, over HTTP/1.1 + TLS,
bearer-token auth, ``metav1.Status`` errors, chunked watch streams, server-side ``Table`` printing
(what ``kubectl get`` asks for, printed by ``tables.py``) and a record of every request; paths and query
parameters are read by ``routes.py``.

``ApiServer(store, host, port, ca_dir, token).start()``; ``.url``, ``.ca_pem``, ``.token``, ``.stop()``;
``faults_path``: a rule file of ``faults.py`` (injected errors and hung requests).
"""
from __future__ import annotations

import ipaddress
import json
import select
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import parse_qs, urlsplit

from . import admission_policy, discovery, protobuf, tls
from .access import Access
from .resources import RESOURCES
from .tables import table_for
from .versions import to_served, to_storage
from .eviction import pod_is_terminal
from .errors import ApiError
from .faults import ApiFaults
from .managedfields import manager_for
from .patch import APPLY_PATCH, MERGE_PATCH, apply_patch_document, check_patch_type, decode_patch
from .routes import Route, dry_run_requested, int_param, is_true, parse_resource_path, query_value
from .store import Store

DEFAULT_WATCH_TIMEOUT_S = 1800
OPENAPI_V2_PROTOBUF = "application/octet-stream"   # what kube-openapi answers for the protobuf form
MAX_BODY_BYTES = 16 * 1024 * 1024

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024   # headers and body leave in one TLS record; handle_one_request flushes
    server_version = "gpulab-kube"
    api: "ApiServer"

    # -------------------------------------------------------- plumbing

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log; requests are recorded
        pass

    def _send_bytes(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for warning in (self._policy_outcome or {}).get("warnings", []):   # ValidatingAdmissionPolicy Warn
            self.send_header("Warning", admission_policy.warning_header(warning))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._code = code

    def _send_json(self, code: int, document) -> None:
        self._send_bytes(code, json.dumps(document, separators=(",", ":")).encode())

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.code, error.to_status())

    def _read_body(self) -> bytes:
        """The request body, read once (always read in full, so the connection stays usable after an error)."""
        if self._body is None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                raise ApiError(413, "RequestEntityTooLarge", "request entity too large")
            if length:
                self._body = self.rfile.read(length)
            elif (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
                self._body = self._read_chunked()
            else:
                self._body = b""
        return self._body

    def _read_chunked(self) -> bytes:
        body = b""
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    def _content_type(self, default: str = "") -> str:
        """The request's media type, without parameters (``; charset=utf-8``)."""
        return (self.headers.get("Content-Type") or default).split(";")[0].strip()

    def _json_body(self):
        """The body as a JSON-form object, whether it came as JSON, YAML or Kubernetes protobuf."""
        body = self._read_body()
        if not body:
            return {}
        content_type = self._content_type("application/json")
        if content_type == "application/vnd.kubernetes.protobuf":
            try:
                return protobuf.decode_k8s_protobuf(body)
            except (protobuf.ProtobufError, ValueError, IndexError) as error:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request could not be decoded as"
                               " protobuf: %s" % error)
        if "cbor" in content_type:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted"
                           " media types include: application/json, application/yaml,"
                           " application/vnd.kubernetes.protobuf")
        try:
            return json.loads(body)
        except ValueError:
            try:
                import yaml
                return yaml.safe_load(body)
            except Exception:
                raise ApiError(400, "BadRequest", "the body of the request could not be decoded as JSON")

    def _handle(self) -> None:
        started = time.monotonic()
        self._code = 0
        self._verb = None
        self._body = None
        self._user = None
        self._policy_outcome = None
        split = urlsplit(self.path)
        try:
            if self.command in ("POST", "PUT", "PATCH", "DELETE"):
                self._read_body()
            self._user = self.api.access.authenticate(self.headers.get("Authorization") or "", self._peer_certificate(),
                                                      self.headers)
            if self._user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self._injected_fault(split.path, split.query)
            with admission_policy.request_scope() as self._policy_outcome:
                self._dispatch(split.path, parse_qs(split.query, keep_blank_values=True))
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
        except Exception as error:   # a bug must answer 500, not drop the connection
            self._send_error(ApiError(500, "InternalError", "Internal error occurred: %s" % error))
        finally:
            recorder = self.api.store.recorder
            if recorder is not None:
                recorder.record_request(self.command, split.path, split.query, self._code,
                                        self._user.name if self._user else None, self.headers.get("User-Agent"),
                                        (time.monotonic() - started) * 1000.0, self._verb,
                                        admission_policy.audit_annotations(self._policy_outcome or {"audit": []}))

    def _peer_certificate(self) -> Optional[dict]:
        """The client's verified certificate (an admin's or a kubelet's), None when it sent none."""
        try:
            return self.connection.getpeercert() or None
        except (AttributeError, ValueError, ssl.SSLError):
            return None

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def _injected_fault(self, path: str, query: str) -> None:
        """A fault of ``faults.py`` for this request: held, then answered with its error, dropped unanswered, or
        served; a watch may be given an early end (``self._close_watch_after_s``)."""
        self._close_watch_after_s = None
        if self.api.faults is None:
            return
        watch = "/watch/" in path or is_true(query_value(parse_qs(query, keep_blank_values=True), "watch"))
        taken = self.api.faults.take(self.command, path, watch)
        if taken is None:
            return
        hang_s, error, self._close_watch_after_s, reset, refuse_s = taken
        if hang_s:
            time.sleep(hang_s)
        if refuse_s:    # a restart: the listener closed for the rest of the rule's for_s
            self.api.close_listener_for(refuse_s)
        if reset:       # as during a restart: the connection dropped unanswered
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            raise ConnectionResetError("injected fault: connection dropped (gpulab api-faults.json)")
        if error is not None:
            raise error

    # -------------------------------------------------------- routing

    def _dispatch(self, path: str, query: Dict[str, List[str]]) -> None:
        if self._serve_non_resource(path):
            return
        answer = self.api.access.check(self.command, path, query, self._user, self._json_body)   # RBAC; access.py
        if answer is not None:
            self._verb = "create"
            self._send_json(201, answer)
            return
        route = parse_resource_path(path)
        if route is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if route.subresource in ("eviction", "binding"):
            self._verb = "create"
            self._pod_action(route, query)
        elif route.subresource == "log":
            self._verb = "get"
            self._pod_log(route, query)
        elif route.subresource == "scale":
            self._scale(route, query)
        elif route.name is None:
            self._collection(route, query)
        else:
            self._item(route, query)

    def _serve_non_resource(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        served = self.api.store.served_resources   # built-in resources and the store's CRDs, asked when needed
        documents = {
            "/version": lambda: discovery.SERVER_VERSION,
            "/api": lambda: discovery.core_versions("%s:%d" % (self.api.host, self.api.port)),
            "/apis": lambda: discovery.group_list(served()),
            "/api/v1": lambda: discovery.resource_list("", "v1", served()),
            "/openapi/v3": lambda: discovery.openapi_v3_index(served()),
        }
        if path in documents:
            self._verb = "get"
            self._send_json(200, documents[path]())
            return True
        if path in ("/healthz", "/readyz", "/livez"):
            self._send_bytes(200, b"ok", "text/plain; charset=utf-8")
            return True
        if path == "/openapi/v2":
            accept = self.headers.get("Accept") or "application/json"
            if "protobuf" in accept:
                self._send_bytes(200, discovery.openapi_v2_protobuf(), OPENAPI_V2_PROTOBUF)
            else:
                self._send_json(200, discovery.openapi_v2(served()))
            return True
        parts = path.strip("/").split("/")
        if parts[:2] == ["openapi", "v3"]:
            group, version = ("", "v1") if parts[2:4] == ["api", "v1"] else (
                (parts[3], parts[4]) if len(parts) == 5 and parts[2] == "apis" else (None, None))
            document = discovery.openapi_v3_group(group, version, served()) if group is not None else None
            if document is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send_json(200, document)
            return True
        if parts[0] == "apis" and len(parts) in (2, 3):
            if len(parts) == 2:
                document = discovery.api_group(parts[1], served())
            else:
                document = discovery.resource_list(parts[1], parts[2], served())
            if document is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send_json(200, document)
            return True
        return False

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    # -------------------------------------------------------- collections

    def _collection(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        if self.command in ("GET", "HEAD"):
            if route.watch_path or is_true(query_value(query, "watch")):
                self._verb = "watch"
                self._watch(route, query)
            else:
                self._verb = "list"
                self._list(route, query)
        elif self.command == "POST":
            self._verb = "create"
            created = store.create(route.resource, to_storage(route.resource, self._json_body(), route.version),
                                   route.namespace, dry_run=dry_run_requested(query),
                                   field_validation=query_value(query, "fieldValidation"),
                                   field_manager=self._field_manager(query))
            self._send_json(201, self._served(route, created))
        elif self.command == "DELETE":
            self._verb = "deletecollection"
            options = self._json_body()
            grace_period_seconds = self._grace(query, options)
            dry_run = dry_run_requested(query, options)
            items, _ = store.list(route.resource, route.namespace, query_value(query, "labelSelector"),
                                  query_value(query, "fieldSelector"))
            deleted = []
            for item in items:
                metadata = item["metadata"]
                deleted.append(store.delete(route.resource, metadata["name"], metadata.get("namespace"),
                                            grace_period_seconds=grace_period_seconds, dry_run=dry_run))
            self._send_json(200, {"kind": route.info["listKind"], "apiVersion": route.info["apiVersion"],
                                  "metadata": {"resourceVersion": store.resource_version},
                                  "items": [self._served(route, item) for item in deleted]})
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _list(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        raw_items, list_rv, token, remaining = store.list_raw(
            route.resource, route.namespace, query_value(query, "labelSelector"), query_value(query, "fieldSelector"),
            limit=int_param(query, "limit"), continue_token=query_value(query, "continue"))
        if self._wants_table():
            table = table_for(route.resource, [json.loads(raw) for raw in raw_items],
                              include_object=query_value(query, "includeObject", "PartialObjectMetadata"))
            table["metadata"] = _list_metadata(list_rv, token, remaining)
            self._send_json(200, table)
            return
        if route.version != RESOURCES[route.resource]["version"]:
            raw_items = [json.dumps(self._served(route, json.loads(raw)), separators=(",", ":")).encode()
                         for raw in raw_items]
        metadata = json.dumps(_list_metadata(list_rv, token, remaining), separators=(",", ":")).encode()
        body = b"".join([b'{"kind":', json.dumps(route.info["listKind"]).encode(), b',"apiVersion":',
                         json.dumps(route.info["apiVersion"]).encode(), b',"metadata":', metadata,
                         b',"items":[', b",".join(raw_items), b"]}"])
        self._send_bytes(200, body)

    # -------------------------------------------------------- watch

    def _watch(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        name = route.name
        field_selector = query_value(query, "fieldSelector")
        if name:
            field_selector = ",".join(filter(None, [field_selector, "metadata.name=" + name]))
        resource_version = query_value(query, "resourceVersion")
        send_initial = is_true(query_value(query, "sendInitialEvents"))
        timeout_s = int_param(query, "timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S
        if getattr(self, "_close_watch_after_s", None) is not None:
            timeout_s = min(timeout_s, self._close_watch_after_s)     # an injected early end (faults.py)
        bookmarks = is_true(query_value(query, "allowWatchBookmarks"))
        as_table = self._wants_table()
        self._include_object = query_value(query, "includeObject", "PartialObjectMetadata")
        try:
            watch = store.watch(route.resource, route.namespace, None if send_initial else resource_version,
                                query_value(query, "labelSelector"), field_selector)
        except ApiError as error:
            if error.code != 410:
                raise
            self._start_stream()
            self._write_event_bytes(b'{"type":"ERROR","object":' + json.dumps(error.to_status()).encode() + b"}")
            self._end_stream()
            return
        self._start_stream()
        try:
            self._pump_watch(route, watch, timeout_s, bookmarks, as_table, send_initial)
        finally:
            watch.close()

    def _pump_watch(self, route: Route, watch, timeout_s: int, bookmarks: bool, as_table: bool,
                    send_initial: bool) -> None:
        deadline = time.monotonic() + timeout_s
        initial_pending = send_initial
        last_bookmark = time.monotonic()
        while not self.api.stopping and time.monotonic() < deadline:
            event = watch.next_raw(timeout=min(0.25, max(0.01, deadline - time.monotonic())))
            if event is None:
                if self._client_gone():
                    return
                if initial_pending or (bookmarks and time.monotonic() - last_bookmark >= self.api.bookmark_interval_s):
                    bookmark = watch.bookmark()
                    if bookmark is not None:
                        if initial_pending:
                            bookmark[1]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                            initial_pending = False
                        self._write_event_bytes(json.dumps({"type": "BOOKMARK",
                                                            "object": self._served(route, bookmark[1])}).encode())
                        last_bookmark = time.monotonic()
                continue
            event_type, raw = event
            if as_table:
                row_table = table_for(route.resource, [json.loads(raw)], include_object=self._include_object)
                payload = json.dumps(row_table, separators=(",", ":")).encode()
            elif route.version != RESOURCES[route.resource]["version"]:
                payload = json.dumps(self._served(route, json.loads(raw)), separators=(",", ":")).encode()
            else:
                payload = raw
            self._write_event_bytes(b'{"type":"' + event_type.encode() + b'","object":' + payload + b"}")
        self._end_stream()

    def _client_gone(self) -> bool:
        """A watching client sends nothing, so a readable socket means it closed (FIN or TLS close_notify);
        without this check an idle watch would keep queueing events for a client that has left."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        self._code = 200

    def _write_event_bytes(self, line: bytes) -> None:
        self._write_chunk(line + b"\n")

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -------------------------------------------------------- single objects

    def _item(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        dry_run = dry_run_requested(query)
        if self.command in ("GET", "HEAD"):
            if route.watch_path or is_true(query_value(query, "watch")):
                self._verb = "watch"
                self._watch(route, query)
                return
            self._verb = "get"
            obj = store.get(route.resource, route.name, route.namespace)
            if self._wants_table():
                include_object = query_value(query, "includeObject", "PartialObjectMetadata")
                self._send_json(200, table_for(route.resource, [obj], include_object))
            else:
                self._send_json(200, self._served(route, obj))
        elif self.command == "PUT":
            self._verb = "update"
            body = to_storage(route.resource, self._json_body(), route.version)
            if (body.get("metadata") or {}).get("name") not in (None, route.name):
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL"
                               " (%s)" % (body["metadata"]["name"], route.name))
            body.setdefault("metadata", {})["name"] = route.name
            self._send_json(200, self._served(route, store.update(
                route.resource, body, route.namespace, route.subresource, dry_run=dry_run,
                field_validation=query_value(query, "fieldValidation"), field_manager=self._field_manager(query))))
        elif self.command == "PATCH":
            self._verb = "patch"
            content_type = self._content_type()
            check_patch_type(content_type)
            created_before = content_type == APPLY_PATCH and self._exists(route)
            result = store.patch(route.resource, route.name, self._read_body(), content_type, route.namespace,
                                 route.subresource, dry_run=dry_run, force=is_true(query_value(query, "force")),
                                 field_validation=query_value(query, "fieldValidation"),
                                 field_manager=self._field_manager(query))
            self._send_json(201 if content_type == APPLY_PATCH and not created_before else 200,
                            self._served(route, result))
        elif self.command == "DELETE":
            self._verb = "delete"
            options = self._json_body()
            propagation = query_value(query, "propagationPolicy") or options.get("propagationPolicy")
            deleted = store.delete(route.resource, route.name, route.namespace,
                                   grace_period_seconds=self._grace(query, options),
                                   preconditions=options.get("preconditions"), propagation_policy=propagation,
                                   dry_run=dry_run_requested(query, options))
            self._send_json(202 if deleted["metadata"].get("deletionTimestamp") else 200, self._served(route, deleted))
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _field_manager(self, query: Dict[str, List[str]]) -> str:
        """Who the write's managedFields entry names (managedfields.py)."""
        return manager_for(query_value(query, "fieldManager"), self.headers.get("User-Agent"))

    @staticmethod
    def _served(route: Route, obj: dict) -> dict:
        """A stored object in the version the request speaks (see versions.py)."""
        return to_served(route.resource, obj, route.version)

    def _exists(self, route: Route) -> bool:
        try:
            self.api.store.get(route.resource, route.name, route.namespace)
            return True
        except ApiError:
            return False

    @staticmethod
    def _grace(query: Dict[str, List[str]], options: dict) -> Optional[int]:
        grace = int_param(query, "gracePeriodSeconds")
        if grace is None:
            grace = options.get("gracePeriodSeconds")
        return grace

    # -------------------------------------------------------- subresources

    def _pod_action(self, route: Route, query: Dict[str, List[str]]) -> None:
        if self.command != "POST" or route.resource != "pods":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        body = self._json_body()
        store = self.api.store
        if route.subresource == "eviction":
            result = store.evict(route.namespace, route.name, body, dry_run=dry_run_requested(query))
        else:
            node_name = (body.get("target") or {}).get("name")
            if not node_name:
                raise ApiError(422, "Invalid", "Binding.target.name: Required value")
            store.bind(route.namespace, route.name, node_name)
            result = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        self._send_json(201, result)

    def _pod_log(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        pod = store.get("pods", route.name, route.namespace)
        containers = [container["name"] for container in (pod.get("spec") or {}).get("containers") or []]
        container = query_value(query, "container")
        if container and container not in containers:
            raise ApiError(400, "BadRequest", "container %s is not valid for pod %s" % (container, route.name))
        if not container and len(containers) > 1:
            raise ApiError(400, "BadRequest", "a container name must be specified for pod %s, choose one of: [%s]"
                           % (route.name, " ".join(containers)))
        container = container or (containers[0] if containers else None)
        params = {key: values[0] for key, values in query.items()}
        text = self._log_text(route, container, params)
        tail = int_param(query, "tailLines")
        if tail is not None and text:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail > 0 else ""
        if not is_true(query_value(query, "follow")):
            self._send_bytes(200, text.encode(), "text/plain")
            return
        self._follow_log(route, container, params, text)

    def _log_text(self, route: Route, container: Optional[str], params: Dict[str, str]) -> str:
        provider = self.api.store.pod_log_provider
        return provider(route.namespace, route.name, container, params) if provider else ""

    def _follow_log(self, route: Route, container: Optional[str], params: Dict[str, str], first: str) -> None:
        """``logs -f``: stream what the provider adds until the pod ends or goes, or the client leaves."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._code = 200
        if first:
            self._write_chunk(first.encode())
        sent = self._log_text(route, container, params)
        while not self.api.stopping and not self._client_gone():
            time.sleep(0.25)
            try:
                pod = self.api.store.get("pods", route.name, route.namespace)
            except ApiError:
                break
            text = self._log_text(route, container, params)
            if text.startswith(sent) and len(text) > len(sent):
                self._write_chunk(text[len(sent):].encode())
            elif not text.startswith(sent):
                self._write_chunk(text.encode())   # the container restarted: a new log
            sent = text
            if pod_is_terminal(pod):
                break
        self._end_stream()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _scale(self, route: Route, query: Dict[str, List[str]]) -> None:
        store = self.api.store
        if self.command == "GET":
            self._verb = "get"
            scaled = store.get(route.resource, route.name, route.namespace)
        elif self.command in ("PUT", "PATCH"):
            self._verb = "update" if self.command == "PUT" else "patch"
            current = _scale_of(store.get(route.resource, route.name, route.namespace))
            if self.command == "PUT":
                wanted = self._json_body()
            else:
                content_type = self._content_type()
                check_patch_type(content_type)
                wanted = apply_patch_document(current, decode_patch(self._read_body(), content_type), content_type)
            replicas = (wanted.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise ApiError(422, "Invalid", "Scale.spec.replicas: Invalid value: %r" % (replicas,))
            scaled = store.patch(route.resource, route.name, {"spec": {"replicas": replicas}}, MERGE_PATCH,
                                 route.namespace, dry_run=dry_run_requested(query))
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        self._send_json(200, _scale_of(scaled))


_SCALE_METADATA_KEYS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def _scale_of(obj: dict) -> dict:
    metadata = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    selector_text = ",".join("%s=%s" % item for item in sorted((selector.get("matchLabels") or {}).items()))
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {key: metadata[key] for key in _SCALE_METADATA_KEYS if key in metadata},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": selector_text}}


def _list_metadata(list_rv: str, token: Optional[str], remaining: Optional[int]) -> dict:
    metadata = {"resourceVersion": list_rv}
    if token:
        metadata["continue"] = token
        metadata["remainingItemCount"] = remaining
    return metadata


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler, context: ssl.SSLContext):
        self._context = context
        super().__init__(address, handler)

    def get_request(self):
        sock, address = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(DEFAULT_WATCH_TIMEOUT_S + 60)
        # the handshake runs in the request thread, so a slow client cannot stall accept()
        return self._context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request, client_address):
        pass   # a client that goes away mid-request is not an error of the server


class ApiServer:
    """The twin's kube-apiserver: HTTPS on ``host:port`` (0 = any free port), CA and certificate in
    ``ca_dir``, one bearer token (generated when None)."""

    def __init__(self, store: Store, host: str = "127.0.0.1", port: int = 0, ca_dir: str = ".",
                 token: Optional[str] = None, bookmark_interval_s: float = 30.0, faults_path: Optional[str] = None):
        self.store = store
        self.faults = ApiFaults(faults_path) if faults_path else None
        self.host = host
        self.port = port
        self.ca_dir = ca_dir
        self.token = token or tls.new_token()
        self.access = Access(store, self.token, ca_dir)
        self.bookmark_interval_s = bookmark_interval_s
        self.stopping = False
        self._server: Optional[_TLSServer] = None
        self._thread: Optional[threading.Thread] = None
        self._listener_lock = threading.Lock()
        self._listener_down = False
        self.ca_pem = ""

    @property
    def url(self) -> str:
        return "https://%s:%d" % (self.host, self.port)

    def start(self) -> "ApiServer":
        try:
            ipaddress.ip_address(self.host)
            ips, names = (self.host, "127.0.0.1"), ("localhost",)
        except ValueError:
            ips, names = ("127.0.0.1",), (self.host, "localhost")
        cert_path, key_path = tls.issue_server_certificate(self.ca_dir, ip_addresses=tuple(dict.fromkeys(ips)),
                                                           dns_names=tuple(dict.fromkeys(names)))
        self.ca_pem = tls.read_pem(tls.ensure_ca(self.ca_dir)[0])
        self._context = tls.server_ssl_context(cert_path, key_path, client_ca_path=tls.ensure_ca(self.ca_dir)[0])
        self._listen()
        return self

    def _listen(self) -> None:
        handler = type("ApiHandler", (_Handler,), {"api": self})
        self._server = _TLSServer((self.host, self.port), handler, self._context)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="gpulab-kube-apiserver", daemon=True)
        self._thread.start()

    def close_listener_for(self, seconds: float) -> None:
        """A restart as clients see it (faults.py ``refuse``): the listener closed, new connections refused, for
        ``seconds``; then a new one on the same port. The store is kept; a second call meanwhile does nothing."""
        with self._listener_lock:
            if self._server is None or self._listener_down:
                return
            self._listener_down = True
            server, self._server, self._thread = self._server, None, None
        server.shutdown()
        server.server_close()

        def reopen():
            time.sleep(seconds)
            with self._listener_lock:
                if not self.stopping:
                    self._listen()
                self._listener_down = False
        threading.Thread(target=reopen, name="gpulab-kube-apiserver-restart", daemon=True).start()

    def stop(self) -> None:
        with self._listener_lock:       # a listener closed for a while (close_listener_for) is not opened again
            self.stopping = True
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
