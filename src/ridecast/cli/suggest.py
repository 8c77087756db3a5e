""""Did you mean ...?" for mistyped words the CLI checks itself (event types, actions).

Mistyped commands get Typer's own suggestion, and ``main`` prints it in one line. Mistyped
options get ``option_suggestion`` instead of Click's "Possible options", which lists whatever
shares a few letters (``listen --bogus`` offered ``--user``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string for none."""
    close = difflib.get_close_matches(word.lower(), sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_types(types: Iterable[str]) -> str | None:
    """The one-line message for the event types that do not exist, or None if all do."""
    from ..events import ALL_TYPES  # here: the event models are not for --help to import

    unknown = [t for t in types if t not in ALL_TYPES]
    if not unknown:
        return None
    named = ", ".join(f"'{t}'{did_you_mean(t, ALL_TYPES)}" for t in unknown)
    return (f"unknown event type {named}; valid: {', '.join(sorted(ALL_TYPES))}")


def option_suggestion(word: str, options: Iterable[str]) -> str:
    """``. Did you mean '--port'?`` for the option closest to a mistyped one, compared
    without their leading dashes (which every option shares, and which made Click suggest
    unrelated ones), or an empty string when none is close."""
    names = {option.lstrip("-"): option for option in options}
    close = difflib.get_close_matches(word.split("=", 1)[0].lstrip("-"), sorted(names), n=1,
                                      cutoff=0.7)
    return f". Did you mean '{names[close[0]]}'?" if close else ""
