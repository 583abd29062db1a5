"""fleet: operator-side package (CLI, publishing, job records, local fleet).

The worker side lives in ``tasks``; pure decisions live in ``manifest`` and
``routing``; bundles and stores live in ``artifacts``.
"""

__version__ = "0.1.0"
