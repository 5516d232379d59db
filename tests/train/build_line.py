"""The build line mpcc writes into a program's head, for tests that build
the program with flags of their own (-Wall -Werror, sanitizers)."""


def libraries(path):
    """What the build line in the program's head links: -ldnnl -lgomp when
    oneDNN runs its GEMMs or convolutions, -lopenblas, -lm, -pthread."""
    with open(path) as f:
        line = next(l for l in f if l.startswith(" * build:"))
    return line.split(" -o train ", 1)[1].split()
