"""Read-only queries shared by the CLI, ``--json`` and Flower: plain data, no printing."""
