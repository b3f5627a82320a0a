"""The runtime verifier: trial captures under instrumentation (needs torch; GPU optional).

Nothing here imports torch until it is used. `cglint verify SCRIPT` runs a script
(run/cli.py); the Python API is `cglint.verify_function(fn, sample_args, ...)` (api.py).
"""
