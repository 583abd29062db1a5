"""Manifest text for tests."""

from __future__ import annotations

import json


def command_job(name: str, argv: list[str], **keys) -> str:
    """One ``[[jobs]]`` entry running ``argv`` that keeps ``out/*``, with any other ``keys``."""
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = {json.dumps(argv)}\nartifacts = ["out/*"]\n'
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    )
