# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A small JSON Schema (Draft 7) validator: just the keywords the CDI schema uses.

Targets have no ``jsonschema`` package, so this covers ``$ref`` (to a local pointer or to another named
document), ``type``, ``properties``, ``required``, ``items``, ``patternProperties``,
``additionalProperties``, ``enum``, ``minimum`` and ``maximum``. Unknown keywords are ignored, as Draft 7
requires (the CDI schema's typo'd ``ref`` therefore constrains nothing, exactly as with ``jsonschema``).
The unit tests check every verdict against ``jsonschema.Draft7Validator``.
"""

from __future__ import annotations

import re


class SchemaError:
    """One violation: where in the instance (list of keys and indexes) and what is wrong."""

    def __init__(self, path, message):
        self.path = list(path)
        self.message = message

    def __str__(self):
        return "%s: %s" % (format_path(self.path), self.message)

    def __repr__(self):
        return "SchemaError(%r, %r)" % (self.path, self.message)


def format_path(parts):
    """Render ['devices', 2, 'containerEdits'] as 'devices[2].containerEdits' ('(root)' when empty)."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += "[%d]" % part
        elif text:
            text += "." + part
        else:
            text = part
    return text or "(root)"


def _is_type(value, type_name):
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if type_name == "integer":
        # Draft 4+ treats 1.0 as an integer; so does jsonschema.
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if type_name == "number":
        return isinstance(value, (int, float))
    raise ValueError("unsupported JSON Schema type %r" % type_name)


def _type_label(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if value is None:
        return "null"
    return type(value).__name__


def _resolve_pointer(document, pointer):
    node = document
    for token in pointer.lstrip("/").split("/") if pointer.strip("/") else []:
        token = token.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


class Validator:
    """Validate instances against ``resources[root_uri]``, resolving $ref into the other resources."""

    def __init__(self, resources, root_uri):
        self.resources = resources
        self.root_uri = root_uri

    def errors(self, instance):
        """Return every violation as a list of SchemaError (empty when the instance is valid)."""
        found = []
        self._validate(instance, self.resources[self.root_uri], self.root_uri, [], found)
        return found

    def _resolve(self, ref, base_uri):
        uri, _sep, pointer = ref.partition("#")
        uri = uri or base_uri
        if uri not in self.resources:
            raise ValueError("unresolvable $ref %r (known documents: %s)" % (ref, ", ".join(sorted(self.resources))))
        return _resolve_pointer(self.resources[uri], pointer), uri

    def _validate(self, instance, schema, base_uri, path, found):
        if "$ref" in schema:
            # Draft 7: keywords next to $ref are ignored.
            target, target_uri = self._resolve(schema["$ref"], base_uri)
            self._validate(instance, target, target_uri, path, found)
            return
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_is_type(instance, name) for name in types):
                found.append(SchemaError(path, "must be of type %s, got %s" % (" or ".join(types), _type_label(instance))))
                return
        if "enum" in schema and instance not in schema["enum"]:
            found.append(SchemaError(path, "must be one of %s" % ", ".join(repr(v) for v in schema["enum"])))
        if _is_type(instance, "number"):
            self._check_range(instance, schema, path, found)
        if isinstance(instance, dict):
            self._check_object(instance, schema, base_uri, path, found)
        if isinstance(instance, list):
            self._check_array(instance, schema, base_uri, path, found)

    @staticmethod
    def _check_range(instance, schema, path, found):
        if "minimum" in schema and instance < schema["minimum"]:
            found.append(SchemaError(path, "%r is less than the minimum %r" % (instance, schema["minimum"])))
        if "maximum" in schema and instance > schema["maximum"]:
            found.append(SchemaError(path, "%r is greater than the maximum %r" % (instance, schema["maximum"])))

    def _check_object(self, instance, schema, base_uri, path, found):
        for key in schema.get("required", []):
            if key not in instance:
                found.append(SchemaError(path, "required field %r is missing" % key))
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for key, value in instance.items():
            matched = False
            if key in properties:
                matched = True
                self._validate(value, properties[key], base_uri, path + [key], found)
            for pattern, subschema in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    self._validate(value, subschema, base_uri, path + [key], found)
            additional = schema.get("additionalProperties", True)
            if not matched and additional is False:
                found.append(SchemaError(path + [key], "unknown field"))
            elif not matched and isinstance(additional, dict):
                self._validate(value, additional, base_uri, path + [key], found)

    def _check_array(self, instance, schema, base_uri, path, found):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, value in enumerate(instance):
                self._validate(value, items, base_uri, path + [index], found)
        elif isinstance(items, list):
            for index, (value, subschema) in enumerate(zip(instance, items)):
                self._validate(value, subschema, base_uri, path + [index], found)
