"""What the integration, end-to-end and GPU tests share: real fleets to break, waits on real
workers, manifests and stores. Test modules import from here, never from each other; the
fixtures (``chaos``, ``pools``) reach every test through tests/conftest.py's plugin list.
docs/testing.md describes each piece."""
