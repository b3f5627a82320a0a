"""Replay guards: what a capture read (collected at capture), checked before every replay,
with the watchers and writers that say who changed it.

See docs/verify-internals.md.
"""
