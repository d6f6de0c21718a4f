"""RFC 3339 timestamps as the API server writes them (UTC, "Z"), and back."""
from __future__ import annotations

import calendar
import time


def rfc3339(timestamp: float, digits: int = 0) -> str:
    """"2024-05-01T12:00:00Z"; `digits` 3 or 6 add the fraction (metav1.MicroTime has 6)."""
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp))
    if not digits:
        return text + "Z"
    return text + ".%0*dZ" % (digits, int((timestamp % 1) * 10 ** digits))


def now_rfc3339(offset_s: float = 0) -> str:
    return rfc3339(time.time() + offset_s)


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of a UTC timestamp (the fraction is ignored); ValueError when malformed."""
    return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
