"""Shared state in Redis: job records and their Lua scripts, the broker connection, the
published cluster config, dead letters, queue-change notices and Flower's task events.

The worker (``tasks``) and the operator surface (``fleet``) both stand on it; it stands on
``core``, ``manifest`` and ``routing`` only.
"""
