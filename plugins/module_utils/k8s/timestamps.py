# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Kubernetes timestamps: ``metav1.Time`` (RFC 3339, seconds) and ``metav1.MicroTime`` (microseconds), as epoch
seconds (float) and back."""

from __future__ import annotations

import calendar
import re
import time

_TIME = re.compile(r'^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:?\d\d)$')


def parse_time(text):
    """Epoch seconds of an RFC 3339 timestamp (``2026-12-03T03:00:00Z``, ``...00.123456Z``, ``+02:00``);
    None for None, an empty or unparsable value."""
    if not text or not isinstance(text, str):
        return None
    match = _TIME.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if match.group(7):
        seconds += float('0' + match.group(7))
    zone = match.group(8)
    if zone not in ('Z', 'z'):
        sign = 1 if zone[0] == '+' else -1
        digits = zone[1:].replace(':', '')
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return float(seconds)


def format_time(epoch):
    """``metav1.Time``: RFC 3339 in UTC with whole seconds."""
    if epoch is None:
        return None
    return _utc(int(epoch)) + 'Z'


def format_micro_time(epoch):
    """``metav1.MicroTime`` (what a Lease's ``acquireTime``/``renewTime`` hold): RFC 3339 with microseconds."""
    if epoch is None:
        return None
    whole, micros = divmod(int(round(epoch * 1e6)), 1000000)
    return '%s.%06dZ' % (_utc(whole), micros)


def _utc(whole_seconds):
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(whole_seconds))
