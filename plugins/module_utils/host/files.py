# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Host files: the one reader (read_bytes, read_text) and the one atomic writer (write_atomic) of this collection.

The writer's temporary name is one directory scanners skip: AnsibleModule.atomic_move may fall back to a
temporary file named `.ansible_tmpXXXX<name>` in the target directory, which a CDI or containerd reader globbing
`*.yaml`/`*.toml` would load half-written. Here the temporary file is `.<name>.XXXX.tmp` in the same directory,
created mode 0600, fsynced, given its mode, then renamed over the target.
"""

from __future__ import annotations

import os
import tempfile


def read_bytes(path, strict=False):
    """The file's bytes; None when it does not exist.

    Any other failure to read (no permission, a directory) also gives None, unless strict: then it raises OSError.
    """
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        if strict and os.path.exists(path):
            raise
        return None


def read_text(path, strict=False):
    """The file's text, decoded as UTF-8 (UnicodeDecodeError when it is not), line ends as stored; None as for
    read_bytes."""
    data = read_bytes(path, strict=strict)
    return None if data is None else data.decode("utf-8")


def missing_dirs(directory):
    """The directories to create for directory to exist, outermost first."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.insert(0, directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return missing


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, data, mode=0o644, dir_mode=0o755):
    """Write bytes to path via '.NAME.XXXX.tmp' and a rename; missing parent directories are created."""
    directory = os.path.dirname(path) or "."
    for missing in missing_dirs(directory):
        os.mkdir(missing)
        os.chmod(missing, dir_mode)
    fd, tmp_path = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    fsync_dir(directory)
