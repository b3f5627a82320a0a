from cglint.cli import run

if __name__ == "__main__":  # not when a worker process started by "spawn" imports it
    run()
