"""A large bundle to S3: the store's verified upload against boto3's `upload_file`, same run.

Makes one incompressible file of --mib MiB (1 GiB by default, a large bundle), starts moto's
S3 server (ThreadedMotoServer, in a child process on loopback, so the server's Python does
not share a GIL with the client being measured), then uploads the file, best of --runs each:
  - store: `S3Store.put_data`, the path every bundle, checkpoint and staged file above
    `SINGLE_PUT_MAX_BYTES` takes: the file hashed first (a wrong sha256 sends nothing),
    then `upload_file`, then the object's checksum of part checksums compared;
  - upload_file: boto3's `upload_file` alone, with the same `TransferConfig` (part size,
    concurrency), `ChecksumAlgorithm="SHA256"` and sha256 metadata, nothing checked on the
    client: what the store's checks cost.
The two alternate within each round (a busy machine then slows both alike); each call
writes a fresh object, the previous one deleted untimed. Client CPU (all threads of this
process) is printed too: it does not depend on what else the machine runs.

Run from the repo root: `python bench/upload.py [--mib 1024] [--runs 5]`.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.timing import best_of, parse_args  # noqa: E402

BUCKET = "bench"
ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def serve(ports, stop) -> None:
    """Run moto's threaded server until `stop` is set; its port goes to `ports`."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    ports.put(server.get_host_and_port()[1])
    stop.wait()
    server.stop()


def write_random(path: Path, mib: int) -> str:
    """`mib` MiB of random bytes (incompressible, like a zstd bundle); their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(mib):
            block = os.urandom(1 << 20)
            digest.update(block)
            f.write(block)
    return digest.hexdigest()


def mib_s(n_bytes: int, secs: float) -> str:
    return f"{n_bytes / secs / (1 << 20):,.0f} MiB/s"


def timed(fn, setup) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds over all its threads) of one call of `fn`."""
    marks: list[float] = []
    wall, _ = best_of(1, fn, setup=lambda: (setup(), marks.append(time.process_time())))
    return wall, time.process_time() - marks[0]


def measure(endpoint: str, path: Path, sha256: str, runs: int) -> dict[str, tuple[float, float]]:
    """{"store" | "upload_file": (best wall s, best client CPU s)} over `runs` rounds.

    The two ways alternate within each round, so a machine busy with other work slows both
    alike rather than whichever happened to run then.
    """
    from boto3.s3.transfer import TransferConfig

    from artifacts.stores import S3Store, s3_client
    from artifacts.stores.s3 import PART_BYTES, SINGLE_PUT_MAX_BYTES, UPLOAD_THREADS
    from core.settings import StoreSettings

    client = s3_client(StoreSettings.from_env({**ENV, "FLEET_S3_ENDPOINT_URL": endpoint}))
    store = S3Store(BUCKET, "runs", client)
    store.ping()
    key = store.data_key(sha256)
    config = TransferConfig(
        multipart_threshold=SINGLE_PUT_MAX_BYTES,
        multipart_chunksize=PART_BYTES,
        max_concurrency=UPLOAD_THREADS,
    )
    extra = {"ChecksumAlgorithm": "SHA256", "Metadata": {"sha256": sha256}}
    ways = {
        "store": lambda: store.put_data(path, sha256),
        "upload_file": lambda: client.upload_file(
            str(path), BUCKET, key, ExtraArgs=extra, Config=config
        ),
    }

    def fresh() -> None:
        client.delete_object(Bucket=BUCKET, Key=key)

    best = {name: (float("inf"), float("inf")) for name in ways}
    for _ in range(runs):
        for name, way in ways.items():
            wall, cpu = timed(way, fresh)
            assert store.has_data(sha256)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    fresh()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    args = parse_args(parser, mib=4, runs=1)

    spawn = multiprocessing.get_context("spawn")
    ports, stop = spawn.Queue(), spawn.Event()
    server = spawn.Process(target=serve, args=(ports, stop), daemon=True)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{ports.get(timeout=60)}"
        with tempfile.TemporaryDirectory(prefix="fleet-bench-upload-") as tmp:
            path = Path(tmp, "bundle.tar.zst")
            sha256 = write_random(path, args.mib)
            size = path.stat().st_size
            print(f"{args.mib} MiB incompressible file, moto S3 at {endpoint}, best of {args.runs}")
            best = measure(endpoint, path, sha256, args.runs)
            (store_s, store_cpu), (boto_s, boto_cpu) = best["store"], best["upload_file"]
            print(
                f"S3Store.put_data  {store_s:.2f} s ({mib_s(size, store_s)}), "
                f"client CPU {store_cpu:.2f} s; "
                "verified against its sha256"
            )
            print(
                f"boto3 upload_file {boto_s:.2f} s ({mib_s(size, boto_s)}), "
                f"client CPU {boto_cpu:.2f} s; "
                "ChecksumAlgorithm=SHA256, nothing checked"
            )
            print(
                f"ratio store / upload_file: {store_s / boto_s:.2f}x wall, "
                f"{store_cpu / boto_cpu:.2f}x client CPU"
            )
    finally:
        stop.set()
        server.join(timeout=30)


if __name__ == "__main__":
    main()
