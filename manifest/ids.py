"""Stable job IDs: sha256 of a job's canonical content.

The ID covers what changes the result (trainer or command, data by its content, hyper,
seed, resource needs, its workdir by content and its environment's definition) and nothing
that only changes scheduling (name, priority, hosts, timeouts), so editing a priority or
renaming a job keeps its ID and its history.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from manifest.schema import Needs

# bump if the canonical form ever changes. 2: data is the content-pinned URI
# (manifest.dataref), not the publisher's path
ID_VERSION = 2


def canonical(
    *,
    model: str | None,
    command: list[str] | None,
    artifacts: list[str],
    data: str | None,
    hyper: dict[str, Any],
    seed: int,
    needs: Needs,
    own: dict[str, Any] | None = None,
    nodes: int = 1,
) -> bytes:
    """``own``: the job's code and environment (workdir, requirements, lock, python, env),
    only the keys written, so a job without them keeps the ID it always had."""
    doc = {
        "v": ID_VERSION,
        "model": model,
        "command": command,
        "artifacts": sorted(artifacts) if command else [],
        "data": data,
        "hyper": hyper,
        "seed": seed,
        "needs": {
            "require_cuda": needs.require_cuda,
            "min_vram_gib": float(needs.min_vram_gib),
            "min_ram_gib": float(needs.min_ram_gib),
            "min_cores": int(needs.min_cores),
        },
    }
    # left out at their defaults, so the IDs of jobs written before these fields stay the same
    if needs.gpu_count > 1:
        doc["needs"]["gpus"] = needs.gpu_count
    if needs.share_gpu:
        doc["needs"]["share_gpu"] = True
    if nodes > 1:  # the world size changes the result; one host keeps the ID it had
        doc["nodes"] = nodes
    doc.update({k: v for k, v in (own or {}).items() if v})
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def job_id(**content: Any) -> str:
    return hashlib.sha256(canonical(**content)).hexdigest()
