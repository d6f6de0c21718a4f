"""Import-graph check of the collection's plugins (plugins/module_utils in wings), standard library only.

Fails (exit 1) on
- an import between two sides that the table MAY_IMPORT (plugins/module_utils/README.md) does not allow;
- an import of a module (plugins/modules/*): modules are entry points, what they share lives in a wing;
- a module_utils file outside a wing, or a side the table has no row for;
- anything but the standard library imported by the audit wing (the runner and the callback share it);
- an import cycle between files (imports inside functions count: they are dependencies too).
Imports are read from the files' syntax (ast), nothing is imported.

Usage: python hack/check_module_utils_imports.py [--root COLLECTION_ROOT] [--edges]
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import sys

from import_graph import cycles

PREFIX = "ansible_collections.gpuops.nvidia.plugins."
WINGS = ("audit", "host", "nvidia", "k8s", "monitoring", "rollout", "bmc")
# side -> the other sides it may import; a wing may also import itself, a plugin type (modules, callback, ...) not
MAY_IMPORT = {
    "audit": (),
    "host": (),
    "nvidia": ("host",),
    "k8s": (),
    "monitoring": (),
    "rollout": ("k8s", "nvidia"),
    "bmc": ("host",),
    "modules": WINGS,
    "filter": WINGS,
    "test": WINGS,
    "callback": WINGS + ("plugin_utils",),
    "plugin_utils": WINGS,
    "doc_fragments": (),
}
# (importer pattern, imported pattern, why): single files allowed across the table
EXCEPTIONS = (
    ("module_utils.monitoring.alertmanager", "module_utils.k8s.timestamps",
     "silence times are RFC 3339 like the API server's: one time helper for both"),
    ("module_utils.host.precheck*", "module_utils.nvidia.*",
     "the GPU-node precheck judges a host against the NVIDIA support tables"),
)
STDLIB_ONLY = ("audit",)
CHECKS = (
    "every import follows the table of plugins/module_utils/README.md",
    "nothing imports a module",
    "the audit wing imports the standard library only",
    "no import cycle",
)


def side_of(module: str) -> str:
    """``module_utils.k8s.client`` -> ``k8s``; ``modules.node_drain`` -> ``modules``."""
    parts = module.split(".")
    if parts[0] == "module_utils" and len(parts) > 1:
        return parts[1]
    return parts[0]


def plugin_files(root: str) -> dict:
    """module name (relative to plugins/) -> path of every .py file under root/plugins."""
    plugins = os.path.join(root, "plugins")
    modules = {}
    for directory, subdirs, files in os.walk(plugins):
        subdirs[:] = sorted(name for name in subdirs if name != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, plugins)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                if parts:
                    modules[".".join(parts)] = path
    return modules


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name an ImportFrom names (relative imports resolved against ``module``, under PREFIX)."""
    if not node.level:
        return node.module or ""
    base = (PREFIX + module).split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_names(module: str, path: str) -> list:
    """Every absolute name ``module`` imports (``from pkg import name`` gives pkg.name)."""
    with open(path, encoding="utf-8") as stream:
        tree = ast.parse(stream.read(), path)
    is_package = os.path.basename(path) == "__init__.py"
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, is_package, node)
            if target == "__future__":
                continue
            names.extend(target + "." + alias.name for alias in node.names)
    return names


def collection_target(name: str, modules: dict) -> str:
    """The plugin module an absolute name points into, or '' when it is not this collection's."""
    if not name.startswith(PREFIX):
        return ""
    name = name[len(PREFIX):]
    while name and name not in modules:   # module_utils.k8s.client.request -> module_utils.k8s.client
        name = name.rpartition(".")[0]
    return name


def is_stdlib(name: str) -> bool:
    top = name.split(".")[0]
    known = getattr(sys, "stdlib_module_names", None)   # Python 3.10+
    if known is None:
        return top not in ("ansible", "ansible_collections")
    return top in known


def allowed(module: str, target: str) -> bool:
    source_side, target_side = side_of(module), side_of(target)
    if source_side == target_side and source_side in WINGS:
        return True
    if target_side in MAY_IMPORT.get(source_side, ()):
        return True
    return any(fnmatch.fnmatchcase(module, source) and fnmatch.fnmatchcase(target, imported)
               for source, imported, dummy in EXCEPTIONS)


def check(root: str) -> tuple:
    """(problems, graph, modules) of the collection at ``root``."""
    modules = plugin_files(root)
    graph, problems = {}, []
    for module, path in sorted(modules.items()):
        side = side_of(module)
        if module.count(".") == 1 and module.startswith("module_utils.") and not path.endswith("__init__.py"):
            problems.append("%s is in no wing (plugins/module_utils/<wing>/)" % module)
        elif side not in MAY_IMPORT:
            problems.append("%s: no rule for the side %s in MAY_IMPORT" % (module, side))
        names = imported_names(module, path)
        graph[module] = set(target for target in (collection_target(name, modules) for name in names)
                            if target and target != module and target in modules)
        if side in STDLIB_ONLY:
            for name in sorted(set(name.split(".")[0] for name in names if not is_stdlib(name))):
                problems.append("%s imports %s: the %s wing imports the standard library only" % (module, name, side))
        for target in sorted(graph[module]):
            if side_of(target) == "modules":
                problems.append("%s imports the module %s: move what they share into a wing" % (module, target))
            elif side in MAY_IMPORT and not allowed(module, target):
                problems.append("%s imports %s: %s may import %s" % (
                    module, target, side, ", ".join((side,) * (side in WINGS) + MAY_IMPORT[side]) or "nothing"))
    problems.extend("import cycle: " + " <-> ".join(component) for component in cycles(graph))
    return problems, graph, modules


def main(argv=None) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=here, help="the collection root (holding plugins/)")
    parser.add_argument("--edges", action="store_true", help="print every import edge")
    args = parser.parse_args(argv)
    problems, graph, modules = check(args.root)
    if args.edges:
        for module in sorted(graph):
            for target in sorted(graph[module]):
                print("%s -> %s" % (module, target))
    edges = sum(len(targets) for targets in graph.values())
    print("plugins: %d files, %d import edges" % (len(modules), edges))
    for problem in problems:
        print("FAIL " + problem)
    if not problems:
        for line in CHECKS:
            print("ok   " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
