"""Adaptive search, its state: ``store`` (the Redis keys, the atomic steps and their
outcomes), ``index`` (each search's name and id, read before any ``view``), ``view`` (a
search as plain data), ``study`` (the Optuna mirror), ``advance`` (count the ends, issue the
next trials) and ``trials`` (requeue and cancel one trial).
The map of search code across the layers is in ``manifest.search``."""
