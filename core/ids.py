"""How fleet shows a long hex identifier (a job ID, a sha256 digest) to people."""

from __future__ import annotations

from core import constants as C


def short_id(value: str) -> str:
    """``value`` cut to ``C.SHORT_ID_CHARS`` characters, the one short form in logs, messages
    and tables (``fleet`` verbs accept any unique prefix back)."""
    return value[: C.SHORT_ID_CHARS]
