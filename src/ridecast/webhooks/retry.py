"""What to do after a delivery attempt: the verdict on a response and the retry delay (pure).

The policy of docs/design.md decision 7, kept free of I/O so that it is tested exhaustively:

* any 2xx is a success; 3xx is a failure and is never followed;
* 410 Gone disables the endpoint at once;
* 429 and 503 are retried no sooner than their ``Retry-After``;
* anything else, a time-out or a connection error is retried on the schedule, with jitter;
* after the last delay of the schedule the delivery is marked failed (and kept for replay).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from email.utils import parsedate_to_datetime

# A Retry-After beyond this is clamped: a receiver must not park a delivery for weeks.
MAX_RETRY_AFTER_S = 24 * 3600.0


class ErrorClass(enum.StrEnum):
    """Why an attempt failed, as the delivery log shows it."""

    DNS = "dns"
    CONNECT = "connect"
    TLS = "tls"
    TIMEOUT = "timeout"
    BLOCKED_ADDRESS = "blocked_address"
    HTTP_STATUS = "http_status"
    REDIRECT = "redirect"
    PROTOCOL = "protocol"  # the answer is not valid HTTP/1.1
    OTHER = "other"


class Verdict(enum.StrEnum):
    """The consequence of one attempt for its delivery."""

    SUCCEEDED = "succeeded"
    RETRY = "retry"
    DISABLE = "disable"


# The one place that decides what an answer means: (first status, last status, verdict,
# error class), first match wins; an answer in no row is a retried ``http_status``. Success
# is the first row and nothing else: the sender and the dispatcher both read ``judge``.
VERDICTS: tuple[tuple[int, int, Verdict, ErrorClass | None], ...] = (
    (200, 299, Verdict.SUCCEEDED, None),
    (300, 399, Verdict.RETRY, ErrorClass.REDIRECT),  # never followed
    (410, 410, Verdict.DISABLE, ErrorClass.HTTP_STATUS),
)
_OTHERWISE = (Verdict.RETRY, ErrorClass.HTTP_STATUS)


def judge(status_code: int | None) -> tuple[Verdict, ErrorClass | None]:
    """The verdict and error class of an answer with ``status_code`` (None: no answer at
    all, retried; its error class is the sender's: dns, connect, timeout...)."""
    if status_code is None:
        return Verdict.RETRY, None
    for first, last, outcome, error_class in VERDICTS:
        if first <= status_code <= last:
            return outcome, error_class
    return _OTHERWISE


def error_class_of_status(status_code: int) -> ErrorClass | None:
    """The error class of an HTTP answer; None for a success (``judge``)."""
    return judge(status_code)[1]


def verdict(status_code: int | None) -> Verdict:
    """The verdict for an answer with ``status_code`` (``judge``)."""
    return judge(status_code)[0]


def honours_retry_after(status_code: int | None) -> bool:
    return status_code in (429, 503)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date); None if absent
    or unreadable. Negative waits become 0, huge ones are clamped to a day."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def next_delay(
    attempts_made: int,
    schedule: Sequence[float],
    *,
    jitter: float,
    rng: random.Random,
    retry_after: float | None = None,
) -> float | None:
    """Seconds until the next attempt after ``attempts_made`` failed ones; None: give up.

    The n-th retry waits ``schedule[n-1]`` scaled by a factor drawn from
    ``[1 - jitter, 1 + jitter]`` (jitter spreads the retries of many deliveries that failed
    together, so a recovering receiver is not hit by a synchronised wave). A ``Retry-After``
    longer than that delay wins; it never adds retries beyond the schedule.
    """
    if attempts_made < 1 or attempts_made > len(schedule):
        return None
    base = float(schedule[attempts_made - 1])
    delay = base * (1.0 + jitter * (2.0 * rng.random() - 1.0)) if jitter else base
    if retry_after is not None:
        delay = max(delay, retry_after)
    return max(delay, 0.0)


def streak_start(
    previous: tuple[float, float] | None, now: float, *, quiet_gap_s: float
) -> float:
    """When the endpoint's current failing streak started, given a failure at ``now``.

    ``previous`` is ``(failing_since, last_failure_at)`` of the streak so far, or None. A
    failure more than ``quiet_gap_s`` after the previous one starts a new streak: with no
    attempt in between, the endpoint was not failing *continuously* (a quiet day followed
    by one failure must not disable it). A success ends a streak (the caller forgets it).
    """
    if previous is None:
        return now
    since, last = previous
    if now - last > quiet_gap_s:
        return now
    return min(since, now)


def quiet_gap(schedule: Sequence[float], *, jitter: float, timeout_s: float,
              lease_s: float) -> float:
    """The longest wait between two failures of one failing endpoint that still counts as
    continuous: the longest retry delay with its jitter, plus a time-out and a lease."""
    longest = max(schedule, default=0.0) * (1.0 + jitter)
    return longest + timeout_s + lease_s


__all__ = [
    "VERDICTS",
    "ErrorClass",
    "Verdict",
    "error_class_of_status",
    "honours_retry_after",
    "judge",
    "next_delay",
    "parse_retry_after",
    "quiet_gap",
    "streak_start",
    "verdict",
]
