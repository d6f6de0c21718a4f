"""Decode the Kubernetes protobuf wire format (``application/vnd.kubernetes.protobuf``) into JSON-form dicts.

kubectl >= 1.32 sends request bodies of built-in kinds (``create deployment``, ``create pdb``, the eviction
of ``drain``) as protobuf and does not fall back to JSON. The field numbers come from the protobuf file
descriptors that every kubectl binary embeds (gzipped ``FileDescriptorProto``s registered by the generated
code), so no schema is copied into this repository and the numbering always matches the client's.

Zero values: the generated Go marshallers always write non-pointer fields, even when empty; JSON omits them
(``omitempty``). Empty strings, false, empty messages and lists and zero numbers are therefore dropped,
except for the pointer fields in ``_ZERO_IS_MEANINGFUL`` where 0 is a real value.
"""
from __future__ import annotations

import base64
import glob
import json
import os
import re
import shutil
import struct
import threading
import zlib
from typing import Dict, Iterator, List, Optional, Tuple

from .timefmt import rfc3339

MAGIC = b"k8s\x00"

_ZERO_IS_MEANINGFUL = {"replicas", "gracePeriodSeconds", "terminationGracePeriodSeconds", "revisionHistoryLimit",
                       "progressDeadlineSeconds", "activeDeadlineSeconds", "backoffLimit", "parallelism",
                       "completions", "ttlSecondsAfterFinished", "partition"}

# FieldDescriptorProto.type values
_TYPE_DOUBLE, _TYPE_FLOAT, _TYPE_BOOL, _TYPE_STRING, _TYPE_MESSAGE, _TYPE_BYTES = 1, 2, 8, 9, 11, 12
_SIGNED_32 = {5, 15, 17}        # int32, sfixed32, sint32
_ZIGZAG = {17, 18}              # sint32, sint64
_REPEATED = 3

_META = ".k8s.io.apimachinery.pkg.apis.meta.v1."
_GROUP_PACKAGES = {"": "core", "apps": "apps", "policy": "policy", "batch": "batch", "coordination.k8s.io":
                   "coordination", "events.k8s.io": "events", "rbac.authorization.k8s.io": "rbac",
                   "node.k8s.io": "node", "resource.k8s.io": "resource", "autoscaling": "autoscaling",
                   "networking.k8s.io": "networking", "scheduling.k8s.io": "scheduling",
                   "storage.k8s.io": "storage", "discovery.k8s.io": "discovery",
                   "authentication.k8s.io": "authentication", "authorization.k8s.io": "authorization"}


class ProtobufError(ValueError):
    """A body that cannot be decoded (or no descriptors to decode it with)."""


# ---------------------------------------------------------------- wire format

def _varint(buffer: bytes, position: int) -> Tuple[int, int]:
    result, shift = 0, 0
    while True:
        if position >= len(buffer):
            raise ProtobufError("truncated varint")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def iter_fields(buffer: bytes) -> Iterator[Tuple[int, int, object]]:
    """(field number, wire type, value) for each field: ints for varint/fixed, bytes for length-delimited."""
    position = 0
    while position < len(buffer):
        key, position = _varint(buffer, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(buffer, position)
        elif wire_type == 1:
            value, position = struct.unpack_from("<Q", buffer, position)[0], position + 8
        elif wire_type == 2:
            length, position = _varint(buffer, position)
            value, position = buffer[position:position + length], position + length
        elif wire_type == 5:
            value, position = struct.unpack_from("<I", buffer, position)[0], position + 4
        else:
            raise ProtobufError("unsupported wire type %d" % wire_type)
        yield number, wire_type, value


# ---------------------------------------------------------------- descriptors

class Field:
    __slots__ = ("name", "number", "repeated", "type", "type_name")

    def __init__(self, name: str, number: int, repeated: bool, field_type: int, type_name: str):
        self.name, self.number, self.repeated, self.type, self.type_name = name, number, repeated, field_type, type_name


class Schema:
    """Messages by full name (``.k8s.io.api.apps.v1.Deployment``) → fields by number."""

    def __init__(self):
        self.messages: Dict[str, Dict[int, Field]] = {}
        self.map_entries = set()

    def add_file(self, blob: bytes) -> None:
        package = ""
        messages = []
        for number, _, value in iter_fields(blob):
            if number == 2:
                package = value.decode()
            elif number == 4:
                messages.append(value)
        for message in messages:
            self._add_message("." + package, message)

    def _add_message(self, scope: str, blob: bytes) -> None:
        name, fields, nested, map_entry = "", {}, [], False
        for number, _, value in iter_fields(blob):
            if number == 1:
                name = value.decode()
            elif number == 2:
                field = _parse_field(value)
                fields[field.number] = field
            elif number == 3:
                nested.append(value)
            elif number == 7:
                map_entry = any(option == 7 and flag for option, _, flag in iter_fields(value))
        full_name = scope + "." + name
        self.messages[full_name] = fields
        if map_entry:
            self.map_entries.add(full_name)
        for child in nested:
            self._add_message(full_name, child)

    def message_for(self, api_version: str, kind: str) -> Optional[str]:
        group, _, version = api_version.rpartition("/")
        candidates = []
        if group in _GROUP_PACKAGES:
            candidates.append(".k8s.io.api.%s.%s.%s" % (_GROUP_PACKAGES[group], version, kind))
        candidates.append(_META + kind)
        for candidate in candidates:
            if candidate in self.messages:
                return candidate
        return None


def _parse_field(blob: bytes) -> Field:
    name, number, label, field_type, type_name = "", 0, 1, 0, ""
    for key, _, value in iter_fields(blob):
        if key == 1:
            name = value.decode()
        elif key == 3:
            number = value
        elif key == 4:
            label = value
        elif key == 5:
            field_type = value
        elif key == 6:
            type_name = value.decode()
    return Field(name, number, label == _REPEATED, field_type, type_name)


def descriptors_in_binary(path: str) -> List[bytes]:
    """The gzipped k8s FileDescriptorProtos embedded in a Go binary (kubectl)."""
    with open(path, "rb") as handle:
        data = handle.read()
    blobs = []
    for match in re.finditer(rb"\x1f\x8b\x08\x00\x00\x00\x00\x00", data):
        try:
            blob = zlib.decompressobj(31).decompress(data[match.start():match.start() + (1 << 20)])
        except zlib.error:
            continue
        if blob[:1] == b"\x0a" and b"k8s.io/" in blob[:80] and b"generated.proto" in blob[:100]:
            blobs.append(blob)
    return blobs


def _candidate_binaries() -> List[str]:
    explicit = os.environ.get("GPULAB_KUBECTL")
    paths = [explicit] if explicit else []
    on_path = shutil.which("kubectl")
    if on_path:
        paths.append(os.path.realpath(on_path))
    paths.extend(sorted(glob.glob("/usr/lib/google-cloud-sdk/bin/kubectl.*"), reverse=True))
    return [path for path in paths if path and os.path.isfile(path)]


_schema_lock = threading.Lock()
_schema: Optional[Schema] = None


def default_schema() -> Schema:
    """Descriptors from the kubectl binary on this machine (``$GPULAB_KUBECTL`` first), loaded once."""
    global _schema
    with _schema_lock:
        if _schema is None:
            schema = Schema()
            for path in _candidate_binaries():
                blobs = descriptors_in_binary(path)
                for blob in blobs:
                    schema.add_file(blob)
                if blobs:
                    break
            _schema = schema
        return _schema


# ---------------------------------------------------------------- decoding

def _rfc3339(seconds: int, nanos: int = 0, micro: bool = False) -> str:
    text = rfc3339(seconds)
    return text[:-1] + ".%06dZ" % (nanos // 1000) if micro else text


def _special(type_name: str, fields: List[Tuple[int, int, object]], schema: Schema):
    """Kinds whose JSON form is not an object; returns (handled, value)."""
    values = {number: value for number, _, value in fields}
    if type_name in (_META + "Time", _META + "MicroTime"):
        if not values.get(1):
            return True, None
        return True, _rfc3339(_signed(values.get(1, 0), 64), values.get(2, 0), type_name.endswith("MicroTime"))
    if type_name == ".k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        if values.get(1, 0) == 1:
            return True, values.get(3, b"").decode()
        return True, _signed(values.get(2, 0), 32)
    if type_name == ".k8s.io.apimachinery.pkg.api.resource.Quantity":
        return True, values.get(1, b"").decode() or None
    if type_name in (".k8s.io.apimachinery.pkg.runtime.RawExtension", _META + "FieldsV1"):
        raw = values.get(1, b"")
        return True, json.loads(raw) if raw else None
    if type_name == _META + "Duration":
        return True, "%gs" % (_signed(values.get(1, 0), 64) / 1e9)
    return False, None


def _signed(value: int, bits: int) -> int:
    value &= (1 << 64) - 1
    if bits == 32:
        value &= (1 << 32) - 1
        return value - (1 << 32) if value >= 1 << 31 else value
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(field: Field, wire_type: int, value):
    if field.type == _TYPE_STRING:
        return value.decode()
    if field.type == _TYPE_BYTES:
        return base64.b64encode(value).decode()
    if field.type == _TYPE_BOOL:
        return bool(value)
    if field.type == _TYPE_DOUBLE:
        return struct.unpack("<d", struct.pack("<Q", value))[0]
    if field.type == _TYPE_FLOAT:
        return struct.unpack("<f", struct.pack("<I", value))[0]
    if field.type in _ZIGZAG:
        return (value >> 1) ^ -(value & 1)
    return _signed(value, 32 if field.type in _SIGNED_32 else 64)


def _unpack(field: Field, payload: bytes) -> List[object]:
    values, position = [], 0
    while position < len(payload):
        if field.type in (_TYPE_DOUBLE, 6, 16):       # 8-byte: double, fixed64, sfixed64
            raw, position = struct.unpack_from("<Q", payload, position)[0], position + 8
        elif field.type in (_TYPE_FLOAT, 7, 15):      # 4-byte: float, fixed32, sfixed32
            raw, position = struct.unpack_from("<I", payload, position)[0], position + 4
        else:
            raw, position = _varint(payload, position)
        values.append(_scalar(field, 0, raw))
    return values


def _is_empty(value) -> bool:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value == 0
    return value is None or value == "" or value == {} or value == []


def decode_message(buffer: bytes, type_name: str, schema: Schema):
    fields_by_number = schema.messages.get(type_name)
    raw_fields = list(iter_fields(buffer))
    handled, special = _special(type_name, raw_fields, schema)
    if handled:
        return special
    if fields_by_number is None:
        raise ProtobufError("no descriptor for %s" % type_name)
    result: Dict[str, object] = {}
    for number, wire_type, value in raw_fields:
        field = fields_by_number.get(number)
        if field is None:
            continue   # a field newer than the descriptors: skip, as protobuf readers do
        if wire_type == 2 and field.type not in (_TYPE_MESSAGE, _TYPE_STRING, _TYPE_BYTES):
            result.setdefault(field.name, []).extend(_unpack(field, value))   # a packed repeated number
            continue
        decoded = decode_message(value, field.type_name, schema) if field.type == _TYPE_MESSAGE \
            else _scalar(field, wire_type, value)
        if field.type_name in schema.map_entries:
            key, entry_value = decoded.get("key", ""), decoded.get("value", "")
            result.setdefault(field.name, {})[key] = entry_value
        elif field.repeated:
            result.setdefault(field.name, []).append(decoded)
        else:
            result[field.name] = decoded
    return {name: value for name, value in result.items()
            if not _is_empty(value) or (name in _ZERO_IS_MEANINGFUL and value == 0 and not isinstance(value, bool))}


def decode_k8s_protobuf(body: bytes, schema: Optional[Schema] = None) -> dict:
    """A ``k8s\\0`` + runtime.Unknown envelope → the object in its JSON form (with apiVersion and kind)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    schema = schema or default_schema()
    api_version, kind, raw = "", "", b""
    for number, _, value in iter_fields(body[len(MAGIC):]):
        if number == 1:
            type_meta = {key: data.decode() for key, _, data in iter_fields(value)}
            api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        elif number == 2:
            raw = value
    type_name = schema.message_for(api_version, kind)
    if type_name is None:
        raise ProtobufError("cannot decode %s %s from protobuf: no descriptor found (is kubectl installed?)"
                            % (api_version, kind))
    obj = decode_message(raw, type_name, schema)
    typed = {"apiVersion": api_version, "kind": kind}
    typed.update(obj)
    return typed
