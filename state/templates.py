"""Fill a task message's template: the text with slots for a job's ID, name and body.

``fleet.message_template`` builds the template once per queue and priority; a search's
trials are filled from the one stored with the search (``state.search``), by whoever
issues them (a worker, the sweep). Pure.
"""

from __future__ import annotations

import base64
import json


def fill(text: str, before: str, after: str, job_id: str, name: str, spec_json: str) -> str:
    """The message of job ``job_id`` called ``name`` whose spec is ``spec_json``."""
    return text.format(
        id=job_id,
        repr_name=_in_json(repr(name)),
        name=_in_json(name),
        body=base64.b64encode((before + spec_json + after).encode()).decode(),
    )


def _in_json(s: str) -> str:
    """``s`` as it appears inside a JSON string literal (json.dumps escaping, no quotes)."""
    return json.dumps(s)[1:-1]
