"""A gang member's launch, pure: torch.distributed's variables and torchrun's argv."""

from __future__ import annotations

import sys

from state.gang import Member
from tasks.gang import log_id
from tasks.seat import Seat

MEMBERS = (Member(0, "a", "10.0.0.1", 29500, "s0"), Member(1, "b", "10.0.0.2", 29501, "s1"))


def test_one_process_per_node_gets_its_rank_from_its_node():
    env = Seat(1, MEMBERS).environment(gpus=0)
    assert env == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": "1",
        "FLEET_NODES": "2",
        "RANK": "1",
        "LOCAL_RANK": "0",
    }


def test_two_gpus_on_two_nodes_is_four_processes_under_torchrun():
    seat = Seat(1, MEMBERS)
    env = seat.environment(gpus=2)
    assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2"
    assert "RANK" not in env  # torchrun sets each process's own
    argv = seat.argv(["python", "train.py"], gpus=2, rdzv_id="abc")
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nnodes=2" in argv and "--node_rank=1" in argv and "--nproc_per_node=2" in argv
    # a static rendezvous: torchrun's node rank is fleet's, rank 0's host serves the store at
    # the address it advertised (c10d would order the nodes by host name and pid)
    assert "--rdzv_backend=static" in argv
    assert "--master_addr=10.0.0.1" in argv and "--master_port=29500" in argv
    assert not any(a.startswith("--rdzv_endpoint") for a in argv)
    assert argv[-3:] == ["--no-python", "python", "train.py"]


def test_a_node_with_one_process_runs_the_command_as_it_is():
    assert Seat(0, MEMBERS).argv(["python", "t.py"], gpus=1, rdzv_id="x") == ["python", "t.py"]


def test_a_members_own_seat_is_its_token_and_rank_0_logs_as_the_job():
    assert Seat(1, MEMBERS).token == "s1"
    assert log_id("J", Seat(0, MEMBERS)) == "J" and log_id("J", Seat(1, MEMBERS)) == "J.rank1"
    assert log_id("J", None) == "J"


def test_why_says_how_many_hosts_qualify_which_are_busy_and_which_hold_a_seat():
    from fleet.query.why import gang_line

    waiting = {
        "nodes": 3,
        "qualify": ["ga", "gb"],
        "busy": {"gb": ["s1"]},
        "seats": ["ga"],
        "hosts": [],
    }
    assert gang_line(waiting) == (
        "gang of 3 hosts: 2 live host(s) qualify (gb busy with s1); 1 of 3 seats held now (ga)"
    )
    running = {**waiting, "busy": {}, "seats": [], "hosts": ["ga", "gb", "gc"]}
    assert gang_line(running) == "gang of 3 hosts: 2 live host(s) qualify; running on ga, gb, gc"


def test_why_names_the_older_gangs_a_waiting_gang_gives_its_hosts_to_and_where_one_ran():
    from fleet.query.why import gang_line

    waiting = {
        "nodes": 2,
        "qualify": ["ga", "gb"],
        "busy": {},
        "seats": ["gb"],
        "hosts": [],
        "older": [{"job_id": "o", "name": "cpu-gang", "seats": 1, "nodes": 2}],
    }
    assert gang_line(waiting) == (
        "gang of 2 hosts: 2 live host(s) qualify; 1 of 2 seats held now (gb); "
        "older gang(s) forming first on its hosts: cpu-gang (1 of 2 seats)"
    )
    ended = {**waiting, "seats": [], "older": [], "hosts": ["ga", "gb"], "ended": True}
    assert gang_line(ended) == "gang of 2 hosts: 2 live host(s) qualify; ran on ga, gb"
