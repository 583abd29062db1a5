"""The ground floor: the error tree, named defaults and Redis key names, settings.

Everything may import it; it imports nothing of fleet's own above it.
"""
