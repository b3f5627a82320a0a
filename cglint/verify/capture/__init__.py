"""Instrumentation at capture: the hooks on while a capture runs (torch modes, call
wrappers, host and sync tracers) and the patches that put them on every capture of a program.

See docs/verify-internals.md.
"""
