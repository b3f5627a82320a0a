from cglint.cli import run

run()
