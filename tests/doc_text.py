"""A document of the repository read as prose, for tests that find a generated or quoted sentence in it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prose(*parts: str) -> str:
    """The text of the file at ``parts`` under the repository's root, every run of whitespace one space (a
    sentence is found whatever the line breaks of the Markdown that holds it)."""
    return " ".join(ROOT.joinpath(*parts).read_text(encoding="utf-8").split())
