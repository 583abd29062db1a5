"""Resource needs are bounded: one above what any host can have (a unit slip, a stray
exponent) is a manifest error at its line naming the bound; one under the bound but above
every live host is queued with a feasibility warning, as before."""

import pytest

from core.constants import MAX_CORES, MAX_RAM_GIB, MAX_VRAM_GIB
from fleet.feasibility import infeasible, messages
from fleet.manifests import loads
from fleet.publish import plan
from routing.capability import Capability
from routing.explain import HostFacts
from routing.tiers import DEFAULT_TIERS, route
from tests.unit.manifest_cases import COMMAND, GBT, job_of, only_problem, write

CUDA = "require_cuda = true\n"


def test_the_bounds_are_64_tib_of_ram_4_tib_of_vram_and_64_ki_cores():
    assert (MAX_RAM_GIB, MAX_VRAM_GIB, MAX_CORES) == (65536, 4096, 65536)


@pytest.mark.parametrize(
    "tail, line, field, message, fix",
    [
        (
            "min_ram_gib = 1e308\n",
            5,
            "min_ram_gib",
            "1e+308 is above 65536 GiB of RAM, more than any host has",
            "write it in GiB, at most 65536",
        ),
        (
            CUDA + "min_vram_gib = 1e308\n",
            6,
            "min_vram_gib",
            "1e+308 is above 4096 GiB of VRAM on one device, more than any host has",
            "write it in GiB, at most 4096",
        ),
        (
            "min_cores = 9223372036854775807\n",
            5,
            "min_cores",
            "9223372036854775807 is above 65536 cores, more than any host has",
            "write it in logical cores, at most 65536",
        ),
        (
            "min_ram_gib = 65536.5\n",
            5,
            "min_ram_gib",
            "65536.5 is above 65536 GiB of RAM, more than any host has",
            "write it in GiB, at most 65536",
        ),
    ],
)
def test_a_need_above_what_any_host_has_is_an_error_at_its_line_naming_the_bound(
    tmp_path, tail, line, field, message, fix
):
    p = only_problem(tmp_path, GBT + tail)
    assert (p.line, p.field, p.message, p.fix) == (line, f"jobs[0].{field}", message, fix)


def test_an_absurd_need_of_a_prefer_cuda_job_is_an_error_too(tmp_path):
    p = only_problem(tmp_path, COMMAND + "prefer_cuda = true\nmin_vram_gib = 5000\n")
    assert (p.line, p.field) == (5, "jobs[0].min_vram_gib") and "above 4096 GiB" in p.message


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
@pytest.mark.parametrize("key", ["min_ram_gib", "min_vram_gib"])
def test_a_need_that_is_not_finite_is_an_error_at_its_line(tmp_path, key, value):
    p = only_problem(tmp_path, GBT + CUDA + f"{key} = {value}\n")
    assert (p.line, p.field, p.message) == (
        6,
        f"jobs[0].{key}",
        f"must be a finite number, got {value}",
    )


def test_publishing_an_absurd_need_exits_2_naming_the_file_line_field_and_bound(tmp_path, capsys):
    from fleet.cli import main

    path = write(tmp_path, GBT + "min_ram_gib = 1e308\n")
    assert main(["publish", str(path), "--dry-run"]) == 2
    # the console wraps a line that a long temp path makes long: compare without the wrapping
    err = "".join(capsys.readouterr().err.split())
    said = (
        f"{path}:5: jobs[0].min_ram_gib: 1e+308 is above 65536 GiB of RAM, more than any host has"
    )
    assert "".join(said.split()) in err


def test_a_tier_floor_above_what_any_host_has_is_an_error_at_its_line(tmp_path):
    p = only_problem(tmp_path, "[tiers.huge]\nmin_ram_gib = 1e12\n" + GBT)
    assert (p.line, p.field, p.message) == (
        2,
        "tiers.huge.min_ram_gib",
        "1e+12 is above 65536 GiB of RAM, more than any host has",
    )


@pytest.mark.parametrize(
    "tail, queue",
    [
        (f"min_ram_gib = {MAX_RAM_GIB}\n", f"cpu.ram{MAX_RAM_GIB}"),
        (f"min_cores = {MAX_CORES}\n", f"cpu.cores{MAX_CORES}"),
        (CUDA + f"min_vram_gib = {MAX_VRAM_GIB}\n", f"cuda.vram{MAX_VRAM_GIB}"),
    ],
)
def test_a_need_at_the_bound_is_accepted_and_goes_to_its_need_queue(tmp_path, tail, queue):
    assert route(job_of(tmp_path, GBT + tail), DEFAULT_TIERS, {}).queue == queue


def test_a_large_need_under_the_bound_is_queued_with_a_feasibility_warning_not_an_error(tmp_path):
    m = loads('[[jobs]]\nname = "big"\ncommand = ["true"]\nmin_ram_gib = 4096\n', "m.toml")
    hosts = [HostFacts(Capability("small", 8, 32.0, 32.0, ()), None, ())]
    [w] = infeasible(plan(m, {}), m, hosts)
    assert w.queue == "cpu.ram4096"
    assert messages([w]) == [
        "no live worker can run 1 job(s) in queue cpu.ram4096 (big); nearest host small: "
        "RAM 32 < 4096 GiB. Queued anyway: they start when such a host joins"
    ]
