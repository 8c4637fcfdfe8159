"""A user function marked for line profiling, imported elsewhere by name."""

import harness


@harness.profile
def sum_of_squares(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total
