"""Per-request gamma schedules: caps on a request's gamma by the live running batch, applied at every step.

A schedule is a tuple of rows ``(max_running_batch, cap)`` with strictly increasing ``max_running_batch``.
At a step whose running batch is ``b``, the request drafts ``min(k, cap)`` tokens, ``cap`` being that of the
first row whose ``max_running_batch >= b``; above the last row the cap is 0 (speculation off). The request
body carries it as ``speculation.schedule: [[max_running_batch, cap], ...]`` (docs/INTERFACES.md).

Why: the proxy decides gamma when a request is admitted, but a long generation outlives the load it was
admitted at. TRT-LLM's ``draft_len_schedule`` caps gamma by batch size globally; here the cap is per request,
computed by the goodput policy from the request's own alpha estimate and the cost model
(``adaptspec.control.policy``), and applied by the worker (reference engine, vLLM plugin) and the simulator.

    sched = parse_schedule([[8, 6], [32, 4], [96, 2]], max_k=8)   # ValueError names the bad row
    gamma_at(6, sched, running=20)    # -> 4
    gamma_at(6, sched, running=200)   # -> 0 (above the last row)
    compress([(4, 5), (8, 5), (16, 3), (1 << 20, 3)])   # -> ((8, 5), (1048576, 3))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Schedule = tuple[tuple[int, int], ...]

MAX_ROWS = 64  # a schedule is a handful of batch levels; more is a malformed (or hostile) body
# The last row of a policy-built schedule: any batch at all (a worker never runs more requests than this).
ANY_BATCH = 1 << 20


def parse_schedule(value: object, max_k: int) -> Schedule:
    """Validate a schedule as a request body gives it (a list of [max_running_batch, cap] pairs).

    Raises ValueError with a message naming the bad row; callers turn it into their own error type."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of [max_running_batch, cap] pairs, got {type(value).__name__}")
    if not value:
        raise ValueError("must have at least one [max_running_batch, cap] row")
    if len(value) > MAX_ROWS:
        raise ValueError(f"has {len(value)} rows; at most {MAX_ROWS} are allowed")
    rows: list[tuple[int, int]] = []
    for i, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != 2 or not all(_is_int(x) for x in row):
            raise ValueError(f"row {i} must be a pair of integers [max_running_batch, cap], got {row!r}")
        b, cap = int(row[0]), int(row[1])
        if b < 1:
            raise ValueError(f"row {i}: max_running_batch must be >= 1, got {b}")
        if rows and b <= rows[-1][0]:
            raise ValueError(f"row {i}: max_running_batch must increase from row to row, got {b} after "
                             f"{rows[-1][0]}")
        if not 0 <= cap <= max_k:
            raise ValueError(f"row {i}: cap must be between 0 and {max_k}, got {cap}")
        rows.append((b, cap))
    return tuple(rows)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def cap_at(schedule: Schedule, running: int) -> int:
    """The cap of the first row whose max_running_batch >= running; 0 above the last row."""
    for b, cap in schedule:
        if running <= b:
            return cap
    return 0


def gamma_at(k: int, schedule: Schedule | None, running: int) -> int:
    """The gamma a request with k speculative tokens drafts at a step with `running` requests."""
    return k if not schedule else min(k, cap_at(schedule, running))


def max_cap(schedule: Schedule) -> int:
    return max(cap for _, cap in schedule)


def compress(rows: Iterable[tuple[int, int]]) -> Schedule:
    """Merge neighbouring rows with the same cap (each row keeps the highest batch of its run)."""
    out: list[tuple[int, int]] = []
    for b, cap in rows:
        if out and out[-1][1] == cap:
            out[-1] = (b, cap)
        else:
            out.append((b, cap))
    return tuple(out)


def levels(upto: int = 1024) -> Sequence[int]:
    """The batch sizes a policy plans a schedule at: every size to 8, then 8 per octave (12% apart: a plan
    priced at the top of its range is close to the plan at its bottom). Each level stands for the batches
    between the previous level (exclusive) and itself."""
    out = list(range(1, 9))
    b = 8
    while b < upto:
        out += [b * (8 + i) // 8 for i in range(1, 9)]
        b *= 2
    return tuple(out)
