"""One exception tree for the whole project.

Every message names the offending value and says what to do next.
"""

from __future__ import annotations


class FleetError(Exception):
    """Raised for any error fleet reports to an operator (base class)."""


class ConfigError(FleetError):
    """Raised when an environment variable or setting has a bad value."""


class ManifestError(FleetError):
    """Raised when a manifest is invalid; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [str(p) for p in problems]
        super().__init__(f"{len(problems)} problem(s) in manifest:\n" + "\n".join(lines))


class Problem:
    """One validation problem: where it is, what is wrong, how to fix it."""

    __slots__ = ("file", "line", "field", "message", "fix")

    def __init__(self, file: str, line: int | None, field: str, message: str, fix: str = ""):
        self.file, self.line, self.field, self.message, self.fix = file, line, field, message, fix

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{where}: {self.field}: {self.message}{fix}"

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "field": self.field,
            "message": self.message,
            "fix": self.fix,
        }


class CapabilityError(FleetError):
    """Raised when FLEET_CAPABILITY cannot be read or has bad keys."""


class StoreError(FleetError):
    """Raised when the artifact store cannot be reached or refuses an operation."""


class DigestMismatch(StoreError):
    """Raised when stored bytes do not hash to the digest we computed."""


class InputUnavailable(StoreError):
    """Raised when a pipeline follower cannot get what its upstreams were to give it: a bundle
    missing from the store or corrupt, an upstream that has not succeeded, or params_from's
    values absent from its record; the message names the upstream and what to do."""


class UnsafeArchive(StoreError):
    """Raised when a bundle or data tar holds a member that extraction refuses: a path that
    is absolute, has '..' or leads out through a link, anything but a regular file, a name
    that is already there, or a member below a file; the message names the member."""


class TrainingFailed(FleetError):
    """Raised when a trainer or command exits non-zero or times out."""

    def __repr__(self) -> str:
        # Celery's task events carry repr(exc), which Flower shows: the message's own line
        # breaks (the job's last output lines), not a literal backslash-n
        return f"{type(self).__name__}: {self}"


class JobNotFound(FleetError):
    """Raised when an operator names a job that has no record in Redis."""


class SearchRefused(FleetError):
    """Raised when publish refuses a search: another search holds its name (results, plots,
    status and the trials' names would mix the two), or Optuna refuses the arguments of its
    sampler or pruner."""


class DataProblem(FleetError):
    """Raised when a job's data cannot be pinned to its content (missing, unreadable, or
    unknown to the store); the loader reports it as a manifest problem with its fix."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.message, self.fix = message, fix


class AmbiguousJob(JobNotFound):
    """Raised when an operator's job reference matches several jobs, or is too short to look up."""


class UsageError(FleetError):
    """Raised when a command line asks for what cannot be done as given (an option that names
    nothing, options that conflict): nothing was done, and the CLI exits 2 as argparse does."""
