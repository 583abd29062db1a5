"""What a job holding several GPUs must be given, checked on its own report (multi_gpu_job.py).

Shared by the GPU suite (real GPUs, tests/gpu/test_multi_gpu.py) and the e2e suite (simulated
GPUs, tests/e2e/test_pools.py), so the part that needs no GPU runs in CI too.
"""

from __future__ import annotations

JOB = __import__("pathlib").Path(__file__).with_name("multi_gpu_job.py")


def manifest(python: str, name: str, gpus: int, cores: int, *extra: str) -> str:
    args = ", ".join(f'"{a}"' for a in (python, str(JOB), "1", *extra))
    return (
        f'[[jobs]]\nname = "{name}"\ncommand = [{args}]\nartifacts = ["out/*"]\n'
        f"gpus = {gpus}\nmin_cores = {cores}\n"
    )


def problems(report: dict, gpus: int, cores: int, uuids: set[str] | None = None) -> list[str]:
    """What is wrong with what the job was given, as sentences; [] when nothing is.

    ``uuids``: the host's GPU UUIDs, where the host has real ones (CUDA must then show the job
    exactly the devices it holds, by UUID)."""
    out = []
    visible = [v for v in report["visible"].split(",") if v]
    if report["gpus"] != str(gpus) or len(set(visible)) != gpus:
        out.append(
            f"FLEET_GPUS={report['gpus']}, CUDA_VISIBLE_DEVICES={report['visible']!r}: "
            f"expected {gpus} distinct GPUs"
        )
    if uuids is not None:
        if not set(visible) <= uuids or not all(v.startswith("GPU-") for v in visible):
            out.append(
                f"CUDA_VISIBLE_DEVICES={report['visible']!r} does not name the host's GPUs by UUID"
            )
        if report.get("cuda_uuids") is not None and report["cuda_uuids"] != visible:
            out.append(f"CUDA shows {report['cuda_uuids']}, not the GPUs it was given ({visible})")
    pinned = sorted(int(c) for c in report["affinity_env"].split(",") if c)
    if report["cores"] != str(cores) or len(pinned) != cores or report["affinity"] != pinned:
        out.append(
            f"FLEET_CORES={report['cores']}, FLEET_CPU_AFFINITY={report['affinity_env']!r}, "
            f"runs on {report['affinity']}: expected pinned to {cores} cores"
        )
    if "supervisor.py" not in report["parent"] or report["pgid"] != report["ppid"]:
        out.append(
            f"its parent is {report['parent']!r} (pid {report['ppid']}), "
            f"its group {report['pgid']}: "
            "expected tasks/supervisor.py leading its process group"
        )
    if report["grandchild_pgid"] != report["pgid"]:
        out.append("its own children left its process group: a cancel would not reach them")
    return out
