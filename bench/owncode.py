"""Bring your own code: what a workdir's staging and a job's environment cost.

  - staging: a workdir of --files small files (1-4 KiB, in nested folders): the dry run
    (select + hash, nothing sent), a publish's staging to a file:// store, a re-publish
    (the tar is there: one stat), with files, bytes and the tar's size;
  - environments: the example's requirement served from local wheels (no network), built
    cold (empty environment and uv caches), again with uv's cache warm (a new digest), and
    reused (the environment cached: what a second job on the host pays); the cache's size.

Run from the repo root: `python bench/owncode.py [--files 3000] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from artifacts.identity import DataResolver  # noqa: E402
from artifacts.pyenv import EnvCache, EnvSpec  # noqa: E402
from artifacts.stores import open_store_at  # noqa: E402
from bench.timing import parse_args  # noqa: E402
from fleet import staging  # noqa: E402
from fleet.manifests import load  # noqa: E402
from tests.fixtures.wheels import make_wheel, offline_index  # noqa: E402


def workdir(root: Path, n: int) -> Path:
    rng = random.Random(0)
    for i in range(n):
        f = root / "proj" / f"pkg{i % 40}" / f"sub{i % 7}" / f"m{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(rng.randbytes(rng.randint(1024, 4096)))
    (root / "m.toml").write_text(
        '[[jobs]]\nname = "b"\nworkdir = "proj"\ncommand = ["python", "m0.py"]\n'
    )
    return root / "m.toml"


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def staging_figures(tmp: Path, files: int, runs: int) -> None:
    manifest_path = workdir(tmp, files)
    dry = min(timed(lambda: load(manifest_path, DataResolver()))[0] for _ in range(runs))
    m = load(manifest_path, DataResolver())
    [src] = m.data_sources.values()
    size = sum(p.stat().st_size for _, p in src.files)
    print(
        f"workdir: {len(src.files)} files, {size / 2**20:.1f} MiB, tar {src.size / 2**20:.1f} MiB"
    )
    print(f"  dry run (select + hash, nothing sent): {dry:.2f} s (best of {runs})")
    sends = []
    for i in range(runs):
        store = open_store_at((tmp / f"store{i}").as_uri())
        sends.append(timed(lambda store=store: staging.stage(m, m.jobs, store=store))[0])
    again = min(timed(lambda: staging.stage(m, m.jobs, store=store))[0] for _ in range(runs))
    print(
        f"  publish (load + stage to a file:// store): {dry + min(sends):.2f} s; "
        f"re-publish staging (already stored): {again * 1e6:.0f} µs"
    )


def env_figures(tmp: Path) -> None:
    wheels = tmp / "wheels"
    make_wheel(wheels, "tabulate", "0.9.0", "def tabulate(rows, headers=()):\n    return ''\n")
    make_wheel(wheels, "fleettoy", "1.0")
    cache = EnvCache(tmp / "pyenv", 1 << 34, env={**os.environ, **offline_index(wheels)})
    cold = timed(lambda: _use(cache, EnvSpec(("tabulate==0.9.0",))))[0]
    warm_uv = timed(lambda: _use(cache, EnvSpec(("tabulate==0.9.0", "fleettoy==1.0"))))[0]
    reuse = min(timed(lambda: _use(cache, EnvSpec(("tabulate==0.9.0",))))[0] for _ in range(5))
    sizes = cache.sizes()
    uv_cache = sum(p.stat().st_size for p in (tmp / "pyenv" / "uv-cache").rglob("*") if p.is_file())
    print(
        f"environment (offline wheels): cold build {cold:.2f} s, new digest with uv's cache warm "
        f"{warm_uv:.2f} s, reused {reuse * 1000:.0f} ms"
    )
    print(
        f"  cache: {len(sizes)} environments, {sum(sizes.values()) / 1024:.0f} KiB "
        f"({', '.join(f'{v / 1024:.0f}' for v in sizes.values())} KiB each), "
        f"uv cache {uv_cache / 1024:.0f} KiB"
    )


def _use(cache: EnvCache, spec: EnvSpec) -> None:
    with cache.use(spec):
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    args = parse_args(ap, files=50, runs=1)
    with tempfile.TemporaryDirectory(prefix="fleet-owncode-") as tmp:
        staging_figures(Path(tmp), args.files, args.runs)
        env_figures(Path(tmp))


if __name__ == "__main__":
    main()
