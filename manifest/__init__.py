"""Manifest: TOML of tiers, host policies and jobs, validated before anything is published."""
