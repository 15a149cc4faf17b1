"""User-supplied names (a cluster's ``name``, a path, an implementation) printed safely: control characters shown
as escapes, so a newline cannot forge an output line and an ANSI sequence cannot drive the terminal."""

from __future__ import annotations


def printable(text: object) -> str:
    """``str(text)`` with every non-printable character (newline, carriage return, ESC, DEL, C1 controls, line and
    paragraph separators) written as its Python escape (``\\n``, ``\\x1b``); spaces and letters of every script kept."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))


def printable_lines(text: str) -> str:
    """Several lines of human output, each made ``printable`` (the line breaks between them kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))
