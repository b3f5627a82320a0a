"""Entry point of the process `cglint verify` supervises (see run.py and supervisor.py)."""
import sys

from cglint.verify.run import main

sys.exit(main(sys.argv[1:]))
