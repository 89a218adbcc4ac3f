"""Per-test counters the suites fill in and the pytest plugin reports.

unittest-style tests have no access to pytest's `record_property`; the
suites call `count("samples")` and the plugin reads the counts of the test
that just ran.
"""

from collections import Counter

_current: Counter = Counter()


def count(key, n=1):
    _current[key] += n


def take():
    """The counts since the last take(), then clears them."""
    counts = dict(_current)
    _current.clear()
    return counts
