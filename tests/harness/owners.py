"""What the one-owner tests look for in source: a Redis hash read by hand."""

from __future__ import annotations

import ast
from collections.abc import Callable

HASH_READS = {"hget", "hmget", "hgetall", "hexists", "exists", "hkeys", "hvals", "hlen"}


def called(node: ast.expr) -> str:
    """The name a call calls (``job_key`` of ``job_key(id)`` or ``x.job_key(id)``), else ''."""
    if not isinstance(node, ast.Call):
        return ""
    return getattr(node.func, "id", getattr(node.func, "attr", ""))


def raw_hash_reads(tree: ast.AST, names_the_hash: Callable[[ast.expr], bool]) -> list[int]:
    """Lines that read a hash by hand, ``client.hget(KEY, ...)`` and the like, where
    ``names_the_hash(KEY)`` says KEY is the hash looked for."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in HASH_READS
        and node.args
        and names_the_hash(node.args[0])
    ]
