# Bad candidate: never returns. Expected: timeout.
def run(x):
    while True:
        pass
