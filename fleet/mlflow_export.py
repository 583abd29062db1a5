"""Write a leaderboard's trials to MLflow: one run per job, found again by its job ID.

Each trial becomes a run in an experiment (default: the search's or sweep's name) that starts
and ends when the trial's run did (its record's ``started_at`` and ``finished_at``), with its
hyperparameters as params (the fixed ones and the sampled ones), every point of its metric
history by step at the time the worker saw it (the step keys are the x axis, not series), tags
that say where it came from (``fleet.job_id``, host, GPUs, owner, state, the bundle's URI and
sha256), and a description that names its bundle (the run's page shows it). The experiment is
tagged a model-training one (``mlflow.experimentKind``): MLflow 3 opens it on its runs, not on
the GenAI overview. Exporting again finds each run by its ``fleet.job_id`` tag and adds only
what is new: metric points it lacks, params it lacks, tags and status as they are now. No run
is made twice, and the counts say which runs changed.

A PBT search's member carries its schedule: MLflow's params cannot change once logged, so its
params are its first values and each numeric value is a metric, ``pbt/<name>``, logged at step 0
and every boundary to its end (``schedule_points``), the values in force there; the whole
schedule (choices too, which no metric can hold) and its lineage are tags.

MLflow is the optional ``mlflow`` extra; without it the export says how to install it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from core.errors import FleetError
from fleet.query import pbt
from fleet.query.results import NOT_METRICS, Leaderboard, Trial
from state.jobrecord import JobState
from state.search.pbt import Member, Phase, values_at

JOB_TAG = "fleet.job_id"
BATCH_METRICS = 1000  # MLflow takes at most this many metrics per log_batch
BATCH_PARAMS = 100  # and this many params
# MLflow 3 opens an experiment without this tag on its GenAI (traces) overview
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
NOTE_TAG = "mlflow.note.content"  # the run's description, shown on its page (markdown)
ENDED = frozenset({"FINISHED", "FAILED", "KILLED"})  # MLflow's RunStatus names of an end
STATUS = {  # a trial's state (a JobState's value: found by its equal member) as MLflow's
    JobState.SUCCEEDED: "FINISHED",
    JobState.FAILED: "FAILED",
    JobState.CANCELLED: "KILLED",
    JobState.PRUNED: "KILLED",
    JobState.QUEUED: "SCHEDULED",
    JobState.RUNNING: "RUNNING",
}
PARAM_MAX_CHARS = 6000  # MLflow's limit on a param's value
TAG_MAX_CHARS = 8000  # and on a tag's
SCHEDULE_PREFIX = "pbt/"  # a PBT member's value over the steps, as a metric


@dataclass(frozen=True)
class Exported:
    """What one export did."""

    experiment_id: str
    created: int
    updated: int  # runs an earlier export made that this one changed
    unchanged: int  # runs already as the records say
    points: int  # metric points logged this time

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _mlflow():
    try:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise FleetError("fleet export mlflow needs MLflow: pip install 'fleet[mlflow]'") from None
    return MlflowClient, Metric, Param


def tags(t: Trial, metric: str) -> dict[str, str]:
    """The tags that say where a run came from. Pure."""
    artifact = t.artifact or {}
    out = {
        JOB_TAG: t.job_id,
        "fleet.name": t.name,
        "fleet.state": t.state,
        "fleet.host": t.host,
        "fleet.gpus": t.gpus,
        "fleet.owner": t.owner,
        "fleet.trial": str(t.trial),
        "fleet.metric": metric,
        "fleet.bundle_uri": artifact.get("uri") or "",
        "fleet.bundle_sha256": artifact.get("sha256") or "",
        "fleet.gpu_s": f"{t.gpu_s:g}",
        "fleet.core_s": f"{t.core_s:g}",
    }
    if t.search:
        out["fleet.search"] = t.search
    out[NOTE_TAG] = note(t)
    return out


def note(t: Trial) -> str:
    """The run's description: where its bundle is, and how to fetch it. Pure."""
    artifact = t.artifact or {}
    if not artifact.get("uri"):
        return f"fleet job `{t.job_id}` ({t.state}): no bundle stored."
    return (
        f"fleet job `{t.job_id}` ({t.state}). Bundle: [{artifact['uri']}]({artifact['uri']}) "
        f"(sha256 `{artifact.get('sha256') or '?'}`, {artifact.get('size') or '?'} bytes); "
        f"fetch it with `fleet get {t.job_id}`."
    )


def params(t: Trial) -> dict[str, str]:
    """A trial's params as MLflow's strings: every hyperparameter, the fixed ones too, with the
    sampled (or swept) values. Pure."""
    return {
        k: (v if isinstance(v, str) else json.dumps(v, separators=(",", ":")))[:PARAM_MAX_CHARS]
        for k, v in {**t.hyper, **t.params}.items()
    }


def ms(t: float | None) -> int | None:
    """Seconds since the epoch as MLflow's milliseconds."""
    return None if t is None else int(round(t * 1000))


def points(history: list[dict]) -> list[tuple[str, float, int, int]]:
    """``(key, value, timestamp_ms, step)`` of every metric in a folded history, at the time
    the worker saw its line; the step keys (``step``, ``epoch``, ``epochs``...) are its x axis,
    not metrics. Pure."""
    out = []
    for p in history:
        step, at = p.get("step"), ms(float(p.get("t") or 0))
        for k, v in p.items():
            if k not in NOT_METRICS and isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((k, float(v), at, int(step)))
    return out


def schedule_points(m: Member, pop: pbt.Population) -> list[tuple[str, float, int, int]]:
    """``(pbt/<name>, value, timestamp_ms, step)`` of member ``m``'s numeric values at step 0
    and each boundary up to where it is (``last_step`` once done): the values in force there,
    so MLflow's chart of them is the schedule. Pure."""
    end = pop.last_step if m.phase is Phase.DONE else max(m.step or 0, m.schedule[-1].step)
    steps = [0, *range(pop.pbt.interval, end + 1, pop.pbt.interval)]
    if m.phase is Phase.DONE and steps[-1] != pop.last_step:
        steps.append(pop.last_step)
    at = {s.step: s.at for s in m.schedule}
    out = []
    for step in steps:
        for k, v in values_at(m.schedule, step).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                when = at.get(step) or at.get(0) or 0.0
                out.append((SCHEDULE_PREFIX + k, float(v), ms(when), step))
    return out


def member_tags(m: Member, pop: pbt.Population) -> dict[str, str]:
    """A PBT member's schedule (every value, choices too) and lineage as tags. Pure."""
    lines = pbt.lineages(pop).get(m.number) or ["kept its own values"]
    return {
        "fleet.pbt.member": str(m.number),
        "fleet.pbt.schedule": json.dumps(pbt.schedule_dict(m.schedule))[:TAG_MAX_CHARS],
        "fleet.pbt.lineage": "\n".join(lines)[:TAG_MAX_CHARS],
    }


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]


class MlflowExport:
    """One export of a leaderboard into one MLflow tracking store."""

    def __init__(self, tracking_uri: str):
        client_cls, self.Metric, self.Param = _mlflow()
        self.client = client_cls(tracking_uri=tracking_uri)

    def experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is None:
            return self.client.create_experiment(name, tags=EXPERIMENT_KIND)
        if found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        for k, v in EXPERIMENT_KIND.items():
            if found.tags.get(k) != v:
                self.client.set_experiment_tag(found.experiment_id, k, v)
        return found.experiment_id

    def existing_runs(self, experiment_id: str) -> dict[str, str]:
        """job ID -> run ID of the runs an earlier export made."""
        out: dict[str, str] = {}
        token = None
        while True:
            page = self.client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{JOB_TAG}` != ''",
                max_results=1000,
                page_token=token,
            )
            out.update(
                {r.data.tags[JOB_TAG]: r.info.run_id for r in page if JOB_TAG in r.data.tags}
            )
            token = page.token
            if not token:
                return out

    def write(self, board: Leaderboard, experiment: str | None = None) -> Exported:
        exp = self.experiment(experiment or board.name)
        runs = self.existing_runs(exp)
        pop = board.population
        members = {m.number: m for m in pop.members} if pop else {}
        created = updated = logged = 0
        for t in board.trials:
            member = members.get(t.trial) if pop and t.search == pop.search_id else None
            if member is not None and member.schedule:
                first = dict(member.schedule[0].values)
                t = replace(t, params={**t.params, **first})  # a param is logged once
                extra = (schedule_points(member, pop), member_tags(member, pop))
            else:
                extra = ([], {})
            run_id = runs.get(t.job_id)
            if run_id is None:
                run_id = self.client.create_run(
                    exp,
                    run_name=t.name,
                    start_time=ms(t.started_at),
                    tags={**tags(t, board.objective.metric), **extra[1]},
                ).info.run_id
                created += 1
            n, changed = self._sync(
                run_id,
                t,
                points(board.histories.get(t.job_id, [])) + extra[0],
                {**tags(t, board.objective.metric), **extra[1]},
                fresh=t.job_id not in runs,
            )
            logged += n
            updated += changed and t.job_id in runs
        return Exported(exp, created, updated, len(board.trials) - created - updated, logged)

    def _sync(
        self, run_id: str, t: Trial, todo: list[tuple], run_tags: dict[str, str], *, fresh: bool
    ) -> tuple[int, bool]:
        """Bring one run up to date with its points ``todo`` (``points``) and ``run_tags``:
        the metric points logged, and whether anything changed."""
        run = self.client.get_run(run_id)
        have = run.data
        new_params = [self.Param(k, v) for k, v in params(t).items() if k not in have.params]
        if not fresh:  # one value per step (the history is folded): a logged step is done
            seen = {
                (k, m.step) for k in have.metrics for m in self.client.get_metric_history(run_id, k)
            }
            todo = [p for p in todo if (p[0], p[3]) not in seen]
        for chunk in _chunks(new_params, BATCH_PARAMS):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(
            [self.Metric(k, v, at, step) for k, v, at, step in todo], BATCH_METRICS
        ):
            self.client.log_batch(run_id, metrics=chunk)
        new_tags = {k: v for k, v in run_tags.items() if have.tags.get(k) != v}
        for k, v in new_tags.items():
            self.client.set_tag(run_id, k, v)
        status = STATUS.get(t.state, "RUNNING")
        end = ms(t.finished_at) if status in ENDED else None
        moved = run.info.status != status or (end is not None and run.info.end_time != end)
        if moved and status in ENDED:
            self.client.set_terminated(run_id, status, end_time=end)
        elif moved:
            self.client.update_run(run_id, status=status)
        return len(todo), bool(new_params or todo or new_tags or moved)
