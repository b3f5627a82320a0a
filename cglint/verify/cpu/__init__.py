"""The CPU backend: traced passes of a function, and CUDA emulated on the CPU for scripts.

See docs/verify-internals.md.
"""
