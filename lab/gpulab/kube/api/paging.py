"""``continue`` tokens of paged lists (``limit``): where the next page starts and the list's resourceVersion."""
from __future__ import annotations

import base64
import json
from typing import Tuple

from .errors import ApiError


def encode_continue(start_key: list, list_rv: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"start": start_key, "rv": list_rv}).encode()).decode()


def decode_continue(token: str) -> Tuple[list, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return list(decoded["start"]), str(decoded["rv"])
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid")
