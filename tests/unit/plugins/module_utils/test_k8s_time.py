# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_micro_time, format_time, parse_time


def test_time_micro_time_and_offsets():
    assert parse_time("2026-12-03T03:11:53Z") == 1796267513.0
    assert parse_time("2026-12-03T03:13:48.600102Z") == 1796267628.600102
    assert parse_time("2026-12-03T03:13:29.214392+00:00") == 1796267609.214392
    assert parse_time("2026-12-03T05:11:53+02:00") == 1796267513.0
    assert parse_time("") is None and parse_time(None) is None and parse_time("yesterday") is None


def test_round_trip():
    assert format_time(1796267513.9) == "2026-12-03T03:11:53Z"
    assert format_micro_time(1796267628.600102) == "2026-12-03T03:13:48.600102Z"
    assert abs(parse_time(format_micro_time(1796267628.25)) - 1796267628.25) < 1e-6
