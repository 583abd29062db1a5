"""Capability detection (I/O, in ``detect``) and pure routing decisions (``tiers``)."""
