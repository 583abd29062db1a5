"""What Flower's pages show of fleet (fleet.flower_view): owner, GPUs, a short ID, each
worker's GPUs and cores, no pool controls; checked against Flower's own templates."""

import copy
from pathlib import Path

import flower
import pytest
from celery.events.state import State

from fleet import flower_view as view
from routing.capability import Capability, CudaDevice
from state.jobrecord import JobRecord, JobState

FLOWER = Path(flower.__file__).parent


class FleetState(State):
    Task = view.FleetTask  # as fleet.flower_extras installs it in Flower's EventsState


def task_after(*events):
    """Flower's copy of the task (``copy.copy``, as its views make one) after ``events``."""
    state = FleetState()
    for i, (type_, fields) in enumerate(events, 1):
        state.event(
            dict(
                fields, type=type_, uuid="j1", timestamp=float(i), local_received=float(i), clock=i
            )
        )
    return copy.copy(state.tasks["j1"])


@pytest.mark.parametrize(
    "kwargs, owner",
    [
        ("{'owner': 'dave'}", "dave"),
        ("{}", ""),
        (None, ""),
        ("not python", ""),
        ("{'owner': 3}", ""),
    ],
)
def test_the_owner_is_read_from_the_kwargs_fleet_sends(kwargs, owner):
    assert view.owner_of(kwargs) == owner


def test_a_running_tasks_row_has_its_owner_and_gpus_among_the_fields_flower_exports():
    task = task_after(
        ("task-received", {"hostname": "w@h", "name": "ddp", "kwargs": "{'owner': 'carol'}"}),
        ("task-STARTED", {"hostname": "w@h", "gpus": [0, 1], "result": "running 1s"}),
    )
    row = view.format_task(task).as_dict()
    assert (row["owner"], row["gpus"], row["worker"].hostname) == ("carol", "GPUs 0,1", "w@h")


@pytest.mark.parametrize(
    "gpus, text",
    [([0], "GPU 0"), ([0, 1], "GPUs 0,1"), ([], "none"), (None, ""), ("0", "")],
)
def test_gpu_index_0_reads_as_a_gpu_not_as_none(gpus, text):
    assert view.gpus_text(gpus) == text


def test_a_pruned_trial_shows_pruned_not_success_and_counts_no_success():
    task = task_after(
        ("task-received", {"hostname": "w@h", "name": "tune[trial=3]"}),
        ("task-STARTED", {"hostname": "w@h", "gpus": [0]}),
        ("task-pruned", {"hostname": "w@h", "state": "PRUNED", "result": "{}"}),
    )
    assert view.format_task(task).state == "PRUNED" == view.TASK_STATES[JobState.PRUNED]


def test_a_pruned_trials_row_has_its_runtime_from_its_start_to_its_prune():
    """Celery times a task only on task-succeeded: a pruned one's Runtime was left empty."""
    task = task_after(
        ("task-received", {"hostname": "w@h", "name": "tune[trial=3]"}),
        ("task-started", {"hostname": "w@h"}),
        ("task-pruned", {"hostname": "w@h", "state": "PRUNED", "succeeded": 9.5, "result": "{}"}),
    )
    assert view.format_task(task).runtime == 9.5 - 2.0


@pytest.mark.parametrize(
    "host, nodes, shown",
    [
        ("local-cpu", {"local-cpu": "local-cpu@box-1a2b"}, "local-cpu@box-1a2b"),
        ("gone", {"local-cpu": "local-cpu@box-1a2b"}, "gone"),  # no heartbeat names its node
    ],
)
def test_a_records_worker_is_named_as_flowers_events_name_it(host, nodes, shown):
    assert view.worker_name(host, nodes) == shown


def test_a_queued_tasks_row_names_no_worker_and_no_gpus():
    # a requeue
    task = task_after(
        ("task-received", {"hostname": "w@h", "name": "j", "kwargs": "{'owner': 'al'}"}),
        ("task-STARTED", {"hostname": "w@h", "gpus": [2]}),
        ("task-sent", {"hostname": "fleet@h", "state": "PENDING"}),
    )
    row = view.format_task(task).as_dict()
    assert (row["state"], row["worker"], row["gpus"], row["owner"]) == ("PENDING", None, "", "al")


def test_a_gangs_members_deliveries_are_one_row_on_every_members_host_with_rank_0s_state():
    gang = ["ga", "gb"]
    task = task_after(
        ("task-received", {"hostname": "ga@h1", "name": "ddp"}),
        ("task-started", {"hostname": "ga@h1"}),
        ("task-pending", {"hostname": "ga@h1", "state": "PENDING", "result": "gang forming"}),
        ("task-received", {"hostname": "gb@h2", "name": "ddp"}),
        ("task-started", {"hostname": "gb@h2"}),
        ("task-STARTED", {"hostname": "ga@h1", "gang_hosts": gang, "result": "running 1s"}),
        ("task-started", {"hostname": "gc@h3"}),  # a spare copy, dropped: the gang runs
    )
    row = view.format_task(task).as_dict()
    assert (row["state"], row["worker"].hostname) == ("STARTED", "ga + gb")
    assert row["result"] == "running 1s"
    done = task_after(
        ("task-STARTED", {"hostname": "ga@h1", "gang_hosts": gang}),
        ("task-succeeded", {"hostname": "ga@h1", "result": "{}"}),
        ("task-started", {"hostname": "gc@h3"}),
    )
    assert (view.format_task(done).state, view.format_task(done).worker.hostname) == (
        "SUCCESS",
        "ga + gb",
    )


def test_a_gang_member_waiting_for_its_partners_shows_the_job_queued_not_started():
    task = task_after(
        ("task-received", {"hostname": "ga@h1", "name": "ddp"}),
        ("task-started", {"hostname": "ga@h1"}),
        ("task-pending", {"hostname": "ga@h1", "state": "PENDING", "result": "gang forming"}),
    )
    row = view.format_task(task).as_dict()
    assert (row["state"], row["worker"], row["result"]) == ("PENDING", None, "gang forming")


@pytest.mark.parametrize(
    "hosts, text", [(["ga", "gb", "gc"], "ga + gb + gc"), ([], ""), (None, ""), ("ga", "")]
)
def test_a_gangs_hosts_read_as_fleet_status_shows_them(hosts, text):
    assert view.hosts_text(hosts) == text


def test_the_tasks_page_columns_are_flowers_own_or_fleets_and_leave_out_the_long_ones():
    from flower.views.tasks import TASK_COLUMNS

    columns = view.TASKS_COLUMNS.split(",")
    assert set(columns) <= set(TASK_COLUMNS) | set(view.TASK_COLUMNS)
    assert {"owner", "gpus", "uuid", "runtime", "worker"} <= set(columns)
    # the owner column says who; no raw dicts
    assert not {"args", "kwargs", "result"} & set(columns)


def capability(devices, ram_gib, cores) -> dict:
    """As a heartbeat carries it (routing.capability's to_dict)."""
    return Capability("h", cores, float(ram_gib), float(ram_gib), tuple(devices)).to_dict()


@pytest.mark.parametrize(
    "host, text",
    [
        ("big", "1 GPU (sim-A100-80GB 80 GiB), 16 cores, 64 GiB RAM"),
        ("pair", "2 GPUs (2x sim-4080 16 GiB), 8 cores, 32 GiB RAM"),
        ("cpu", "0 GPUs, 4 cores, 8 GiB RAM"),
    ],
)
def test_each_workers_gpus_and_cores_read_as_one_line(host, text):
    caps = {
        "big": capability([CudaDevice(0, "sim-A100-80GB", 80, 80)], 64, 16),
        "pair": capability(
            [CudaDevice(0, "sim-4080", 16, 16), CudaDevice(1, "sim-4080", 16, 16)], 32, 8
        ),
        "cpu": capability([], 8, 4),
    }
    assert view.worker_resources({"capability": caps[host]}) == text


def test_a_worker_with_no_heartbeat_shows_nothing_extra():
    assert view.worker_resources(None) == "" and view.worker_resources({}) == ""


def test_every_page_gets_fleets_style_in_its_head_and_script_at_the_end():
    page = view.with_page_extras(b"<html><head><title>t</title></head><body><p>x</p></body></html>")
    assert (
        page.index(b'id="fleet-style"') < page.index(b"</head>") < page.index(b'id="fleet-script"')
    )
    assert page.endswith(b"</script></body></html>")
    assert view.with_page_extras(b'{"data": []}') == b'{"data": []}'  # JSON answers are left alone


def test_the_style_shows_the_short_id_and_hides_the_pool_controls_flowers_templates_have():
    js = (FLOWER / "static" / "js" / "flower.js").read_text()
    worker = (FLOWER / "templates" / "worker.html").read_text()
    assert "task-uuid-short" in js and "task-uuid-full" in js
    assert ".task-uuid-full { display: none; }" in view.PAGE_STYLE
    assert ".task-uuid-short { display: inline;" in view.PAGE_STYLE
    panel = worker.split('class="worker-panel worker-controls-panel"', 1)[1].split("</section>", 1)[
        0
    ]
    assert all(
        control in panel
        for control in ("worker-pool-grow", "worker-pool-shrink", "worker-pool-autoscale")
    )
    assert ".worker-controls-panel" in view.PAGE_STYLE and "worker-autoscaler-panel" in worker


def test_the_workers_script_finds_the_table_and_the_worker_name_flower_renders():
    assert 'id="workers-table"' in (FLOWER / "templates" / "workers.html").read_text()
    assert '<h1 id="workername">' in (FLOWER / "templates" / "worker.html").read_text()
    assert "#workername" in view.PAGE_SCRIPT
    assert "#workers-table" in view.PAGE_SCRIPT and "fleet_resources" in view.PAGE_SCRIPT


def test_a_tasks_exception_keeps_its_line_breaks_on_its_page():
    task = (FLOWER / "templates" / "task.html").read_text()
    assert "<dt>{{ humanize(name) }}</dt>" in task  # the Exception row's label, found by its text
    assert "=== 'Exception'" in view.PAGE_SCRIPT and "pre-wrap" in view.PAGE_SCRIPT


def record(state: JobState, **kw) -> JobRecord:
    return JobRecord(
        job_id="j" * 64,
        name="tune[trial=2]",
        state=state,
        queue="cpu",
        owner="ana",
        created_at=100.0,
        queued_at=101.0,
        **kw,
    )


def test_a_record_is_flowers_task_as_its_events_would_have_made_it():
    ran = dict(started_at=110.0, finished_at=150.0, worker="h1", gpu="0:sim-A100", runs=2)
    queued = view.task_fields(record(JobState.QUEUED, started_at=90.0))
    assert queued["state"] == "PENDING" and "received" not in queued and queued["sent"] == 101.0
    assert view.owner_of(queued["kwargs"]) == "ana" and queued["routing_key"] == "cpu"
    running = view.task_fields(record(JobState.RUNNING, started_at=110.0, gpu="1:x"))
    assert (running["state"], running["started"], running["gpus"]) == ("STARTED", 110.0, [1])
    done = view.task_fields(record(JobState.SUCCEEDED, **ran))
    assert (done["state"], done["succeeded"], done["runtime"], done["retries"]) == (
        "SUCCESS",
        150.0,
        40.0,
        1,
    )
    pruned = view.task_fields(record(JobState.PRUNED, **ran, end_reason="by its search's pruner"))
    assert pruned["state"] == "PRUNED" and pruned["result"] == "by its search's pruner"
    failed = view.task_fields(record(JobState.FAILED, **ran, end_detail="exit 1: boom"))
    assert failed["state"] == "FAILURE" and failed["exception"] == "exit 1: boom"
    assert view.task_fields(record(JobState.CANCELLED, **ran))["revoked"] == 150.0
    gang = view.task_fields(record(JobState.RUNNING, started_at=110.0, gang_hosts="ga,gb"))
    assert gang["gang_hosts"] == ["ga", "gb"]


def test_a_queued_job_sorts_first_by_time_received_newest_first():
    from flower.utils.search import _task_sort_key

    state = FleetState()
    for jid, fields in (
        ("ran", {"state": "SUCCESS", "received": 50.0}),
        ("queued", {"state": "PENDING"}),
        ("revoked", {"state": "REVOKED"}),
    ):
        state.tasks[jid] = state.Task(jid, cluster_state=state, **fields)
    order = sorted(
        state.tasks,
        key=lambda jid: view.sort_key(_task_sort_key, state.tasks[jid], "received", jid),
        reverse=True,
    )
    assert order == ["queued", "ran", "revoked"]


def test_the_search_page_polls_its_searchs_json_and_escapes_the_name():
    page = view.search_page("tune<x>", "/flower")
    assert 'data-url="/flower/fleet/api/search/tune%3Cx%3E"' in page
    assert "search tune&lt;x&gt;" in page and "<script>" in page and "XMLHttpRequest" in page
    assert "https://" not in page and "http://" not in page.replace("http://www.w3.org", "")
    index = view.search_index([{"name": "tune", "summary": "search 3/8"}], "")
    assert '<a href="/fleet/search/tune">tune</a>: search 3/8' in index


def test_the_pages_json_has_no_nan_a_browser_cannot_parse():
    assert view.json_text({"v": float("nan"), "l": [float("inf"), 1.5]}) == (
        '{"v":null,"l":[null,1.5]}'
    )


def test_the_pruned_label_script_finds_the_terms_flowers_task_page_renders():
    """fleet.js relabels a PRUNED task's "Succeeded" time as "Pruned": the terms it looks for
    are the ones Flower's task template writes (its status row, its humanized time field)."""
    from flower.utils.template import humanize

    page = (FLOWER / "templates" / "task.html").read_text()
    assert "<dt>Status</dt>" in page and "<dt>{{ humanize(name) }}</dt>" in page
    assert humanize("succeeded") == "Succeeded"
    assert (
        "term('Status')" in view.PAGE_SCRIPT
        and "term('Succeeded').text('Pruned')" in view.PAGE_SCRIPT
    )
