"""Where the gpuops.nvidia collection is, and its audit helpers (the runner is a separate package: it imports the
chain code from the installed collection rather than keeping a copy)."""

from __future__ import annotations

import importlib
import os
import sys

COLLECTION = ("ansible_collections", "gpuops", "nvidia")
DEFAULT_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")


class CollectionNotFound(Exception):
    pass


def candidate_paths(explicit=None, environ=None):
    environ = os.environ if environ is None else environ
    paths = []
    if explicit:
        paths.append(explicit)
    for name in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        paths += [path for path in environ.get(name, "").split(os.pathsep) if path]
    paths += list(DEFAULT_PATHS)
    return [os.path.abspath(os.path.expanduser(path)) for path in paths]


def find_collections_path(explicit=None, environ=None):
    """The folder that holds ansible_collections/gpuops/nvidia."""
    tried = candidate_paths(explicit, environ)
    for path in tried:
        if os.path.isfile(os.path.join(path, *COLLECTION, "plugins", "callback", "audit.py")):
            return path
    raise CollectionNotFound("gpuops.nvidia (with its audit callback) is not installed in any of: %s "
                             "(install it with ansible-galaxy, or pass --collections-path)" % ", ".join(tried))


def collection_root(collections_path):
    return os.path.join(collections_path, *COLLECTION)


def module_utils(collections_path, name):
    """Import ansible_collections.gpuops.nvidia.plugins.module_utils.<name> from that collection path."""
    if collections_path not in sys.path:
        sys.path.insert(0, collections_path)
    return importlib.import_module("ansible_collections.gpuops.nvidia.plugins.module_utils." + name)


def chain(collections_path):
    return module_utils(collections_path, "audit.chain")


def events(collections_path):
    return module_utils(collections_path, "audit.events")
