# Bad candidate: raises. Expected: runtime_error.
def run(x):
    raise ValueError("candidate blew up on purpose")
