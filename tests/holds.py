"""What the tests check about a set of holds reported by workers: each is a
dict with `acquired` (the acquire call returned) and `releasing` (the
release call is about to be made), CLOCK_MONOTONIC ns, and `fence`."""

from itertools import pairwise


def in_hold_order(holds: list[dict]) -> list[dict]:
    return sorted(holds, key=lambda hold: hold["acquired"])


def overlaps(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of consecutive holds where the second began before the first
    ended: two holders at once."""
    ordered = in_hold_order(holds)
    return [(a, b) for a, b in pairwise(ordered) if b["acquired"] < a["releasing"]]


def fence_decreases(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of consecutive holds whose fencing tokens did not increase."""
    ordered = in_hold_order(holds)
    return [(a, b) for a, b in pairwise(ordered) if not b["fence"] > a["fence"]]


def handoff_gaps_ms(holds: list[dict]) -> list[float]:
    """From each release call to the next holder's acquire returning."""
    ordered = in_hold_order(holds)
    return [(b["acquired"] - a["releasing"]) / 1e6 for a, b in pairwise(ordered)]
