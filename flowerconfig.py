"""Flower's settings for fleet; Flower runs this file at start when it is in the working
directory (``celery -A tasks flower`` from the repository root, as the README does).

Flower refuses to start without authentication: set ``FLOWER_BASIC_AUTH=user:password``
(several users: comma-separated), or pass ``--basic-auth``/``--auth``; or, for a try on your
own machine only, ``FLOWER_UNAUTHENTICATED=1``. It listens on 127.0.0.1 unless
``FLOWER_ADDRESS`` (or ``--address``) says otherwise. ``--persistent=True`` keeps its task
history across restarts (in ``--db``, default ``./flower``).

Module-level names that match a Flower option set it (tornado config files, read after
FLOWER_* variables and before the command line, which wins); helpers are underscored.
"""

import os as _os
import sys as _sys

from core.errors import ConfigError as _ConfigError
from fleet import flower_extras as _extras
from fleet import flower_view as _view

try:
    _settings = _extras.settings(_os.environ, _sys.argv)
except _ConfigError as _e:
    raise SystemExit(f"fleet's flowerconfig.py: {_e}") from None

address = _settings["address"]
if "enable_events" in _settings:
    enable_events = _settings["enable_events"]
if "basic_auth" in _settings:
    basic_auth = _settings["basic_auth"]

_extras.install()

# fleet's columns: a short ID, the owner, the GPUs a job holds (fleet.flower_view)
tasks_columns = _view.TASKS_COLUMNS
format_task = _view.format_task
