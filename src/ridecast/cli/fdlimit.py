"""The open-file limit of a server process: every stream and connection is a descriptor.

Many systems start processes with a soft limit of 1,024 open files while allowing far more
(the hard limit). ``raise_to_hard()`` lifts the soft limit to the hard one at start, so a
``ridecast serve`` process can hold as many streams as the system lets it; beyond that, new
connections are refused by the kernel, and ``ulimit -Hn`` (or the service manager's
``LimitNOFILE``) is the setting to raise.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_to_hard() -> int:
    """Lift the soft limit on open files to the hard limit; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # pragma: no cover - refused by the system
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
        return soft
    log.info("open-file limit raised from %d to %d", soft, hard)
    return hard
