"""Data staged through the store: what pinning and staging cost, against baselines in the same run.

Starts moto's S3 server (in-process, threaded) and makes one random file of --mib MiB, then:
  - hashing: the loader pinning the file (one job) vs `hashlib.file_digest` of the same file;
  - staging: `fleet.staging.stage` to S3 vs boto3's `upload_file` of the same file (both to
    the same server, fresh keys);
  - re-publish: staging the same manifest again (the bytes are there: a HEAD, nothing sent),
    with the S3 requests counted;
  - a sweep: loading a --points point sweep over that file vs the same sweep with no data
    (the file must be hashed once, not once per point).
Best of --runs each.

Run from the repo root: `python bench/data.py [--mib 256] [--points 100000] [--runs 3]`.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import best_of, parse_args  # noqa: E402


def mib_s(n_bytes: int, secs: float) -> str:
    return f"{n_bytes / secs / (1 << 20):,.0f} MiB/s"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parse_args(parser, mib=2, points=1000, runs=1)

    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request

    from artifacts.stores import S3Store, s3_client
    from core.settings import StoreSettings
    from fleet import staging
    from fleet.manifests import loads

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-data-") as tmp:
            data = Path(tmp, "train.bin")
            size = args.mib << 20
            with open(data, "wb") as f:
                for _ in range(args.mib):
                    f.write(os.urandom(1 << 20))
            manifest_path = Path(tmp, "m.toml")
            one = '[[jobs]]\nname = "a"\ncommand = ["true"]\ndata = "train.bin"\n'
            print(f"{args.mib} MiB file, moto S3 at http://{host}:{port}, best of {args.runs}")

            raw_s, _ = best_of(
                args.runs, lambda: hashlib.file_digest(open(data, "rb"), "sha256").hexdigest()
            )
            pin_s, manifest = best_of(args.runs, lambda: loads(one, str(manifest_path)))
            print(
                f"hash:   file_digest {raw_s:.2f} s ({mib_s(size, raw_s)}); "
                f"fleet pin {pin_s:.2f} s ({mib_s(size, pin_s)}); ratio {pin_s / raw_s:.2f}x"
            )

            client = s3_client(
                StoreSettings.from_env({**env, "FLEET_S3_ENDPOINT_URL": f"http://{host}:{port}"})
            )
            client.create_bucket(Bucket="bench")
            base_s, _ = best_of(
                args.runs, lambda: client.upload_file(str(data), "bench", f"raw/{uuid.uuid4().hex}")
            )
            stores = []

            def fresh_store():
                stores.append(S3Store("bench", f"run-{uuid.uuid4().hex[:8]}", client=client))

            stage_s, report = best_of(
                args.runs,
                lambda: staging.stage(manifest, manifest.jobs, store=stores[-1]),
                setup=fresh_store,
            )
            assert len(report.sent) == 1
            print(
                f"stage:  boto3 upload_file {base_s:.2f} s ({mib_s(size, base_s)}); "
                f"fleet stage {stage_s:.2f} s ({mib_s(size, stage_s)}, "
                f"sha256 verified by the server); ratio {stage_s / base_s:.2f}x"
            )

            seen: collections.Counter = collections.Counter()
            client.meta.events.register(
                "before-call.s3", lambda model, **_: seen.update([model.name])
            )
            again_s, again = best_of(
                args.runs, lambda: staging.stage(manifest, manifest.jobs, store=stores[-1])
            )
            assert again.sent == () and len(again.present) == 1
            per_run = {op: n // args.runs for op, n in seen.items()}
            print(
                f"re-publish staging: {again_s * 1000:.1f} ms, requests per publish {per_run} "
                f"({again_s / stage_s:.4f}x of the first staging)"
            )

            seeds = ", ".join(str(i) for i in range(args.points))
            sweep = (
                '[[jobs]]\nname = "a"\ncommand = ["true"]\n'
                f"{{data}}[jobs.sweep]\nseed = [{seeds}]\n"
            )
            without_s, _ = best_of(
                args.runs, lambda: loads(sweep.format(data=""), str(manifest_path))
            )
            with_s, m = best_of(
                args.runs,
                lambda: loads(sweep.format(data='data = "train.bin"\n'), str(manifest_path)),
            )
            assert len(m.jobs) == args.points and len(m.data_sources) == 1
            print(
                f"sweep:  {args.points:,} points load without data {without_s:.2f} s, "
                f"with data {with_s:.2f} s (one hash: {pin_s:.2f} s); "
                f"ratio {with_s / without_s:.2f}x"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
