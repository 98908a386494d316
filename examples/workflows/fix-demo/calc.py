"""A tiny module with a bug for examples/workflows/fix.py to fix."""


def add(a: int, b: int) -> int:
    return a - b
