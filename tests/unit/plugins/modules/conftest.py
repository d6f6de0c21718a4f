# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fixtures the module tests share."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(name="listener")
def fixture_listener():
    """A port that accepts connections: any request the module sent would be seen there."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    yield server
    server.close()
