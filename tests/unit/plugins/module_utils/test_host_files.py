# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The host wing's one reader and one atomic writer, on real files under tmp_path."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import files


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_a_file_is_read_as_bytes_and_as_utf8_text_with_its_line_ends(tmp_path):
    path = tmp_path / "flags.env"
    path.write_bytes(u"KUBELET_ARGS=--root-dir=/data/kubelet é\r\n".encode("utf-8"))
    assert files.read_bytes(str(path)) == u"KUBELET_ARGS=--root-dir=/data/kubelet é\r\n".encode("utf-8")
    assert files.read_text(str(path)) == u"KUBELET_ARGS=--root-dir=/data/kubelet é\r\n"


@pytest.mark.parametrize("strict", [False, True])
def test_a_missing_file_or_a_dangling_link_reads_as_none(tmp_path, strict):
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "dangling"))
    for path in (tmp_path / "missing", tmp_path / "no-dir" / "missing", tmp_path / "dangling"):
        assert files.read_bytes(str(path), strict=strict) is None
        assert files.read_text(str(path), strict=strict) is None


def test_a_path_that_exists_but_cannot_be_read_is_none_unless_strict(tmp_path):
    assert files.read_text(str(tmp_path)) is None  # a directory
    with pytest.raises(OSError):
        files.read_text(str(tmp_path), strict=True)


def test_text_that_is_not_utf8_raises(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"name = \"caf\xe9\"\n")
    with pytest.raises(UnicodeDecodeError):
        files.read_text(str(path))


def test_write_atomic_creates_the_directories_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    files.write_atomic(str(path), b"first\n", mode=0o600, dir_mode=0o750)
    assert path.read_bytes() == b"first\n" and mode_of(path) == 0o600
    assert mode_of(tmp_path / "etc") == 0o750 and mode_of(tmp_path / "etc" / "cdi") == 0o750
    files.write_atomic(str(path), b"second\n")
    assert path.read_bytes() == b"second\n" and mode_of(path) == 0o644
    assert os.listdir(str(path.parent)) == ["nvidia.yaml"]


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_bytes(b"old\n")

    def refused_rename(source, target):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(files.os, "replace", refused_rename)
    with pytest.raises(OSError):
        files.write_atomic(str(path), b"new\n")
    assert path.read_bytes() == b"old\n" and os.listdir(str(tmp_path)) == ["config.toml"]
