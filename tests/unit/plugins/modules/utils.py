# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Running a module's main() in-process on every ansible-core the collection supports (meta/runtime.yml).

ansible-core 2.19 added ``ansible.module_utils.testing.patch_module_args``; before it, AnsibleModule read its
arguments from ``basic._ANSIBLE_ARGS``, which is what the fallback sets. Module tests import these two names
from here, never from ansible directly.
"""

from __future__ import annotations

import contextlib
import json
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.common import warnings as ansible_warnings

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    @contextlib.contextmanager
    def patch_module_args(args=None):
        """Expose args to the AnsibleModule instances created within this context."""
        serialized = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", serialized):
            yield


def isolate_warnings(monkeypatch):
    """Give this test its own module.warn() collection (a dict since 2.19, a list before).

    Since 2.19 warn() goes to the controller's Display instead once controller code (a Templar, the plugin
    loader) was imported in this process, e.g. by a role-rendering test run in the same pytest session.
    """
    monkeypatch.setattr(ansible_warnings, "_global_warnings", type(ansible_warnings._global_warnings)())
    internal = getattr(ansible_warnings, "_internal", None)
    if internal is not None and hasattr(internal, "is_controller"):
        monkeypatch.setattr(internal, "is_controller", False)


__all__ = ["isolate_warnings", "patch_module_args"]
