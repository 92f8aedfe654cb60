"""The README's table of shipped profiles lists exactly the profiles in pytest_devcaps/profiles."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_devcaps.config import list_profiles, load_catalogue, load_profile

README = Path(__file__).resolve().parents[1] / "README.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (.+) \|$")


def _table() -> list[str]:
    """The lines of the table that follows the ``<!-- shipped profiles`` marker."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- shipped profiles"))
    table = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def test_readme_profile_table_matches_the_shipped_profiles() -> None:
    rows = dict(match.groups() for line in _table() if (match := ROW.match(line)))
    catalogue = load_catalogue()
    shipped = {name: load_profile(name, catalogue).description for name in list_profiles()}
    assert rows == shipped, "update the README's profile table (one row per profile, in order)"
    listed = [name for name in rows]
    assert listed == sorted(listed)
