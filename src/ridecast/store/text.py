"""Text a receiver or an exception wrote, made storable on every store (pure, no I/O).

What ridecast keeps of a webhook receiver's answer (the start of its body) and of a failed
attempt (its error text) comes from outside: a receiver can answer a NUL, and an exception
can carry any character it was given. PostgreSQL refuses U+0000 and a lone surrogate in
text, SQLite keeps both, and one such row would fail the whole transaction of results it
belongs to, every organisation's. So such text is kept with each of those characters
replaced by U+FFFD on both stores: the log shows where they were.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """``text`` with each NUL and each lone surrogate replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Only a lone surrogate fails to encode (a valid pair is one code point in a str).
        return "".join(REPLACEMENT if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


def storable_or_none(text: str | None) -> str | None:
    """``storable`` of ``text``, None kept."""
    return None if text is None else storable(text)


__all__ = ["REPLACEMENT", "storable", "storable_or_none"]
