"""`metadata.managedFields`: who set which field, as kube-apiserver's field manager records it (pure functions).

Kubernetes tracks managed fields for every object written through the API: one entry per manager, operation
(`Update` for create/update/patch, `Apply` for server-side apply) and subresource, with the `apiVersion` it
wrote, the `time` of its last change and `fieldsType: FieldsV1`, `fieldsV1` the set of fields it owns as a
trie (`f:<field>` for a struct or map key, `k:{"name":"c"}` for an item of a list keyed by a merge key,
`v:<json>` for a set list's value, `.` where the manager owns the node itself as well as fields below it).
The manager is the request's `fieldManager`, else its User-Agent up to the first `/` (`manager_for`).

What the twin does (enough for kubernetes.core's `hidden_fields` change detection and `kubectl`):
- create: the creator owns every field of the stored object (after defaulting); an apply that creates owns
  the fields it sent;
- update / patch: the fields whose value changed (or appeared) move to the writer's `Update` entry, fields that
  went are dropped from every entry, entries left owning nothing go;
- apply: the applier's `Apply` entry owns exactly the fields it sent (its leaves and list items, not the maps
  above them: `applied_paths`); fields it changed leave other managers;
- apply conflicts: an apply that sets a field another manager owns (any entry but the applier's own `Apply`
  one, its `Update` entry included) to a different value is refused with 409 `Conflict`, one
  `FieldManagerConflict` cause per field (`apply_conflicts`, `conflict_error`); with `force=true` it takes the
  field (it leaves the other entries); the same value is shared ownership, no conflict; updates and non-apply
  patches never conflict;
- a write that changes nothing but timestamps in managedFields is a no-op (no new resourceVersion), as in
  kube-apiserver since 1.26;
- a write that sends managedFields different from the stored ones replaces them (as upstream: the way clients
  such as kubectl's client-side-apply upgrade rewrite ownership); a write without them keeps the stored ones.
Not modelled: apply removing fields its manager stopped
sending, the cap of ten Update entries. Identity fields (`apiVersion`, `kind`, `metadata.name`, `namespace`,
`uid`, `resourceVersion`, `generation`, `creationTimestamp`, `managedFields`) are owned by no one, and `status`
belongs to the status subresource for kinds that have one.
"""
from __future__ import annotations

import copy
import json
from typing import Dict, Iterable, List, Optional, Set, Tuple

from .errors import ApiError
from .patch import MERGE_KEYS

FIELD_MANAGER_MAX_LENGTH = 128
_UNOWNED_METADATA = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                               "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})
# struct fields (not maps or pointers): their node is never owned itself, only the fields under it
_STRUCT_FIELDS = frozenset({"f:metadata", "f:spec", "f:status", "f:template", "f:strategy", "f:updateStrategy"})
_CONTAINER = object()      # the value recorded for a map or keyed-list node (its children carry the values)

Path = Tuple[str, ...]


def manager_for(field_manager: Optional[str], user_agent: Optional[str]) -> str:
    """The manager of a write: `fieldManager`, else the User-Agent before its first `/` (printable characters,
    at most 128 bytes), as kube-apiserver names it."""
    if field_manager:
        return field_manager
    prefix, out = (user_agent or "").split("/", 1)[0], ""
    for char in prefix:
        if not char.isprintable():
            continue
        if len((out + char).encode()) > FIELD_MANAGER_MAX_LENGTH:
            break
        out += char
    return out


# ---------------------------------------------------------------- field paths of an object

def field_values(obj: dict, status_is_subresource: bool = False, only_status: bool = False) -> Dict[Path, object]:
    """Every owned path of ``obj`` -> its value (`_CONTAINER` for a map or keyed list item)."""
    values: Dict[Path, object] = {}
    for field, value in (obj or {}).items():
        if field in ("apiVersion", "kind"):
            continue
        if (field == "status") != only_status and (only_status or status_is_subresource):
            continue
        if field == "metadata" and isinstance(value, dict):
            value = {key: item for key, item in value.items() if key not in _UNOWNED_METADATA}
            if not value:
                continue
        _walk(("f:" + field,), field, value, values)
    return values


def _walk(path: Path, field: str, value, values: Dict[Path, object]) -> None:
    if isinstance(value, dict) and value:
        values[path] = _CONTAINER
        for key, item in value.items():
            _walk(path + ("f:" + key,), key, item, values)
    elif isinstance(value, list) and value and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        if key is None or not all(isinstance(item, dict) for item in value):
            values[path] = _CONTAINER
            for item in value:
                values[path + ("v:" + _json(item),)] = item
            return
        if not all(key in item for item in value):
            values[path] = value           # an item without its key: the list is kept atomic
            return
        values[path] = _CONTAINER
        for item in value:
            item_path = path + ("k:" + _json({key: item[key]}),)
            values[item_path] = _CONTAINER
            for name, member in item.items():
                _walk(item_path + ("f:" + name,), name, member, values)
    else:
        values[path] = value


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# ---------------------------------------------------------------- FieldsV1 <-> path sets

def to_fields_v1(paths: Iterable[Path]) -> dict:
    """A path set as the FieldsV1 trie."""
    paths = set(paths)
    root: dict = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    return _with_owned_marks(root, (), paths)


def _with_owned_marks(node: dict, path: Path, paths: Set[Path]) -> dict:
    """``node`` with `.` (first, as the API server writes it) in each owned node that has children."""
    marked = {}
    for element in sorted(node):
        child, child_path = node[element], path + (element,)
        if child and child_path in paths and element not in _STRUCT_FIELDS:
            marked[element] = dict({".": {}}, **_with_owned_marks(child, child_path, paths))
        else:
            marked[element] = _with_owned_marks(child, child_path, paths)
    return marked


def from_fields_v1(trie: dict, path: Path = ()) -> Set[Path]:
    """The path set of a FieldsV1 trie (a node with children but no `.` is not owned itself)."""
    paths: Set[Path] = set()
    for element, child in (trie or {}).items():
        if element == ".":
            continue
        child_path = path + (element,)
        children = {key: value for key, value in (child or {}).items() if key != "."}
        if not children or "." in (child or {}):
            paths.add(child_path)
        paths |= from_fields_v1(children, child_path)
    return paths


# ---------------------------------------------------------------- the entries

def applied_paths(applied: dict, status_is_subresource: bool = False, only_status: bool = False) -> Set[Path]:
    """The fields an apply configuration sets, as the API server's field set of it: its leaves and the items of
    its lists, not the maps and structs above them (an Apply entry does not own a map itself)."""
    return {path for path, value in field_values(applied, status_is_subresource, only_status).items()
            if value is not _CONTAINER or path[-1].startswith(("k:", "v:"))}


def apply_conflicts(entries: List[dict], manager: str, old: dict, new: dict, applied: dict, subresource: str = "",
                    status_is_subresource: bool = False) -> List[Tuple[dict, Path]]:
    """(entry, path) for each field ``applied`` sets to a value other than ``old``'s (``new`` is the result)
    that an entry other than ``manager``'s own Apply entry owns: what makes a server-side apply a conflict."""
    only_status = subresource == "status"
    before = field_values(old, status_is_subresource, only_status)
    after = field_values(new, status_is_subresource, only_status)
    changed = {path for path in applied_paths(applied, status_is_subresource, only_status) & set(after)
               if path in before and ((after[path] is _CONTAINER) != (before[path] is _CONTAINER)
                                      or (after[path] is not _CONTAINER and after[path] != before[path]))}
    conflicts = []
    for entry in entries or []:
        if _entry_key(entry) == (manager, "Apply", subresource):
            continue
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        conflicts += [(entry, path) for path in sorted(changed & owned, key=path_string)]
    return conflicts


def path_string(path: Path) -> str:
    """A field path as the API server prints it in a conflict: `.spec.replicas`, `.spec.containers[name="c"]`,
    `.metadata.finalizers[="x"]`."""
    out = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            out += "[%s]" % ",".join("%s=%s" % (key, _json(value)) for key, value in sorted(json.loads(rest).items()))
        elif kind == "v":
            out += "[=%s]" % rest
        else:
            out += "[%s]" % rest
    return out


def _printed_manager(entry: dict) -> str:
    """How a conflict names a manager: `"m"` for an applier, `"m" using apps/v1` for an updater."""
    printed = json.dumps(entry.get("manager", ""))
    if entry.get("subresource"):
        printed += " with subresource %s" % json.dumps(entry["subresource"])
    if entry.get("operation") == "Update":
        printed += " using %s" % entry.get("apiVersion", "")
    return printed


def conflict_error(conflicts: List[Tuple[dict, Path]]) -> ApiError:
    """The 409 of an apply with conflicts: a `Status` of reason `Conflict` whose `details.causes` name each field
    and its manager (`FieldManagerConflict`), its message as kube-apiserver words it."""
    causes = [{"reason": "FieldManagerConflict", "message": "conflict with %s" % _printed_manager(entry),
               "field": path_string(path)} for entry, path in conflicts]
    if len(conflicts) == 1:
        message = "Apply failed with 1 conflict: conflict with %s: %s" % (_printed_manager(conflicts[0][0]),
                                                                        path_string(conflicts[0][1]))
    else:
        by_manager: Dict[str, List[str]] = {}
        for entry, path in conflicts:
            by_manager.setdefault(_printed_manager(entry), []).append(path_string(path))
        lines = []
        for printed in sorted(by_manager):
            lines.append("conflicts with %s" % printed)
            lines += ["- %s" % field for field in by_manager[printed]]
        message = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(lines))
    return ApiError(409, "Conflict", message, {"causes": causes})


def _entry_key(entry: dict) -> Tuple[str, str, str]:
    return entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", "")


def _valid(entries) -> bool:
    return isinstance(entries, list) and bool(entries) and all(
        isinstance(entry, dict) and entry.get("manager") is not None and entry.get("operation") in ("Apply", "Update")
        for entry in entries)


def base_entries(stored: Optional[list], sent) -> List[dict]:
    """The entries a write starts from: the ones it sent when they differ from the stored ones (as upstream,
    a client may rewrite ownership), else the stored ones."""
    if _valid(sent) and sent != stored:
        return copy.deepcopy(sent)
    return copy.deepcopy(stored or [])


def record_write(entries: List[dict], manager: str, operation: str, api_version: str, now: str,
                 old: Optional[dict], new: dict, applied: Optional[dict] = None, subresource: str = "",
                 status_is_subresource: bool = False) -> List[dict]:
    """The managedFields after ``manager`` wrote ``new`` over ``old`` (None at create). ``applied``: the
    configuration a server-side apply sent (its fields are what the Apply entry owns)."""
    only_status = subresource == "status"
    before = field_values(old, status_is_subresource, only_status) if old is not None else {}
    after = field_values(new, status_is_subresource, only_status)
    changed = {path for path, value in after.items()
               if path not in before or (value is not _CONTAINER and before[path] != value)
               or (value is _CONTAINER) != (before[path] is _CONTAINER)}
    removed = set(before) - set(after)
    key = (manager, operation, subresource)
    result, mine = [], None
    for entry in entries:
        if _entry_key(entry) == key:
            mine = entry
            continue
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        left = owned - changed - removed
        if left != owned:
            entry = dict(entry, fieldsV1=to_fields_v1(left))
        if left:
            result.append(entry)
    owned = from_fields_v1(mine.get("fieldsV1") or {}) if mine is not None else set()
    if applied is not None:
        now_owned = applied_paths(applied, status_is_subresource, only_status) & set(after)
    else:
        now_owned = (owned - removed) | changed
    if mine is None and not now_owned:
        return result
    if mine is not None and now_owned == owned and not changed:
        result.append(mine)
        return _ordered(result, entries)
    if now_owned:
        entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
                 "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(now_owned)}
        if subresource:
            entry["subresource"] = subresource
        result.append(entry)
    return _ordered(result, entries)


def _ordered(result: List[dict], previous: List[dict]) -> List[dict]:
    """Entries in their earlier order, new ones last."""
    order = {_entry_key(entry): index for index, entry in enumerate(previous)}
    return sorted(result, key=lambda entry: order.get(_entry_key(entry), len(order)))


def without_times(entries) -> list:
    """The entries with their `time` dropped: a write whose only change is a timestamp there is a no-op."""
    return [{key: value for key, value in entry.items() if key != "time"} if isinstance(entry, dict) else entry
            for entry in (entries or [])]

