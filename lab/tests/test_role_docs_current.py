"""Every role README's variable table is what hack/role_docs.py makes of the role's meta/argument_specs.yml."""
from __future__ import annotations

import importlib.util
import os

from conftest import REPO_DIR


def load_role_docs():
    spec = importlib.util.spec_from_file_location("role_docs", os.path.join(REPO_DIR, "hack", "role_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_role_readme_table_is_generated_from_its_argument_spec(capsys):
    assert load_role_docs().main(["--check"]) == 0, "run: python hack/role_docs.py (%s)" % capsys.readouterr().err


def test_the_table_lists_every_option_with_its_default_and_choices():
    role_docs = load_role_docs()
    block = role_docs.render({"argument_specs": {"main": {"short_description": "Demo", "options": {
        "demo_mode": {"type": "str", "default": "auto", "choices": ["auto", "manual"], "description": "How C(demo) runs."},
        "demo_list": {"type": "list", "elements": "str", "default": [], "description": ["First.", "Second."]},
        "demo_version": {"type": "str", "required": True, "description": "The version."}}}}})
    assert "| `demo_mode` | str | `auto` | How `demo` runs. Choices: `auto`, `manual`. |" in block
    assert "| `demo_list` | list of str | `[]` | First. Second. |" in block
    assert "| `demo_version` | str | *required* | The version. |" in block
    readme = role_docs.updated_readme("# demo\n\nHand-written.\n", "demo", block)
    assert readme.startswith("# demo\n\nHand-written.\n") and role_docs.updated_readme(readme, "demo", block) == readme
