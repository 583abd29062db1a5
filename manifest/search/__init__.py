"""Adaptive search, the model: what a ``[jobs.search]`` table means.

Search code by layer, each piece under its noun:

- ``manifest.search``: ``config`` (the frozen ``SearchConfig``), ``knobs`` (Optuna's samplers
  and pruners and the arguments a manifest may set), ``parse`` (the TOML table read and
  checked), ``spec`` (a published search, its id, its trials' ids and names);
- ``state.search``: ``store`` (the Redis keys and the atomic steps), ``view`` (a search as
  plain data), ``study`` (the Optuna mirror), ``advance`` (count ends, issue the next),
  ``trials`` (requeue and cancel one trial);
- ``tasks.trial``: a trial's metric lines to its pruner, on the worker;
- ``fleet.publish_search`` and ``fleet.query.searches``: publish, and the operator's reads.
"""
