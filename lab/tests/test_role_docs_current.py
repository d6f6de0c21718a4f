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


def test_every_role_readme_table_is_generated_from_its_argument_spec():
    role_docs = load_role_docs()
    assert role_docs.role_dirs(), "no role with meta/argument_specs.yml found"
    assert role_docs.stale_readmes() == [], "run: python hack/role_docs.py"


def test_the_table_lists_every_option_with_its_default_and_choices(tmp_path):
    role_docs = load_role_docs()
    spec = tmp_path / "argument_specs.yml"
    spec.write_text("argument_specs:\n  main:\n    options:\n      demo_mode:\n        type: str\n        default: auto\n"
                    "        choices: [auto, manual]\n        description: How C(demo) runs.\n"
                    "      demo_list:\n        type: list\n        elements: str\n        default: []\n"
                    "        description: [First., Second.]\n")
    table = role_docs.table(str(spec))
    assert "| `demo_mode` | str | `auto` | How `demo` runs. Choices: `auto`, `manual`. |" in table
    assert "| `demo_list` | list of str | `[]` | First. Second. |" in table
