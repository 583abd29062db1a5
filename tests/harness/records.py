"""Job records for pure tests, made as a reader gets them: through the record's decoder."""

from __future__ import annotations

import json

from state.jobrecord import JobRecord


def job_record(**fields) -> JobRecord:
    """The record whose stored hash holds ``fields`` (a dict or list stored as its JSON, any
    other value as its text), decoded by ``JobRecord.from_hash`` as ``fetch`` decodes it."""
    return JobRecord.from_hash(
        {k: json.dumps(v) if isinstance(v, (dict, list)) else str(v) for k, v in fields.items()}
    )
