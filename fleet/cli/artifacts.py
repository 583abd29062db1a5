"""Artifact verbs: `fleet artifacts` (list, optionally verify) and `fleet get JOB` (download)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from rich.table import Table
from rich.text import Text

from core.errors import DigestMismatch, FleetError
from core.ids import short_id
from core.registry import FLEET_STORE_URL
from fleet.cli.common import (
    EXIT_FAILED,
    console,
    emit,
    job_id_for,
    json_option,
    plain,
    records,
    say,
)
from fleet.query import artifacts as A


def _current(v: A.ArtifactsView) -> A.ArtifactsView:
    """Mark the bundles the job records name now, when Redis answers.

    A listing needs only the store.
    """
    import redis

    from fleet.cli.common import redis_client
    from fleet.query.jobs import read_rows

    ids = sorted({r.job_id for r in v.rows if r.job_id})
    try:
        rows = read_rows(redis_client(), ids) if ids else []
    except (redis.RedisError, SystemExit):
        return v
    return A.mark_current(v, {r.job_id: (r.artifact or {}).get("sha256", "") for r in rows})


def _store_name(url: str | None) -> str:
    from core.constants import DEFAULT_STORE_DIR

    default = f"{Path(DEFAULT_STORE_DIR).resolve().as_uri()} (the default)"
    return url or FLEET_STORE_URL.value() or default


def cmd_artifacts(args) -> int:
    from artifacts.stores import open_store_at

    v = _current(A.listing(open_store_at(args.store), verify=args.verify))
    for w in v.warnings:
        say(f"warning: {w}")

    def human() -> None:
        console.print(artifacts_table(v, _store_name(args.store)))
        if not args.verify:
            console.print(
                "not re-hashed (that reads every bundle); add --verify to check each sha256",
                style="dim",
            )

    emit(args, v.to_dict, human)
    return 0 if v.ok else EXIT_FAILED


def artifacts_table(v: A.ArtifactsView, where: str) -> Table:
    title = f"{len(v.rows)} artifact(s) in {where}"
    if v.others:
        title += f" ({v.others} more of other jobs: fleet artifacts lists them)"
    table = Table(title=title)
    for col in ("job", "kind", "sha256", "size", "verified", "run", "uri"):
        table.add_column(col, overflow="fold")
    for r in v.rows:
        verified = {
            True: Text("sha256 ok", style="green"),
            False: Text("MISMATCH", style="bold red"),
            None: Text("-"),
        }[r.verified]
        run = {
            True: Text("current", style="bold"),
            False: Text("older", style="dim"),
            None: Text("-"),
        }[r.current]
        table.add_row(
            *plain(
                r.name or "?", r.kind, short_id(r.sha256), "" if r.size is None else f"{r.size:,}"
            ),
            verified,
            run,
            Text(r.uri),
        )
    return table


def file_stem(name: str) -> str:
    """A job name as a file name: ``gbt[seed=1,opt="adam"]`` -> ``gbt.seed=1,opt=_adam_``."""
    stem = re.sub(r"\[(.*)\]$", r".\1", name)
    return re.sub(r"[^A-Za-z0-9._,=+-]", "_", stem).strip(".") or "job"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cmd_get(args) -> int:
    from artifacts.bundle import extract
    from artifacts.stores import open_store_at

    rec = records()
    job = rec.get(job_id_for(rec, args.job, "get"))
    loc = A.of_job(job)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(job.name)
    bundle = out_dir / f"{stem}.tar.zst"
    target = out_dir / stem
    if args.extract and target.exists():
        raise FleetError(f"{target} already exists; remove it or choose another -o DIR")
    try:  # get_bundle hashes the download and keeps it only if it matches the record's sha256
        open_store_at(loc.store_url).get_bundle(loc.kind, loc.sha256, bundle)
    except DigestMismatch as e:
        raise DigestMismatch(
            f"refused {job.name}'s bundle, nothing was written to {out_dir}: {e}"
        ) from e
    bundle.chmod(0o666 & ~_umask())  # downloaded through a private temp file
    files: list[str] = []
    if args.extract:
        tmp = Path(tempfile.mkdtemp(prefix=f".{stem}.", suffix=".partial", dir=out_dir))
        try:
            files = [p.relative_to(tmp).as_posix() for p in extract(bundle, tmp)]
            tmp.chmod(0o777 & ~_umask())
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    report = {
        "job_id": job.job_id,
        "name": job.name,
        "bundle": str(bundle),
        "sha256": loc.sha256,
        "size": bundle.stat().st_size,
        "verified": True,
        "source": (job.artifact or {}).get("uri"),
        "extracted_to": str(target) if args.extract else None,
        "files": files,
    }

    def human() -> None:
        console.print(
            f"{bundle} ({report['size']:,} bytes), sha256 {short_id(loc.sha256)}… verified"
        )
        if args.extract:
            console.print(
                f"extracted {len(files)} file(s) to {target}/: {', '.join(files[:8])}"
                + (" …" if len(files) > 8 else ""),
            )

    return emit(args, report, human)


def register(sub) -> None:
    s = sub.add_parser("artifacts", help="list artifacts in the store (--verify re-hashes each)")
    s.add_argument("--store", default=None, help="store URL (default: FLEET_STORE_URL)")
    s.add_argument(
        "--verify", action="store_true", help="re-hash every bundle (on S3: downloads each)"
    )
    s.add_argument("--no-verify", dest="verify", action="store_false", help="the default")
    json_option(s, "the artifacts and any warnings as JSON")
    s.set_defaults(fn=cmd_artifacts)
    s = sub.add_parser(
        "get", help="download a job's bundle, verify its sha256, optionally extract it"
    )
    s.add_argument("job", help="job name, ID, or ID prefix (4+ characters)")
    s.add_argument(
        "-o", "--output", default=".", metavar="DIR", help="where to put it (default: here)"
    )
    s.add_argument(
        "--extract", "-x", action="store_true", help="also unpack it into DIR/<job name>/"
    )
    json_option(s, "where it went, its sha256 and the files extracted, as JSON")
    s.set_defaults(fn=cmd_get)
