"""trainers.protocol: the one definition of what a worker and a trainer agree on."""

import json
from pathlib import Path

import pytest

from trainers import protocol


def test_a_metric_line_round_trips():
    line = protocol.format_metric_line({"epoch": 3, "valid_loss": 0.45})
    assert line.startswith("FLEET_METRIC ") and protocol.parse_metric_line(line) == {
        "epoch": 3,
        "valid_loss": 0.45,
    }


@pytest.mark.parametrize(
    "line",
    [
        "epoch 3 done",
        "FLEET_METRIC {not json",
        "FLEET_METRIC [1, 2]",
        'FLEET_METRIC "x"',
    ],
)
def test_any_other_line_is_no_report(line):
    assert protocol.parse_metric_line(line) is None


def test_a_metric_line_is_read_whatever_came_before_it_on_the_line():
    # a progress bar's last redraw, or any text a print left unfinished (issue 35 item 4)
    assert protocol.parse_metric_line(' 45%|###  | 45/100 FLEET_METRIC {"loss": 1}') == {"loss": 1}


def test_the_job_environment_names_every_variable_the_trainer_reads():
    env = protocol.job_environment(
        job_id="j" * 64,
        name="a[seed=1]",
        spec=Path("/w/job.json"),
        output_dir=Path("/w/out"),
        hyper={"lr": 0.1},
        seed=7,
        data_path=None,
        gpu_ids=["2"],
    )
    assert env[protocol.ENV_JOB_SPEC] == "/w/job.json" and env[protocol.ENV_OUTPUT_DIR] == "/w/out"
    assert env[protocol.ENV_DATA_PATH] == "" and env[protocol.ENV_DEVICE] == "cuda"
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and json.loads(env[protocol.ENV_HYPER]) == {"lr": 0.1}
    assert env[protocol.ENV_SEED] == "7" and env[protocol.ENV_JOB_NAME] == "a[seed=1]"


def test_a_job_without_a_gpu_is_told_cpu_and_sees_no_device():
    env = protocol.job_environment(
        job_id="j",
        name="a",
        spec=Path("s"),
        output_dir=Path("o"),
        hyper={},
        seed=0,
        data_path=Path("/d.csv"),
    )
    assert (
        env[protocol.ENV_DEVICE] == "cpu"
        and env["CUDA_VISIBLE_DEVICES"] == ""
        and env[protocol.ENV_DATA_PATH] == "/d.csv"
    )


def test_a_job_holding_two_gpus_and_four_cores_is_told_so_and_its_thread_pools_sized():
    env = protocol.job_environment(
        job_id="j",
        name="a",
        spec=Path("s"),
        output_dir=Path("o"),
        hyper={},
        seed=0,
        data_path=None,
        gpu_ids=["GPU-a", "GPU-b"],
        cores=[4, 5, 6, 7],
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b" and env[protocol.ENV_GPUS] == "2"
    assert env[protocol.ENV_CORES] == "4" and env[protocol.ENV_CPU_AFFINITY] == "4,5,6,7"
    assert all(env[v] == "4" for v in protocol.THREAD_VARS)
    assert protocol.ENV_GPU_MEMORY_GIB not in env


def test_a_job_sharing_a_gpu_is_told_its_vram_budget():
    env = protocol.job_environment(
        job_id="j",
        name="a",
        spec=Path("s"),
        output_dir=Path("o"),
        hyper={},
        seed=0,
        data_path=None,
        gpu_ids=["GPU-a"],
        cores=[0],
        gpu_memory_gib=2.5,
    )
    assert env[protocol.ENV_GPU_MEMORY_GIB] == "2.5"


def test_a_pipeline_follower_is_told_its_inputs_folder_and_any_other_job_none():
    given = dict(job_id="j", name="a", spec=Path("s"), output_dir=Path("o"), hyper={}, seed=0)
    follower = protocol.job_environment(**given, data_path=None, inputs=Path("/c/pins/k"))
    assert follower[protocol.ENV_INPUTS] == "/c/pins/k"
    assert protocol.ENV_INPUTS not in protocol.job_environment(**given, data_path=None)
