"""The generated reference documents are current with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridecast.reference import DOCUMENTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_generated_doc_is_current(name: str) -> None:
    """docs/NAME equals what `python -m ridecast.reference` writes now."""
    assert (DOCS / name).read_text() == DOCUMENTS[name](), (
        f"docs/{name} is stale: run `python -m ridecast.reference`"
    )
