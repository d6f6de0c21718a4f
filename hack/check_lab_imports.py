#!/usr/bin/env python3
"""Import-graph check of the fleet twin (lab/gpulab), standard library only.

Fails (exit 1) on
- an import cycle between gpulab modules (imports inside functions count: they are dependencies too);
- a module of gpulab.kube.api importing gpulab.kube.sim (the API machinery never depends on the simulation);
- any gpulab module but a test helper importing a test helper (gpulab.kube.testing, gpulab.testkit, test_*,
  conftest).
Prints the graph's size, the rules checked and the files over the size yardstick (information only).

Usage: python hack/check_lab_imports.py [--lab DIR] [--edges]
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

from import_graph import cycles

PACKAGE = "gpulab"
API = "gpulab.kube.api"
SIM = "gpulab.kube.sim"
TESTKIT = "gpulab.testkit"   # what lab/tests and benchmarks/ share
LINES_YARDSTICK = 600
YARDSTICK_EXCEPTIONS = {"gpulab.nvidia.smi"}   # embedded whole in the fake runfile as nvidia-smi


def is_test_helper(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "testing" or last.startswith("test_") or last == "conftest" or in_package(module, TESTKIT)


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_files(lab_dir: str) -> dict:
    """module name -> path of every .py file under lab_dir/gpulab."""
    modules = {}
    for root, dirs, files in os.walk(os.path.join(lab_dir, PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, lab_dir)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: str, modules: dict) -> set:
    """The gpulab modules ``module`` imports (``from pkg import name`` counts pkg.name when it is a module)."""
    with open(path, encoding="utf-8") as stream:
        tree = ast.parse(stream.read(), path)
    is_package = os.path.basename(path) == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, is_package, node)
            names = [target + "." + alias.name if target + "." + alias.name in modules else target
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:   # `import gpulab.kube.api.store` -> that module
                name = name.rpartition(".")[0]
            if name and in_package(name, PACKAGE) and name != module:
                found.add(name)
    return found


def check(lab_dir: str) -> tuple:
    """(problems, graph, modules)."""
    modules = module_files(lab_dir)
    graph = {module: imports_of(module, path, modules) for module, path in modules.items()}
    problems = ["import cycle: " + " <-> ".join(component) for component in cycles(graph)]
    for module in sorted(graph):
        for target in sorted(graph[module]):
            if in_package(module, API) and in_package(target, SIM):
                problems.append("%s imports %s: the API machinery must not depend on the simulation" % (module, target))
            if is_test_helper(target) and not is_test_helper(module):
                problems.append("%s imports the test helper %s" % (module, target))
    return problems, graph, modules


def main(argv=None) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lab", default=os.path.join(here, "lab"), help="folder holding the gpulab package")
    parser.add_argument("--edges", action="store_true", help="print every import edge")
    args = parser.parse_args(argv)
    problems, graph, modules = check(args.lab)
    if args.edges:
        for module in sorted(graph):
            for target in sorted(graph[module]):
                print("%s -> %s" % (module, target))
    edges = sum(len(targets) for targets in graph.values())
    print("lab/gpulab: %d modules, %d import edges" % (len(modules), edges))
    for problem in problems:
        print("FAIL " + problem)
    if not problems:
        print("ok   no import cycle")
        print("ok   %s imports nothing from %s" % (API, SIM))
        print("ok   no module but a test helper imports a test helper")
    for module, path in sorted(modules.items()):
        with open(path, encoding="utf-8") as stream:
            lines = sum(1 for _ in stream)
        if lines > LINES_YARDSTICK and module not in YARDSTICK_EXCEPTIONS:
            print("note %s has %d lines (yardstick %d)" % (os.path.relpath(path, args.lab), lines, LINES_YARDSTICK))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
