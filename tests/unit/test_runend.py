"""How a run ends (tasks.runend.decide): one row per way, in the order the facts meet."""

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from tasks.handback import HandBack
from tasks.run import STOP_KINDS, Stop
from tasks.runend import Decision, GangFacts, Happened, Look, Trouble, Verdict, decide

ROOT = Path(__file__).resolve().parents[2]
SHUTDOWN = "worker shutting down"
URGENT = HandBack(Stop.PREEMPTED, "preempted by urgent (ab12)", {"preempted_by": "ab12"})
OWNER = HandBack(Stop.YIELDED, "the host's owner wants GPU 0")
LOST_1 = "gang member 1 (h2) was lost"


def gang(rank=0, nodes=2, lost=None, pruned=None):
    return GangFacts(rank, nodes, lost=lost, pruned=pruned)


def failed(again=False, why=""):
    return Decision(Verdict.FAILED, why, again=again)


def stopped(stop):
    return Decision(Verdict.STOPPED, stop.value, stop=stop)


def handed_back(back, why=None):
    return Decision(Verdict.HANDED_BACK, back.why if why is None else why, back=back)


def rerun(why, again=True):
    tail = "the gang runs again as a whole" if again else "out of attempts"
    return Decision(Verdict.GANG_RERUN, f"{why}; {tail}", detail=why, again=again)


def look(question):
    return Decision(Verdict.LOOK, look=question)


SUCCEEDED = Decision(Verdict.SUCCEEDED)
PRUNED = Decision(Verdict.PRUNED, detail="by its search's pruner")
RANK_0_DONE = dict(gang_done=True, rank_logs=True)
MEMBER_DONE = Decision(
    Verdict.MEMBER_DONE,
    "exited 0; rank 0 records the gang's result",
    detail="rank 1",
    gang_done=True,
)
GANG_PRUNED = Decision(Verdict.GANG_PRUNED, "its gang's trial was pruned; rank 0 records it")
PARTNER_RECORDED = Decision(
    Verdict.ENDED_ELSEWHERE, "its gang's end was recorded by another member"
)
WHOLE_GANG = "; the whole gang of 2 stopped"

ROWS = [
    # --- troubles: no process end of its own
    ("a gang's rendezvous port taken is a retried start",
     Happened(trouble=Trouble.PORT_TAKEN, error="port 29500 is taken"),
     Decision(Verdict.RELEASED, "port 29500 is taken")),
    ("a port taken goes back uncounted even as the worker stops",
     Happened(trouble=Trouble.PORT_TAKEN, error="port 29500 is taken", shutting_down=True),
     Decision(Verdict.RELEASED, "port 29500 is taken")),
    ("an environment unbuilt as the worker stops goes back uncounted",
     Happened(trouble=Trouble.ENV_BUILD, error="EnvBuildFailed: net", shutting_down=True),
     Decision(Verdict.RELEASED, SHUTDOWN)),
    ("an environment unbuilt here fails, retried as any failure",
     Happened(trouble=Trouble.ENV_BUILD, error="EnvBuildFailed: net", max_attempts=3),
     failed(True, "EnvBuildFailed: net")),
    ("the job's own requirements fail on every host: never retried",
     Happened(trouble=Trouble.JOB_ENV, error="no such package", max_attempts=3),
     failed(False, "no such package")),
    ("an unforeseen error fails, retried while attempts remain",
     Happened(trouble=Trouble.UNFORESEEN, error="KeyError: 'x'", max_attempts=2),
     failed(True, "KeyError: 'x'")),
    ("an unforeseen error of a job that names no attempts fails",
     Happened(trouble=Trouble.UNFORESEEN, error="KeyError: 'x'"),
     failed(False, "KeyError: 'x'")),
    ("an unforeseen error of a gang member whose partner recorded the end stops",
     Happened(trouble=Trouble.UNFORESEEN, error="E", gang=gang(), owned=False),
     PARTNER_RECORDED),
    # --- one host's process
    ("a process that exits 0 succeeded", Happened(returncode=0), SUCCEEDED),
    ("a process that exits 1 failed, not retried without max_attempts",
     Happened(returncode=1), failed()),
    ("a failure is retried while attempts remain",
     Happened(returncode=1, attempt=1, max_attempts=3), failed(True)),
    ("a failure on its last attempt is failed",
     Happened(returncode=1, attempt=3, max_attempts=3), failed(False)),
    ("a failure whose write found the job taken stops as the record says",
     Happened(returncode=1, max_attempts=3, owned=False), stopped(Stop.LOST)),
    ("a failure whose job was cancelled as it failed stops cancelled",
     Happened(returncode=1, owned=False, lease_stop=Stop.CANCELLED), stopped(Stop.CANCELLED)),
    ("an unforeseen error whose job was taken meanwhile stops as the record says",
     Happened(trouble=Trouble.UNFORESEEN, error="E", max_attempts=3, owned=False),
     stopped(Stop.LOST)),
    ("a process killed by its lapsing lease is cut off, not failed",
     Happened(returncode=-15, cut_off=True), Decision(Verdict.CUT_OFF)),
    ("a process that exited 0 as its lease lapsed succeeded",
     Happened(returncode=0, cut_off=True), SUCCEEDED),
    ("a stopping worker hands its job back uncounted",
     Happened(returncode=-9, stopped=Stop.SHUTDOWN), Decision(Verdict.RELEASED, SHUTDOWN)),
    ("a stopping worker wins over a trial's last step and a policy's request",
     Happened(returncode=-9, stopped=Stop.SHUTDOWN, ran_to_end=True, asked=URGENT),
     Decision(Verdict.RELEASED, SHUTDOWN)),
    ("a timeout fails, retried as any failure",
     Happened(returncode=-9, stopped=Stop.TIMEOUT, max_attempts=2), failed(True)),
    ("a timeout fails even when its process exited 0",
     Happened(returncode=0, stopped=Stop.TIMEOUT), failed()),
    ("a timeout fails even after a trial's last step",
     Happened(returncode=-9, stopped=Stop.TIMEOUT, ran_to_end=True), failed()),
    ("over its VRAM budget it fails and is never retried",
     Happened(returncode=-9, stopped=Stop.OVER_BUDGET, max_attempts=3), failed(False)),
    ("over its VRAM budget but exited 0 first it succeeded",
     Happened(returncode=0, stopped=Stop.OVER_BUDGET), SUCCEEDED),
    ("a trial its pruner stopped is pruned",
     Happened(returncode=-9, stopped=Stop.PRUNED), PRUNED),
    ("a trial that exited 0 before its pruner's stop landed succeeded",
     Happened(returncode=0, stopped=Stop.PRUNED), SUCCEEDED),
    ("a trial killed after its last step succeeded",
     Happened(returncode=-9, stopped=Stop.PRUNED, ran_to_end=True), SUCCEEDED),
    ("pruned wins over a policy's request",
     Happened(returncode=-9, stopped=Stop.PRUNED, asked=URGENT), PRUNED),
    ("a preempted run is handed back with its request's words and fields",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, asked=URGENT), handed_back(URGENT)),
    ("a policy stop with no request left is handed back in its own words",
     Happened(returncode=-9, stopped=Stop.PREEMPTED),
     handed_back(HandBack(Stop.PREEMPTED, "preempted"))),
    ("a host yielding to its owner hands its job back",
     Happened(returncode=-9, stopped=Stop.YIELDED, asked=OWNER), handed_back(OWNER)),
    ("a hand-back whose write found the job taken stops as the record says",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, asked=URGENT, owned=False),
     stopped(Stop.LOST)),
    ("a hand-back whose job was cancelled meanwhile stops cancelled",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, owned=False, lease_stop=Stop.CANCELLED),
     stopped(Stop.CANCELLED)),
    ("a hand-back taken while cut off waits for Redis",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, owned=False, cut_off=True),
     Decision(Verdict.CUT_OFF)),
    ("a cancelled run stops: the record says cancelled",
     Happened(returncode=-9, stopped=Stop.CANCELLED, max_attempts=3), stopped(Stop.CANCELLED)),
    ("a run whose job another run owns stops",
     Happened(returncode=-9, stopped=Stop.LOST), stopped(Stop.LOST)),
    ("a lost run that stopped itself cut off waits for Redis",
     Happened(returncode=-9, stopped=Stop.LOST, cut_off=True), Decision(Verdict.CUT_OFF)),
    # --- a gang member
    ("rank 0 exiting 0 tells its gang, gathers the ranks' logs and succeeds",
     Happened(returncode=0, gang=gang(0)), replace(SUCCEEDED, **RANK_0_DONE)),
    ("another rank exiting 0 leaves the result to rank 0", Happened(returncode=0, gang=gang(1)),
     MEMBER_DONE),
    ("another rank exiting 0 leaves the result to rank 0 though asked back",
     Happened(returncode=0, gang=gang(1), asked=URGENT), MEMBER_DONE),
    ("rank 0 exiting 0 as its gang was halted succeeded: its work is done, as one host's",
     Happened(returncode=0, gang=gang(0), asked=URGENT), replace(SUCCEEDED, **RANK_0_DONE)),
    ("a member its watch stopped asks its gang who was lost",
     Happened(returncode=-9, stopped=Stop.GANG_LOST, gang=gang(1)), look(Look.WHO_WAS_LOST)),
    ("a lost partner re-runs the gang, naming it",
     Happened(returncode=-9, stopped=Stop.GANG_LOST, gang=gang(0, lost=LOST_1)), rerun(LOST_1)),
    ("a lost partner the gang no longer names re-runs it all the same",
     Happened(returncode=-9, stopped=Stop.GANG_LOST, gang=gang(0, lost="")),
     rerun("a gang member was lost")),
    ("a gang out of its default attempts is failed",
     Happened(returncode=-9, stopped=Stop.GANG_LOST, gang=gang(0, lost=LOST_1), attempt=3),
     rerun(LOST_1, again=False)),
    ("a gang's own max_attempts wins over the default",
     Happened(
         returncode=-9, stopped=Stop.GANG_LOST, gang=gang(0, lost=LOST_1), attempt=3,
         max_attempts=5,
     ),
     rerun(LOST_1)),
    ("a gang a partner requeued first ended elsewhere",
     Happened(returncode=-9, stopped=Stop.GANG_LOST, gang=gang(0, lost=LOST_1), owned=False),
     Decision(Verdict.ENDED_ELSEWHERE, "the gang ended elsewhere")),
    ("another rank that failed asks whether its trial was pruned",
     Happened(returncode=1, gang=gang(1)), look(Look.WAS_PRUNED)),
    ("another rank that failed as rank 0 was pruned leaves it to rank 0",
     Happened(returncode=1, gang=gang(1, pruned=True)), GANG_PRUNED),
    ("another rank that failed, not pruned, asks why it failed",
     Happened(returncode=1, gang=gang(1, pruned=False)), look(Look.WHY_IT_FAILED)),
    ("rank 0 that failed asks why, never whether it was pruned",
     Happened(returncode=1, gang=gang(0)), look(Look.WHY_IT_FAILED)),
    ("a member that failed as a partner went silent re-runs the gang",
     Happened(returncode=1, gang=gang(1, pruned=False, lost=LOST_1)), rerun(LOST_1)),
    ("a member that failed with every partner alive failed",
     Happened(returncode=1, gang=gang(0, lost=""), max_attempts=2), failed(True)),
    ("rank 0 that failed as its gang was halted hands the gang back",
     Happened(returncode=1, gang=gang(0, lost=""), asked=URGENT, checkpointed=True),
     handed_back(URGENT, URGENT.why + WHOLE_GANG + ", rank 0's checkpoint synced")),
    ("another rank that failed as its gang was halted leaves it to rank 0",
     Happened(returncode=1, gang=gang(1, pruned=False, lost=""), asked=URGENT),
     Decision(Verdict.RANK_0_HANDS_BACK, URGENT.why, back=URGENT)),
    ("another rank asked back leaves the hand-back to rank 0",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, gang=gang(1), asked=URGENT),
     Decision(Verdict.RANK_0_HANDS_BACK, URGENT.why, back=URGENT)),
    ("rank 0 asked back hands the whole gang back",
     Happened(returncode=-9, stopped=Stop.PREEMPTED, gang=gang(0), asked=URGENT),
     handed_back(URGENT, URGENT.why + WHOLE_GANG)),
    ("a member's failure a partner recorded first ended elsewhere",
     Happened(returncode=1, gang=gang(0, lost=""), owned=False), PARTNER_RECORDED),
    ("a member cut off from Redis leaves its gang to its watch and lease",
     Happened(returncode=-9, stopped=Stop.LOST, gang=gang(0), cut_off=True),
     Decision(Verdict.GANG_CUT_OFF)),
    ("a member that exited 1 as its lease lapsed is cut off, not looked at",
     Happened(returncode=1, gang=gang(1), cut_off=True), Decision(Verdict.GANG_CUT_OFF)),
    ("a cancelled gang member stops", Happened(returncode=-9, stopped=Stop.CANCELLED, gang=gang(1)),
     stopped(Stop.CANCELLED)),
    ("a gang that timed out fails without asking its gang",
     Happened(returncode=-9, stopped=Stop.TIMEOUT, gang=gang(0)), failed()),
    ("a gang that timed out as it was halted failed, as one host's job does",
     Happened(returncode=-9, stopped=Stop.TIMEOUT, gang=gang(0), asked=URGENT), failed()),
    ("a gang's trial killed after its last step as it was halted succeeded",
     Happened(returncode=-9, stopped=Stop.PRUNED, gang=gang(0), ran_to_end=True, asked=URGENT),
     SUCCEEDED),
    ("a gang's trial its pruner stopped is pruned by rank 0",
     Happened(returncode=-9, stopped=Stop.PRUNED, gang=gang(0)), PRUNED),
    ("a gang's trial killed after its last step succeeded, no exit 0 told",
     Happened(returncode=-9, stopped=Stop.PRUNED, gang=gang(0), ran_to_end=True), SUCCEEDED),
    ("a gang member over its VRAM budget fails for good",
     Happened(returncode=-9, stopped=Stop.OVER_BUDGET, gang=gang(0), max_attempts=3), failed()),
]  # fmt: skip


def plain(d: Decision) -> tuple:
    """A decision to compare: a request by what it asks, not when it was made."""
    back = d.back and (d.back.stop, d.back.why, d.back.fields)
    return (replace(d, back=None), back)


@pytest.mark.parametrize("happened, expected", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_run_ends_as_what_happened_decides(happened, expected):
    assert plain(decide(happened)) == plain(expected)


def test_every_row_names_a_different_way_to_end():
    assert len({r[0] for r in ROWS}) == len(ROWS)
    assert len({repr(r[1]) for r in ROWS}) == len(ROWS), "two rows with the same facts"


def test_every_verdict_is_reached_by_some_row():
    assert {decide(r[1]).verdict for r in ROWS} == set(Verdict)


def test_every_stop_says_how_it_ends_the_run():
    # a new Stop is one enum value and one row of STOP_KINDS
    assert set(STOP_KINDS) == set(Stop)


def test_every_look_once_answered_decides():
    for name, happened, _ in ROWS:
        d = decide(happened)
        while d.verdict is Verdict.LOOK:
            answer = {"lost": ""} if d.look is not Look.WAS_PRUNED else {"pruned": False}
            happened = replace(happened, gang=replace(happened.gang, **answer))
            d = decide(happened)
        assert d.verdict is not Verdict.LOOK, name


def test_every_verdict_but_a_look_has_a_way_to_carry_it_out():
    from tasks.execution import CARRY_OUT

    assert set(CARRY_OUT) == set(Verdict) - {Verdict.LOOK}


def test_the_decision_imports_no_redis_celery_or_process_code():
    tree = ast.parse((ROOT / "tasks" / "runend.py").read_text())
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= {"__future__", "dataclasses", "enum", "tasks.run", "tasks.handback"}
