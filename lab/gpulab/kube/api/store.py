"""The in-process object store of the Kubernetes API twin (what etcd + the generic registry are to
kube-apiserver).

Objects are plain dicts in their JSON form. The store owns metadata (uid, resourceVersion,
creationTimestamp, generation), optimistic concurrency (409 on a stale resourceVersion), status
subresources, graceful pod deletion, owner-reference garbage collection, PodDisruptionBudget status and
the eviction subresource, and watches with a bounded per-resource event window (410 Gone beyond it).

Thread model: one RLock guards all state. Subscribers (controllers) are called synchronously in the
thread that made the change, after the lock is released, in commit order for that thread.
"""
from __future__ import annotations

import contextlib
import copy
import sys
import threading
import traceback
import uuid
from collections import defaultdict, deque
from typing import Callable, Dict, List, Optional, Tuple

from . import eviction as pdb_math
from . import managedfields
from . import admission_policy
from .admission import admit_service_account
from .defaults import apply_defaults
from .concurrency import check_preconditions, check_resource_version
from .crd import CRD_RESOURCE, admit_custom_object, prepare_crd, resource_info
from .errors import ApiError, conflict, not_found
from .names import assign_name
from .omitempty import prune
from .paging import decode_continue, encode_continue
from .patch import APPLY_PATCH, STRATEGIC_MERGE_PATCH, apply_patch_document, check_patch_type, decode_patch
from .resources import DEFAULT_NAMESPACES, RESOURCES, qualified, register_custom
from .selectors import SelectorError, field_selector_name, parse_field_selector, parse_label_selector
from .timefmt import now_rfc3339
from .watch import Entry, Event, Watch

# Kinds whose metadata.generation counts spec changes.
_GENERATION_RESOURCES = {"pods", "deployments", "replicasets", "daemonsets", "statefulsets", "jobs",
                         "poddisruptionbudgets", "resourceslices", "resourceclaims", "deviceclasses"}
# Changes to these may change a PodDisruptionBudget's status.
_PDB_INPUT_RESOURCES = {"pods", "poddisruptionbudgets", "replicasets", "deployments", "statefulsets"}
# As in the API server, status given at create is dropped for these (their controllers own it). Pods and
# nodes keep it: kubelets and tests may create them with a status.
_STATUS_CLEARED_ON_CREATE = {"deployments", "replicasets", "daemonsets", "statefulsets", "jobs",
                             "poddisruptionbudgets"}
# Owner-reference garbage collection only looks here for dependents (daemonsets: the GPU Operator's operand
# DaemonSets are owned by its ClusterPolicy and go with it).
_DEPENDENT_RESOURCES = ("replicasets", "pods", "controllerrevisions", "jobs", "daemonsets")
FOREGROUND_FINALIZER = "foregroundDeletion"

class Store:
    """Thread-safe object store with the semantics of the Kubernetes generic registry."""

    def __init__(self, recorder=None, event_window: int = 5000):
        self.recorder = recorder
        self.event_window = event_window
        self.pod_log_provider: Optional[Callable[[str, str, Optional[str], dict], str]] = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self._rv = 0
        # per resource key; custom resources come and go with their CRDs
        self._objects: Dict[str, Dict[Tuple[str, str], Entry]] = defaultdict(dict)
        self._events: Dict[str, deque] = defaultdict(deque)
        self._compacted_rv: Dict[str, int] = defaultdict(int)
        self._watches: Dict[str, List[Watch]] = defaultdict(list)
        self._custom: Dict[str, dict] = {}   # resource key -> API description, for this store's CRDs
        self._subscribers: List[Callable[[str, str, dict], None]] = []
        for name in DEFAULT_NAMESPACES:
            self.create("namespaces", {"metadata": {"name": name}})

    # ------------------------------------------------------------ plumbing

    @contextlib.contextmanager
    def _mutating(self):
        """Hold the lock; when the outermost mutation of this thread ends, tell the subscribers."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.pending = []
        self._local.depth = depth + 1
        try:
            with self._lock:
                yield
        finally:
            self._local.depth = depth
            if depth == 0:
                pending, self._local.pending = self._local.pending, []
                self._notify(pending)

    def _notify(self, pending: List[Tuple[str, str, Entry]]) -> None:
        """A failing subscriber must not fail the API call that made the change: its error goes to stderr."""
        subscribers = list(self._subscribers)
        for event_type, resource, entry in pending:
            for callback in subscribers:
                try:
                    callback(event_type, resource, entry.copy())
                except Exception:
                    traceback.print_exc(file=sys.stderr)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def _info(self, resource: str) -> dict:
        info = RESOURCES.get(resource)
        if info is None or (info.get("custom") and resource not in self._custom):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self._custom.get(resource, info)

    def served_resources(self) -> Dict[str, dict]:
        """What this store serves: the built-in resources and those of its CustomResourceDefinitions."""
        with self._lock:
            served = {key: info for key, info in RESOURCES.items() if not info.get("custom")}
            served.update(self._custom)
            return served

    def _key(self, resource: str, name: str, namespace: Optional[str]) -> Tuple[str, str]:
        return (namespace or "") if RESOURCES[resource]["namespaced"] else "", name

    def _entry(self, resource: str, name: str, namespace: Optional[str]) -> Entry:
        entry = self._objects[resource].get(self._key(resource, name, namespace))
        if entry is None:
            raise not_found(resource, name)
        return entry

    def _commit(self, resource: str, event_type: str, obj: dict, old: Optional[Entry],
                update_pdbs: bool = True) -> Entry:
        if event_type != "DELETED":
            prune(resource, obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        entry = Entry(obj)
        key = self._key(resource, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        if event_type == "DELETED":
            self._objects[resource].pop(key, None)
        else:
            self._objects[resource][key] = entry
        event = Event(entry.rv, event_type, entry, old)
        events = self._events[resource]
        events.append(event)
        while len(events) > self.event_window:
            self._compacted_rv[resource] = events.popleft().rv
        for watch in self._watches[resource]:
            watch._offer(event)
        if self.recorder is not None:
            self.recorder.record_change(event_type, resource, entry.obj)
        self._local.pending.append((event_type, resource, entry))
        if update_pdbs and resource in _PDB_INPUT_RESOURCES:
            self._refresh_pdb_status(obj["metadata"].get("namespace") or "")
        if resource == CRD_RESOURCE:
            self._serve_custom_resource(entry.obj, event_type)
        return entry

    def _serve_custom_resource(self, crd: dict, event_type: str) -> None:
        """A CRD written: serve its resource (at once, as the twin's CRDs are established at once); deleted:
        its objects go with it."""
        key = crd["metadata"]["name"]
        if event_type != "DELETED":
            info = resource_info(crd)
            register_custom(key, info)
            self._custom[key] = info
            return
        for entry in list(self._objects[key].values()):
            self._commit(key, "DELETED", copy.deepcopy(entry.obj), entry)
        self._custom.pop(key, None)

    # ------------------------------------------------------------ create

    def create(self, resource: str, obj: dict, namespace: Optional[str] = None, dry_run: bool = False,
               field_validation: Optional[str] = None, field_manager: Optional[str] = None,
               _applied: bool = False) -> dict:
        """``field_manager``: who writes (the API server passes it; the twin's own controllers write
        untracked): its managedFields entry is recorded (see managedfields.py)."""
        info = self._info(resource)
        obj = copy.deepcopy(obj)
        applied = copy.deepcopy(obj) if _applied else None
        metadata = obj.setdefault("metadata", {})
        with self._mutating():
            namespace = self._resolve_namespace(resource, metadata, namespace)
            if resource == "pods":
                admit_service_account(obj, namespace, self._service_account_exists)
            assign_name(resource, metadata)
            if self._key(resource, metadata["name"], namespace) in self._objects[resource]:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(resource), metadata["name"]),
                               {"name": metadata["name"], "group": info["group"], "kind": info["plural"]})
            obj = _with_type_first(info, obj)
            metadata = obj["metadata"]
            for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                metadata.pop(field, None)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = now_rfc3339()
            custom = bool(info.get("custom"))
            if resource in _GENERATION_RESOURCES or custom:
                metadata["generation"] = 1
            if resource in _STATUS_CLEARED_ON_CREATE or (custom and "status" in info["subresources"]):
                obj.pop("status", None)
            apply_defaults(resource, obj)
            self._admit_write(resource, info, obj, field_validation)
            self._admit_policies(resource, info, "CREATE", obj, None, namespace, None, dry_run)
            if field_manager is not None:
                entries = managedfields.base_entries(None, metadata.pop("managedFields", None))
                entries = managedfields.record_write(
                    entries, field_manager, "Apply" if _applied else "Update", info["apiVersion"], now_rfc3339(),
                    None, obj, applied=applied, status_is_subresource="status" in info["subresources"])
                if entries:
                    metadata["managedFields"] = entries
            if dry_run:
                obj["metadata"]["resourceVersion"] = ""
                return prune(resource, obj)
            created = self._commit(resource, "ADDED", obj, None).copy()
            if resource == "namespaces":
                self._ensure_default_service_account(metadata["name"])
            return created

    def _service_account_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._objects["serviceaccounts"]

    def _ensure_default_service_account(self, namespace: str) -> None:
        """What kube-controller-manager's serviceaccount controller does: every namespace has ``default``."""
        if ("", namespace) in self._objects["namespaces"] and not self._service_account_exists(namespace, "default"):
            self.create("serviceaccounts", {"metadata": {"name": "default", "namespace": namespace}}, namespace)

    def _resolve_namespace(self, resource: str, metadata: dict, namespace: Optional[str]) -> Optional[str]:
        if not RESOURCES[resource]["namespaced"]:
            metadata.pop("namespace", None)
            return None
        namespace = namespace or metadata.get("namespace") or "default"
        if metadata.get("namespace") and metadata["namespace"] != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace"
                           " sent on the request")
        if ("", namespace) not in self._objects["namespaces"]:
            raise not_found("namespaces", namespace)
        metadata["namespace"] = namespace
        return namespace

    # ------------------------------------------------------------ read

    def get(self, resource: str, name: str, namespace: Optional[str] = None) -> dict:
        self._info(resource)
        with self._lock:
            return self._entry(resource, name, namespace).copy()

    def _select(self, resource: str, namespace: Optional[str], label_selector: Optional[str],
                field_selector: Optional[str]) -> List[Tuple[Tuple[str, str], Entry]]:
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as error:
            raise ApiError(400, "BadRequest", str(error))
        objects = self._objects[resource]
        name = field_selector_name(field_selector)
        if name is not None and RESOURCES[resource]["namespaced"] and namespace:
            keys = [(namespace, name)] if (namespace, name) in objects else []
        elif name is not None and not RESOURCES[resource]["namespaced"]:
            keys = [("", name)] if ("", name) in objects else []
        else:
            keys = sorted(objects)
        selected = []
        for key in keys:
            if namespace and RESOURCES[resource]["namespaced"] and key[0] != namespace:
                continue
            entry = objects[key]
            if labels.matches(entry.obj["metadata"].get("labels")) and fields(entry.obj):
                selected.append((key, entry))
        return selected

    def list(self, resource: str, namespace: Optional[str] = None, label_selector: Optional[str] = None,
             field_selector: Optional[str] = None) -> Tuple[list, str]:
        """All matching objects (copies) and the list resourceVersion."""
        self._info(resource)
        with self._lock:
            selected = self._select(resource, namespace, label_selector, field_selector)
            return [entry.copy() for _, entry in selected], str(self._rv)

    def list_raw(self, resource: str, namespace: Optional[str] = None, label_selector: Optional[str] = None,
                 field_selector: Optional[str] = None, limit: Optional[int] = None,
                 continue_token: Optional[str] = None) -> Tuple[List[bytes], str, Optional[str], Optional[int]]:
        """One page for the server: (JSON of each item, list rv, continue token or None, remaining count)."""
        self._info(resource)
        with self._lock:
            selected = self._select(resource, namespace, label_selector, field_selector)
            list_rv = str(self._rv)
            if continue_token:
                start, list_rv = decode_continue(continue_token)
                selected = [(key, entry) for key, entry in selected if list(key) > start]
            if limit and len(selected) > limit:
                page = selected[:limit]
                token = encode_continue(list(page[-1][0]), list_rv)
                return [entry.raw for _, entry in page], list_rv, token, len(selected) - limit
            return [entry.raw for _, entry in selected], list_rv, None, None

    # ------------------------------------------------------------ update and patch

    def update(self, resource: str, obj: dict, namespace: Optional[str] = None,
               subresource: Optional[str] = None, dry_run: bool = False,
               field_validation: Optional[str] = None, field_manager: Optional[str] = None) -> dict:
        info = self._info(resource)
        obj = copy.deepcopy(obj)
        metadata = obj.get("metadata") or {}
        name = metadata.get("name", "")
        with self._mutating():
            if info["namespaced"] and namespace and metadata.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the"
                               " namespace sent on the request")
            namespace = namespace or metadata.get("namespace")
            current = self._entry(resource, name, namespace)
            check_resource_version(resource, name, current.obj, metadata.get("resourceVersion"))
            if subresource not in (None, "status"):
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested"
                                                        " resource")
            new = self._merged_update(resource, info, current.obj, obj, subresource, field_validation)
            self._admit_policies(resource, info, "UPDATE", new, current.obj, namespace, subresource, dry_run)
            self._track_fields(info, current.obj, new, metadata.get("managedFields"), field_manager, subresource)
            return self._store_update(resource, current, new, dry_run)

    @staticmethod
    def _track_fields(info: dict, current: dict, new: dict, sent_entries, field_manager: Optional[str],
                      subresource: Optional[str], applied: Optional[dict] = None) -> None:
        """``new``'s managedFields: the stored ones for an untracked write (no ``field_manager``), else the
        write recorded (managedfields.py); a change of timestamps only keeps the stored entries (a no-op)."""
        stored = current["metadata"].get("managedFields")
        entries = copy.deepcopy(stored) if stored else []
        if field_manager is not None:
            base = managedfields.base_entries(stored, sent_entries if subresource != "status" else None)
            entries = managedfields.record_write(
                base, field_manager, "Apply" if applied is not None else "Update", info["apiVersion"],
                now_rfc3339(), current, new, applied=applied, subresource=subresource or "",
                status_is_subresource="status" in info["subresources"])
            if stored and managedfields.without_times(entries) == managedfields.without_times(stored):
                entries = copy.deepcopy(stored)
        if entries:
            new["metadata"]["managedFields"] = entries
        else:
            new["metadata"].pop("managedFields", None)

    def _merged_update(self, resource: str, info: dict, current: dict, obj: dict,
                       subresource: Optional[str], field_validation: Optional[str] = None) -> dict:
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            self._admit_write(resource, info, new, field_validation)
            return new
        new = _with_type_first(info, obj)
        metadata = new.setdefault("metadata", {})
        for field in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation"):
            if field in current["metadata"]:
                metadata[field] = current["metadata"][field]
            else:
                metadata.pop(field, None)
        if "status" in info["subresources"]:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        apply_defaults(resource, new, current)
        self._admit_write(resource, info, new, field_validation)
        if (resource in _GENERATION_RESOURCES or info.get("custom")) and _spec_of(new) != _spec_of(current):
            metadata["generation"] = current["metadata"].get("generation", 1) + 1
        return new

    @staticmethod
    def _admit_write(resource: str, info: dict, obj: dict, field_validation: Optional[str] = None) -> None:
        """What the API server does to a written CRD or custom object after defaulting (422 when invalid)."""
        if resource == CRD_RESOURCE:
            prepare_crd(obj)
        elif resource == admission_policy.POLICIES:
            admission_policy.check_policy(obj)
        elif info.get("custom"):
            admit_custom_object(info, obj, field_validation)

    def _admit_policies(self, resource: str, info: dict, operation: str, obj: dict, old: Optional[dict],
                        namespace: Optional[str], subresource: Optional[str], dry_run: bool) -> None:
        """The ValidatingAdmissionPolicies bound to this write (admission_policy.py); nothing when none is."""
        bindings = self._objects[admission_policy.BINDINGS]
        if not bindings:
            return
        policies = {key[1]: entry.obj for key, entry in self._objects[admission_policy.POLICIES].items()}
        attributes = {"key": resource, "group": info["group"], "version": info["version"],
                      "resource": info["plural"], "subresource": subresource, "operation": operation,
                      "namespace": namespace if info["namespaced"] else None,
                      "name": obj["metadata"].get("name"), "object": obj, "oldObject": old, "dryRun": dry_run}
        admission_policy.admit(attributes, policies, [entry.obj for entry in bindings.values()],
                               lambda name: self._stored_object("namespaces", "", name))

    def _store_update(self, resource: str, current: Entry, new: dict, dry_run: bool) -> dict:
        new["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
        prune(resource, new)
        if new == current.obj:
            return current.copy()   # a no-op update keeps the resourceVersion, as in the API server
        if dry_run:
            return new
        metadata = new["metadata"]
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers") and \
                (resource != "pods" or metadata.get("deletionGracePeriodSeconds") == 0):
            return self._commit(resource, "DELETED", new, current).copy()
        return self._commit(resource, "MODIFIED", new, current).copy()

    def patch(self, resource: str, name: str, patch, patch_type: str, namespace: Optional[str] = None,
              subresource: Optional[str] = None, dry_run: bool = False, force: bool = False,
              field_validation: Optional[str] = None, field_manager: Optional[str] = None) -> dict:
        """Patch with one of PATCH_TYPES; ``patch`` is a dict/list or its JSON (YAML for apply) text."""
        info = self._info(resource)
        check_patch_type(patch_type)
        if info.get("custom") and patch_type == STRATEGIC_MERGE_PATCH:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted"
                           " media types include: application/json-patch+json, application/merge-patch+json,"
                           " application/apply-patch+yaml")
        document = decode_patch(patch, patch_type)
        with self._mutating():
            key = self._key(resource, name, namespace)
            if patch_type == APPLY_PATCH and key not in self._objects[resource]:
                return self.create(resource, document, namespace, dry_run=dry_run, field_validation=field_validation,
                                   field_manager=field_manager, _applied=field_manager is not None)
            current = self._entry(resource, name, namespace)
            patched = apply_patch_document(current.obj, document, patch_type)
            patched_name = (patched.get("metadata") or {}).get("name") if isinstance(patched, dict) else None
            if patched_name != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)"
                               % (patched_name, name))
            check_resource_version(resource, name, current.obj, patched["metadata"].get("resourceVersion"))
            new = self._merged_update(resource, info, current.obj, patched, subresource, field_validation)
            if patch_type == APPLY_PATCH and field_manager is not None and not force:
                conflicts = managedfields.apply_conflicts(
                    current.obj["metadata"].get("managedFields"), field_manager, current.obj, new, document,
                    subresource or "", "status" in info["subresources"])
                if conflicts:
                    raise managedfields.conflict_error(conflicts)
            self._admit_policies(resource, info, "UPDATE", new, current.obj, namespace, subresource, dry_run)
            sent = patched["metadata"].get("managedFields")
            self._track_fields(info, current.obj, new, sent, field_manager, subresource,
                               applied=document if patch_type == APPLY_PATCH else None)
            return self._store_update(resource, current, new, dry_run)

    # ------------------------------------------------------------ delete

    def delete(self, resource: str, name: str, namespace: Optional[str] = None,
               grace_period_seconds: Optional[int] = None, preconditions: Optional[dict] = None,
               propagation_policy: Optional[str] = None, dry_run: bool = False) -> dict:
        """Delete; pods on a node are deleted gracefully (deletionTimestamp set, the kubelet finalizes with
        ``grace_period_seconds=0``). Returns the object as last stored."""
        self._info(resource)
        with self._mutating():
            current = self._entry(resource, name, namespace)
            check_preconditions(resource, name, current.obj, preconditions)
            if resource == "namespaces":
                return self._delete_namespace(current, dry_run)
            if propagation_policy == "Foreground" and resource != "pods" and \
                    not current.obj["metadata"].get("deletionTimestamp"):
                return self._delete_in_foreground(resource, current, dry_run)
            if resource == "pods":
                graceful = self._graceful_pod_delete(current, grace_period_seconds, dry_run)
                if graceful is not None:
                    return graceful
            elif current.obj["metadata"].get("finalizers"):
                return self._mark_deleting(resource, current, 0, dry_run)
            if dry_run:
                return current.copy()
            gone = self._commit(resource, "DELETED", copy.deepcopy(current.obj), current)
            if propagation_policy == "Orphan":
                self._orphan_dependents(current.obj)
            else:
                self._collect_dependents(current.obj)
            self._release_foreground_owners(current.obj)
            if resource == "serviceaccounts" and name == "default":
                self._ensure_default_service_account(namespace or "")
            return gone.copy()

    def finalize_pod_deletion(self, namespace: str, name: str) -> dict:
        """Remove a pod whose containers have stopped (what the kubelet does after the grace period)."""
        return self.delete("pods", name, namespace, grace_period_seconds=0)

    def _graceful_pod_delete(self, current: Entry, grace_period_seconds: Optional[int],
                             dry_run: bool) -> Optional[dict]:
        pod = current.obj
        if grace_period_seconds is None:
            grace_period_seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        unbound = not (pod.get("spec") or {}).get("nodeName")
        if grace_period_seconds <= 0 or unbound or pdb_math.pod_is_terminal(pod):
            if pod["metadata"].get("finalizers"):
                return self._mark_deleting("pods", current, 0, dry_run)
            return None
        existing_grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if existing_grace is not None and existing_grace <= grace_period_seconds:
            return current.copy()
        return self._mark_deleting("pods", current, grace_period_seconds, dry_run)

    def _mark_deleting(self, resource: str, current: Entry, grace_period_seconds: int, dry_run: bool) -> dict:
        new = copy.deepcopy(current.obj)
        new["metadata"]["deletionTimestamp"] = now_rfc3339(grace_period_seconds)
        new["metadata"]["deletionGracePeriodSeconds"] = grace_period_seconds
        if dry_run:
            return new
        return self._commit(resource, "MODIFIED", new, current).copy()

    def _delete_namespace(self, current: Entry, dry_run: bool) -> dict:
        name = current.obj["metadata"]["name"]
        if name in DEFAULT_NAMESPACES:
            raise ApiError(403, "Forbidden", 'namespaces "%s" is forbidden: this namespace may not be deleted' % name,
                           {"name": name, "kind": "namespaces"})
        if dry_run:
            return current.copy()
        for resource, objects in self._objects.items():
            if not RESOURCES[resource]["namespaced"]:
                continue
            for key in [key for key in objects if key[0] == name]:
                entry = objects[key]
                self._commit(resource, "DELETED", copy.deepcopy(entry.obj), entry, update_pdbs=False)
        return self._commit("namespaces", "DELETED", copy.deepcopy(current.obj), current).copy()

    def _dependents(self, owner: dict):
        """(resource, key, entry, ownerReferences) of each object in ``owner``'s namespace that names it as an
        owner (a snapshot: the callers delete or modify them)."""
        owner_uid = owner["metadata"]["uid"]
        namespace = owner["metadata"].get("namespace") or ""
        for resource in _DEPENDENT_RESOURCES:
            for key, entry in list(self._objects[resource].items()):
                if namespace and key[0] != namespace:
                    continue
                references = entry.obj["metadata"].get("ownerReferences") or []
                if any(reference.get("uid") == owner_uid for reference in references):
                    yield resource, key, entry, references

    def _collect_dependents(self, owner: dict) -> None:
        """Background cascading deletion: delete what names ``owner`` in its ownerReferences."""
        for resource, key, _entry, _references in self._dependents(owner):
            if key in self._objects[resource]:
                self.delete(resource, key[1], key[0] or None)

    def _orphan_dependents(self, owner: dict) -> None:
        """``propagationPolicy: Orphan``: the garbage collector removes ``owner`` from its dependents'
        ownerReferences, which stay (a Job's pods keep running)."""
        owner_uid = owner["metadata"]["uid"]
        for resource, _key, entry, references in self._dependents(owner):
            kept = [reference for reference in references if reference.get("uid") != owner_uid]
            new = copy.deepcopy(entry.obj)
            if kept:
                new["metadata"]["ownerReferences"] = kept
            else:
                new["metadata"].pop("ownerReferences", None)
            self._commit(resource, "MODIFIED", new, entry)

    def _delete_in_foreground(self, resource: str, current: Entry, dry_run: bool) -> dict:
        """``propagationPolicy: Foreground``: the owner stays, terminating with the ``foregroundDeletion``
        finalizer, while the garbage collector deletes its dependents (those that have dependents of their own in
        the foreground too); it goes when no dependent with ``blockOwnerDeletion`` is left."""
        new = copy.deepcopy(current.obj)
        metadata = new["metadata"]
        metadata["deletionTimestamp"] = now_rfc3339()
        metadata["deletionGracePeriodSeconds"] = 0
        metadata["finalizers"] = [f for f in metadata.get("finalizers") or [] if f != FOREGROUND_FINALIZER] + \
            [FOREGROUND_FINALIZER]
        if dry_run:
            return new
        marked = self._commit(resource, "MODIFIED", new, current).copy()
        for dependent_resource, key, _entry, _references in self._dependents(new):
            if key in self._objects[dependent_resource]:
                self.delete(dependent_resource, key[1], key[0] or None, propagation_policy="Foreground")
        return self._finish_foreground_deletion(resource, new) or marked

    def _finish_foreground_deletion(self, resource: str, owner: dict) -> Optional[dict]:
        """Remove the ``foregroundDeletion`` finalizer of a terminating ``owner`` whose blocking dependents are
        all gone (the owner goes with it when no other finalizer is left, and its other dependents are then
        collected in the background); None while some are left."""
        metadata = owner["metadata"]
        current = self._objects[resource].get(self._key(resource, metadata["name"], metadata.get("namespace")))
        if current is None or current.obj["metadata"].get("uid") != metadata.get("uid") or \
                FOREGROUND_FINALIZER not in (current.obj["metadata"].get("finalizers") or []):
            return None
        uid = metadata["uid"]
        if any(reference.get("uid") == uid and reference.get("blockOwnerDeletion")
               for _resource, _key, _entry, references in self._dependents(current.obj) for reference in references):
            return None
        new = copy.deepcopy(current.obj)
        finalizers = [f for f in new["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
            return self._commit(resource, "MODIFIED", new, current).copy()
        new["metadata"].pop("finalizers")
        gone = self._commit(resource, "DELETED", new, current).copy()
        self._collect_dependents(new)
        self._release_foreground_owners(new)
        return gone

    def _release_foreground_owners(self, dependent: dict) -> None:
        """A deleted ``dependent``: each owner of it deleting in the foreground may now go."""
        namespace = dependent["metadata"].get("namespace")
        for reference in dependent["metadata"].get("ownerReferences") or []:
            resource = _resource_of_kind(reference.get("apiVersion") or "", reference.get("kind") or "")
            if resource is None:
                continue
            entry = self._objects[resource].get(self._key(resource, reference.get("name") or "",
                                                          namespace if RESOURCES[resource]["namespaced"] else None))
            if entry is not None and entry.obj["metadata"].get("uid") == reference.get("uid"):
                self._finish_foreground_deletion(resource, entry.obj)

    # ------------------------------------------------------------ pods: binding and eviction

    def bind(self, namespace: str, pod_name: str, node_name: str) -> dict:
        """The ``pods/binding`` subresource: set spec.nodeName once."""
        with self._mutating():
            current = self._entry("pods", pod_name, namespace)
            if (current.obj.get("spec") or {}).get("nodeName"):
                raise conflict("pods", pod_name, "pod %s is already assigned to node %r"
                                % (pod_name, current.obj["spec"]["nodeName"]))
            new = copy.deepcopy(current.obj)
            new.setdefault("spec", {})["nodeName"] = node_name
            return self._commit("pods", "MODIFIED", new, current).copy()

    def evict(self, namespace: str, pod_name: str, eviction: dict, dry_run: bool = False) -> dict:
        """The ``pods/eviction`` subresource (policy/v1 Eviction): delete the pod unless a
        PodDisruptionBudget forbids it (ApiError 429 with the kube-apiserver message). ``deleteOptions.dryRun``
        (what ``kubectl drain --dry-run=server`` sends) counts as ``dry_run``."""
        eviction = eviction or {}
        evicted_name = (eviction.get("metadata") or {}).get("name")
        if evicted_name and evicted_name != pod_name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        with self._mutating():
            pod = self._entry("pods", pod_name, namespace).obj
            if not (pdb_math.pod_is_terminal(pod) or pod["metadata"].get("deletionTimestamp")):
                self._check_disruption_budget(namespace, pod)
            if not dry_run:
                self.delete("pods", pod_name, namespace, grace_period_seconds=options.get("gracePeriodSeconds"),
                            preconditions=options.get("preconditions"))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _check_disruption_budget(self, namespace: str, pod: dict) -> None:
        budgets = [entry.obj for key, entry in self._objects["poddisruptionbudgets"].items() if key[0] == namespace]
        budgets = [pdb for pdb in budgets if pdb_math.pods_selected_by(pdb, [pod])]
        if not budgets:
            return
        if len(budgets) > 1:
            raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction"
                           " subresource does not support.")
        refusal = pdb_math.eviction_refusal(budgets[0], pod)
        if refusal is not None:
            raise ApiError(429, "TooManyRequests", pdb_math.EVICTION_REFUSED_MESSAGE,
                           {"causes": [{"reason": "DisruptionBudget", "message": refusal}]})

    def _controller_scale(self, reference: dict, namespace: str) -> Optional[int]:
        return pdb_math.controller_scale(reference, namespace, self._stored_object)

    def _stored_object(self, resource: str, namespace: str, name: str) -> Optional[dict]:
        entry = self._objects[resource].get((namespace, name))
        return entry.obj if entry is not None else None

    def _refresh_pdb_status(self, namespace: str) -> None:
        budgets = [(key, entry) for key, entry in self._objects["poddisruptionbudgets"].items() if key[0] == namespace]
        if not budgets:
            return
        pods = [entry.obj for key, entry in self._objects["pods"].items() if key[0] == namespace]
        for _, entry in budgets:
            status = pdb_math.compute_pdb_status(entry.obj, pods, self._controller_scale, now_rfc3339())
            if status != entry.obj.get("status"):
                new = copy.deepcopy(entry.obj)
                new["status"] = status
                self._commit("poddisruptionbudgets", "MODIFIED", new, entry, update_pdbs=False)

    # ------------------------------------------------------------ watch and subscribe

    def watch(self, resource: str, namespace: Optional[str] = None, resource_version: Optional[str] = None,
              label_selector: Optional[str] = None, field_selector: Optional[str] = None) -> Watch:
        """Start a watch. No resourceVersion (or "0"): ADDED for every current object first. A resourceVersion:
        every change after it (ApiError 410 Expired when it is older than the retained event window)."""
        self._info(resource)
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as error:
            raise ApiError(400, "BadRequest", str(error))
        watch = Watch(self, resource, namespace if RESOURCES[resource]["namespaced"] else None, labels, fields)
        with self._lock:
            if resource_version in (None, "", "0"):
                for _, entry in sorted(self._objects[resource].items()):
                    watch._offer(Event(entry.rv, "ADDED", entry, None))
            else:
                self._replay(watch, resource, resource_version)
            self._watches[resource].append(watch)
        return watch

    def _replay(self, watch: Watch, resource: str, resource_version: str) -> None:
        try:
            since = int(resource_version)
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid resource version %r" % resource_version)
        if since < self._compacted_rv[resource]:
            raise ApiError(410, "Expired", "too old resource version: %d (%d)"
                           % (since, self._compacted_rv[resource] + 1))
        for event in self._events[resource]:
            if event.rv > since:
                watch._offer(event)

    def _bookmark_for(self, watch: Watch) -> Optional[Tuple[str, dict]]:
        with self._lock:
            if not watch._queue.empty():
                return None
            info = RESOURCES[watch.resource]
            return "BOOKMARK", {"kind": info["kind"], "apiVersion": info["apiVersion"],
                                "metadata": {"resourceVersion": str(self._rv)}}

    def _remove_watch(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._watches[watch.resource]:
                self._watches[watch.resource].remove(watch)

    def subscribe(self, callback: Callable[[str, str, dict], None]) -> None:
        """``callback(event_type, resource, obj)`` after each committed change (obj is a private copy)."""
        with self._lock:
            self._subscribers.append(callback)


# ---------------------------------------------------------------- helpers

def _with_type_first(info: dict, obj: dict) -> dict:
    typed = {"apiVersion": info["apiVersion"], "kind": info["kind"]}
    typed.update((key, value) for key, value in obj.items() if key not in ("apiVersion", "kind"))
    return typed


def _resource_of_kind(api_version: str, kind: str) -> Optional[str]:
    """The built-in resource of an ownerReference's apiVersion and kind (None for others)."""
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    for resource, info in RESOURCES.items():
        if info.get("kind") == kind and info.get("group") == group:
            return resource
    return None


def _spec_of(obj: dict) -> dict:
    return {key: value for key, value in obj.items() if key not in ("metadata", "status", "apiVersion", "kind")}
