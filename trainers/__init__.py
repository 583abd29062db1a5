"""Built-in trainers (``gbt``: xgboost, ``mlp``: torch), run by a worker as a subprocess.

Their hyperparameters (names, types, ranges, defaults) are plain data in ``manifest.hyper``,
so the publisher validates manifests without importing anything here. ``trainers.run`` is
the subprocess entry point; it and ``trainers.models`` are the only modules that import
xgboost or torch.
"""
