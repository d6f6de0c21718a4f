# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The CDI JSON schema, shipped as Python data (targets have no jsonschema package).

Provenance: cncf-tags/container-device-interface, schema/schema.json and schema/defs.json at commit
05ae4b5bb730a036cb3f79477bd6676eea4a8c83 (main after v1.1.0: top-level containerEdits, netDevices,
intelRdt.schemata/enableMonitoring). Copied value for value (sha256 of the upstream files:
schema.json b82848e4ded6442a65d603aaa3f768b8216c25a39eaed8214c9021ec68645b75,
defs.json cef28398eb3c95378dced78c4c98c2422ac06585613826d351f01ffecce60a54).
Upstream quirks kept on purpose: no additionalProperties:false, DeviceNode.fileMode not listed, and the
containerEdits.env items use a typo'd "ref" keyword, so they are unconstrained. _cdi.py adds the stricter
rules the Go library enforces.
"""

from __future__ import annotations

SCHEMA_URI = "schema.json"
DEFS_URI = "defs.json"

SCHEMA = {
    "description": "Configuration Schema for the Container Device Interface",
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "cdiVersion": {
            "description": "The version of the Container Device Interface Specification that the document complies with",
            "type": "string"
        },
        "kind": {
            "description": "The kind of the device usually of the form 'vendor.com/device'",
            "type": "string"
        },
        "annotations": {
            "$ref": "defs.json#/definitions/annotations"
        },
        "devices": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {
                        "description": "The name of the device",
                        "type": "string"
                    },
                    "annotations": {
                        "$ref": "defs.json#/definitions/annotations"
                    },
                    "containerEdits": {
                        "$ref": "defs.json#/definitions/containerEdits"
                    }
                },
                "required": [
                    "name",
                    "containerEdits"
                ]
            }
        },
        "containerEdits": {
            "$ref": "defs.json#/definitions/containerEdits"
        }
    },
    "required": [
        "cdiVersion",
        "kind",
        "devices"
    ]
}

DEFS = {
    "description": "Definitions used throughout the Container Device Interface Specification",
    "definitions": {
        "uint32": {
            "type": "integer",
            "minimum": 0,
            "maximum": 4294967295
        },
        "int64": {
            "type": "integer",
            "minimum": -9223372036854775808,
            "maximum": 9223372036854775807
        },
        "ArrayOfStrings": {
            "type": "array",
            "items": {
                "type": "string"
            }
        },
        "FileName": {
            "type": "string"
        },
        "FilePath": {
            "type": "string"
        },
        "Env": {
            "$ref": "#/definitions/ArrayOfStrings"
        },
        "InterfaceName": {
            "type": "string"
        },
        "mapStringString": {
            "type": "object",
            "patternProperties": {
                ".{1,}": {
                    "type": "string"
                }
            }
        },
        "DeviceNode": {
            "type": "object",
            "properties": {
                "path": {
                    "$ref": "#/definitions/FilePath"
                },
                "hostPath": {
                    "$ref": "#/definitions/FilePath"
                },
                "permissions": {
                    "type": "string"
                },
                "type": {
                    "type": "string"
                },
                "major": {
                    "$ref": "#/definitions/int64"
                },
                "minor": {
                    "$ref": "#/definitions/int64"
                },
                "uid": {
                    "$ref": "#/definitions/uint32"
                },
                "gid": {
                    "$ref": "#/definitions/uint32"
                }
            },
            "required": [
                "path"
            ]
        },
        "Mount": {
            "type": "object",
            "properties": {
                "hostPath": {
                    "$ref": "#/definitions/FilePath"
                },
                "containerPath": {
                    "$ref": "#/definitions/FilePath"
                },
                "options": {
                    "$ref": "#/definitions/ArrayOfStrings"
                },
                "type": {
                    "type": "string"
                }
            },
            "required": [
                "hostPath",
                "containerPath"
            ]
        },
        "Hook": {
            "type": "object",
            "properties": {
                "hookName": {
                    "type": "string"
                },
                "path": {
                    "$ref": "#/definitions/FilePath"
                },
                "args": {
                    "$ref": "#/definitions/ArrayOfStrings"
                },
                "env": {
                    "$ref": "#/definitions/ArrayOfStrings"
                },
                "timeout": {
                    "$ref": "#/definitions/uint32"
                }
            },
            "required": [
                "hookName",
                "path"
            ]
        },
        "LinuxNetDevice": {
            "type": "object",
            "properties": {
                "hostInterfaceName": {
                    "$ref": "#/definitions/InterfaceName"
                },
                "name": {
                    "$ref": "#/definitions/InterfaceName"
                }
            },
            "required": [
                "hostInterfaceName",
                "name"
            ]
        },
        "containerEdits": {
            "type": "object",
            "properties": {
                "env": {
                    "type": "array",
                    "items": {
                        "ref": "#definitions/Env"
                    }
                },
                "deviceNodes": {
                    "type": "array",
                    "items": {
                        "$ref": "#/definitions/DeviceNode"
                    }
                },
                "netDevices": {
                    "type": "array",
                    "items": {
                        "$ref": "#/definitions/LinuxNetDevice"
                    }
                },
                "mounts": {
                    "type": "array",
                    "items": {
                        "$ref": "#/definitions/Mount"
                    }
                },
                "hooks": {
                    "type": "array",
                    "items": {
                        "$ref": "#/definitions/Hook"
                    }
                },
                "intelRdt": {
                    "type": "object",
                    "properties": {
                        "closID": {
                            "$ref": "#/definitions/FileName"
                        },
                        "l3CacheSchema": {
                            "type": "string"
                        },
                        "memBwSchema": {
                            "type": "string"
                        },
                        "schemata": {
                            "$ref": "#/definitions/ArrayOfStrings"
                        },
                        "enableMonitoring": {
                            "type": "boolean"
                        }
                    }
                },
                "additionalGids": {
                    "type": "array",
                    "items": {
                        "$ref": "#/definitions/uint32"
                    }
                }
            }
        },
        "annotations": {
            "$ref": "#/definitions/mapStringString"
        }
    }
}

RESOURCES = {SCHEMA_URI: SCHEMA, DEFS_URI: DEFS}
