"""The supervised run of `cglint verify SCRIPT`: the command line, the supervising process,
the child that runs the script, the event stream between them and the run's session.

See docs/verify-internals.md.
"""
