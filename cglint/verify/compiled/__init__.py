"""Compiled regions: what torch says about `torch.compile` functions, and their kept outputs.

See docs/verify-internals.md.
"""
