"""Built-in trainers (``gbt``: xgboost, ``mlp``: torch), run by a worker as a subprocess.

``trainers.schema`` is pure and safe to import anywhere (the publisher validates
manifests with it). ``trainers.run`` is the subprocess entry point; it and
``trainers.models`` are the only modules that import xgboost or torch.
"""
