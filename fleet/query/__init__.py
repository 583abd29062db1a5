"""Read-only queries over the fleet, as plain data: what the CLI, `--json` and Flower show.

Nothing here prints or writes. One module per noun: ``jobs`` (rows, filters, summaries,
job references), ``logs`` (a job's output kept in Redis), ``artifacts`` (the store's listing),
``hosts`` (worker heartbeats), ``why`` (why a job waits).
"""
