"""Entry point of the process `cglint verify` supervises (see script.py and supervisor.py)."""
import sys

from cglint.verify.run.script import main

sys.exit(main(sys.argv[1:]))
