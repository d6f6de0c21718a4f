"""Where the gpuops.nvidia collection is, found the way ansible finds collections, and its public audit API
(``plugins/module_utils/audit``, docs/audit.md) imported from there: the runner keeps no copy of the chain code."""

from __future__ import annotations

import os
import sys

COLLECTION = ("ansible_collections", "gpuops", "nvidia")


class CollectionNotFound(Exception):
    pass


def ansible_search_paths():
    """The collection paths ansible-playbook would search: ANSIBLE_COLLECTIONS_PATH, ``collections_path`` of the
    ansible.cfg in effect, the defaults, then (unless collections_scan_sys_path is off) sys.path."""
    from ansible import constants

    paths = list(constants.COLLECTIONS_PATHS or [])
    if constants.COLLECTIONS_SCAN_SYS_PATH:
        paths += [path for path in sys.path if path]
    return paths


def candidate_paths(explicit=None, search_paths=None):
    paths = [explicit] if explicit else []
    paths += ansible_search_paths() if search_paths is None else list(search_paths)
    found = []
    for path in paths:
        path = os.path.abspath(os.path.expanduser(path))
        if path not in found:
            found.append(path)
    return found


def find_collections_path(explicit=None, search_paths=None):
    """The folder that holds ansible_collections/gpuops/nvidia (``explicit`` first, when given)."""
    tried = candidate_paths(explicit, search_paths)
    for path in tried:
        if os.path.isfile(os.path.join(path, *COLLECTION, "plugins", "module_utils", "audit", "chain.py")):
            return path
    raise CollectionNotFound("gpuops.nvidia (with its audit module_utils) is not installed in any of: %s "
                             "(install it with ansible-galaxy, or pass --collections-path)" % ", ".join(tried))


def collection_root(collections_path):
    return os.path.join(collections_path, *COLLECTION)


def audit_api(collections_path):
    """The modules chain, events and forward of the collection's public audit API, imported from that path."""
    if collections_path not in sys.path:
        sys.path.insert(0, collections_path)
    # pylint: disable=import-outside-toplevel  # the collection's location is known only now
    from ansible_collections.gpuops.nvidia.plugins.module_utils.audit import chain, events, forward

    expected = os.path.realpath(os.path.join(collection_root(collections_path), "plugins", "module_utils", "audit"))
    if os.path.realpath(os.path.dirname(chain.__file__)) != expected:
        raise CollectionNotFound("gpuops.nvidia was already imported from %s, not from %s"
                                 % (os.path.dirname(chain.__file__), expected))
    return chain, events, forward


def change_kinds(collections_path):
    """The change engine's kinds table of the collection (``KINDS`` of plugins/module_utils/rollout/change_kinds.py,
    docs/change_engine.md) as ``{kind: two people by default}``; {} for a collection without the engine."""
    audit_api(collections_path)   # the collection on sys.path, and the one imported from that path
    # pylint: disable=import-outside-toplevel  # the collection's location is known only now
    try:
        from ansible_collections.gpuops.nvidia.plugins.module_utils.rollout import change_kinds as table
    except ImportError:
        return {}
    return {name: bool(kind.two_person) for name, kind in table.KINDS.items()}
