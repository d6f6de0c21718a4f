#!/usr/bin/env python3
"""`make tree`: mirror the collection content into DEST, in Python (no external copy tool to install).

Copies what changed (size or mtime differs), keeps modes and mtimes, copies symlinks as symlinks, and removes
from DEST what the source no longer has. Excluded paths are neither copied nor removed (DEST/tests/output keeps
ansible-test's results).
    usage: hack/sync-tree.py SOURCE DEST
"""
import fnmatch
import os
import shutil
import sys

# anchored at the source root
EXCLUDED_PATHS = {".venv", ".tree", "lab", "lab-state", ".ci", "hack", "benchmarks", "tests/output"}
# matched against the name at any depth
EXCLUDED_NAMES = [".git", "__pycache__", ".pytest_cache", ".venv-*"]
# copied although under an excluded path: the import check that tests/unit/test_module_utils_imports.py runs
KEPT_PATHS = {"hack/check_module_utils_imports.py", "hack/import_graph.py"}


def excluded(relative_path: str) -> bool:
    if any(kept == relative_path or kept.startswith(relative_path + "/") for kept in KEPT_PATHS):
        return False
    name = os.path.basename(relative_path)
    # the parent test matters only inside an excluded folder walked for a kept file
    return relative_path in EXCLUDED_PATHS or os.path.dirname(relative_path) in EXCLUDED_PATHS \
        or any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED_NAMES)


def same_file(source: str, dest: str) -> bool:
    if os.path.islink(source) or os.path.islink(dest) or not os.path.isfile(dest):
        return False
    source_stat, dest_stat = os.stat(source), os.stat(dest)
    return (source_stat.st_size, int(source_stat.st_mtime)) == (dest_stat.st_size, int(dest_stat.st_mtime)) \
        and source_stat.st_mode == dest_stat.st_mode


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def sync(source_root: str, dest_root: str) -> None:
    for directory, subdirs, files in os.walk(source_root):
        relative_dir = os.path.relpath(directory, source_root)
        relative_dir = "" if relative_dir == "." else relative_dir
        dest_dir = os.path.join(dest_root, relative_dir)
        subdirs[:] = [name for name in subdirs if not excluded(os.path.join(relative_dir, name))]
        wanted = set()
        for name in subdirs:
            wanted.add(name)
            source, dest = os.path.join(directory, name), os.path.join(dest_dir, name)
            if os.path.islink(source):  # os.walk does not descend into symlinked directories
                files.append(name)
            elif os.path.lexists(dest) and (os.path.islink(dest) or not os.path.isdir(dest)):
                remove(dest)
        subdirs[:] = [name for name in subdirs if not os.path.islink(os.path.join(directory, name))]
        os.makedirs(dest_dir, exist_ok=True)
        for name in files:
            relative = os.path.join(relative_dir, name)
            if excluded(relative):
                continue
            wanted.add(name)
            source, dest = os.path.join(directory, name), os.path.join(dest_dir, name)
            if same_file(source, dest):
                continue
            if os.path.lexists(dest):
                remove(dest)
            if os.path.islink(source):
                os.symlink(os.readlink(source), dest)
            else:
                shutil.copy2(source, dest)
        for name in os.listdir(dest_dir):
            if name not in wanted and not excluded(os.path.join(relative_dir, name)):
                remove(os.path.join(dest_dir, name))
        shutil.copystat(directory, dest_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sync(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
