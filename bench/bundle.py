"""Bundle throughput against `tar | zstd -T0 -3 | sha256sum` on a checkpoint-like tree.

Run from the repo root: `python bench/bundle.py [--mib 256] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from artifacts.bundle import bundle, collect  # noqa: E402
from bench.timing import best_of, parse_args  # noqa: E402

LEVELS = (1, 3, 6, 10)
SHARD_MIB = 32  # weight shard size, like a sharded safetensors checkpoint
MIB = 1 << 20


def make_checkpoint(root: Path, mib: int) -> int:
    """Write fp16-precision weights stored as float32 plus small config files."""
    rng = np.random.default_rng(0)
    left, shard = mib * MIB, 0
    while left > 0:
        n = min(SHARD_MIB * MIB, left)
        weights = rng.standard_normal(n // 4, dtype=np.float32) * 0.02
        weights.astype(np.float16).astype(np.float32).tofile(root / f"model-{shard:05d}.bin")
        left, shard = left - n, shard + 1
    (root / "config.json").write_text(json.dumps({"hidden": 4096, "layers": 32}, indent=2))
    (root / "optimizer_state.json").write_text(json.dumps({"step": 1000, "lr": 3e-4}))
    (root / "train.log").write_text(
        "".join(f"step {i} loss {1 / (i + 1):.6f}\n" for i in range(5000))
    )
    return sum(p.stat().st_size for p in root.iterdir())


def baseline(src: Path) -> None:
    cmd = f"tar -cf - -C '{src}' . | zstd -T0 -3 -q | sha256sum"
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)


def baseline_size(src: Path) -> int:
    """Compressed size of the baseline, measured outside the timed runs."""
    cmd = f"tar -cf - -C '{src}' . | zstd -T0 -3 -q | wc -c"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], check=True, capture_output=True, text=True
    )
    return int(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parse_args(parser, mib=2, runs=1)
    if shutil.which("zstd") is None:
        print("zstd CLI not on PATH; install it (apt-get update && apt-get install -y zstd)")
        return 2
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        src, out = Path(tmp, "ckpt"), Path(tmp, "out")
        src.mkdir(), out.mkdir()
        total = make_checkpoint(src, args.mib)
        files = collect(src, [])
        base_s, _ = best_of(args.runs, lambda: baseline(src))
        base_size = baseline_size(src)
        base_mbs = total / MIB / base_s
        print(f"input {total / MIB:.0f} MiB in {len(files)} files, best of {args.runs}")
        print(
            f"baseline tar|zstd -T0 -3|sha256sum: {base_mbs:7.1f} MB/s  "
            f"ratio {total / base_size:.3f}"
        )
        ratios = {}
        for level in LEVELS:
            dest = out / f"l{level}.tar.zst"
            secs, res = best_of(
                args.runs,
                lambda dest=dest, level=level: bundle(files, {"bench": True}, dest, level=level),
            )
            mbs = total / MIB / secs
            ratios[level] = mbs / base_mbs
            print(
                f"bundle level {level:2d}: {mbs:7.1f} MB/s  ratio {total / res.size:.3f}  "
                f"{ratios[level]:.2f}x baseline"
            )
    print(f"bundle level 3: {ratios[3]:.2f}x baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
