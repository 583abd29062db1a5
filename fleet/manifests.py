"""Load a manifest as publish sees it: data pinned to its bytes (local files hashed, S3
asked), and every job checked to route somewhere. What `fleet publish`, the local fleet and
the benches read: ``manifest.loader`` with the artifacts and routing layers' parts passed in."""

from __future__ import annotations

import os
from pathlib import Path

from artifacts.identity import DataResolver
from manifest import loader
from manifest.edges import Published
from manifest.schema import Manifest
from routing.reach import route_problems


def loads(
    text: str,
    path: str = loader.NO_FILE,
    data: DataResolver | None = None,
    published: Published | None = None,
) -> Manifest:
    """Validate manifest text; ``data`` pins its data (a fresh DataResolver when None);
    ``published`` resolves edges to names published before (``fleet.published``)."""
    data = DataResolver() if data is None else data
    if path != loader.NO_FILE:
        data.manifest = Path(path).resolve()  # never its own job's content (artifacts.workdir)
    return loader.loads(text, path, pin_data=data, check_route=route_problems, published=published)


def load(
    path: str | os.PathLike,
    data: DataResolver | None = None,
    published: Published | None = None,
) -> Manifest:
    """Read and validate the manifest file at ``path``; raises ManifestError."""
    data = DataResolver() if data is None else data
    data.manifest = Path(path).resolve()  # never its own job's content (artifacts.workdir)
    return loader.load(path, pin_data=data, check_route=route_problems, published=published)
