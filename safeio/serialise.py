"""Serialisers for what the toolkit writes, each escaping what users give it: TOML values and comments, Markdown
text (cluster names, currencies, paths in report.md), CSV cells. Users' strings can then neither add keys to a
TOML file, nor forge headings or break tables in Markdown, nor run as formulas in a spreadsheet.

TOML follows the TOML 1.0 specification (https://toml.io/en/v1.0.0): basic strings in double quotes with ``"`` and
``\\`` escaped and every control character as ``\\uXXXX``; bare keys only of ``A-Za-z0-9_-``; floats as Python's
``repr`` (which TOML reads back exactly), ``inf`` and ``nan`` as TOML spells them.
"""

from __future__ import annotations

import csv
import io
import math
import re

from safeio.text import printable

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """A TOML basic string: ``"`` and ``\\`` escaped, every control character (U+0000-U+001F, U+007F) as
    ``\\uXXXX``; other characters kept (TOML files are UTF-8)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """A key as TOML writes it: bare if it is made of ``A-Za-z0-9_-`` only, else a quoted string."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: object) -> str:
    """A scalar (str, bool, int, float) or a list of them as a TOML value; TypeError for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # shortest text that reads back as the same double; always has "." or "e"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_comment(text: str) -> str:
    """``# text`` on one line: line breaks and other control characters in ``text`` written as escapes."""
    return "# " + printable(text)


def toml_pair(key: str, value: object, comment: str = "") -> str:
    """``key = value`` with an optional trailing comment (made one line by ``toml_comment``)."""
    return f"{toml_key(key)} = {toml_value(value)}" + (f"  {toml_comment(comment)}" if comment else "")


def same_toml(parsed: object, expected: object) -> bool:
    """Whether what tomllib read back equals what was meant to be written (NaN equal to NaN, ints and floats
    compared by type too, so ``1`` is not taken for ``1.0``)."""
    if isinstance(expected, dict):
        return isinstance(parsed, dict) and parsed.keys() == expected.keys() and all(
            same_toml(parsed[k], expected[k]) for k in expected)
    if isinstance(expected, list | tuple):
        return isinstance(parsed, list) and len(parsed) == len(expected) and all(
            same_toml(p, e) for p, e in zip(parsed, expected, strict=True))
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(parsed, float) and math.isnan(parsed)
    return type(parsed) is type(expected) and parsed == expected


def check_toml(text: str, expected: dict, what: str) -> None:
    """Read ``text`` back with tomllib; ValueError naming ``what`` unless it parses to exactly ``expected``."""
    import tomllib

    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{what}: the TOML written does not read back ({error}); nothing was replaced") from None
    if not same_toml(parsed, expected):
        raise ValueError(f"{what}: the TOML written reads back as other values than were meant; nothing was "
                         "replaced")


# Markdown: a backslash before any ASCII punctuation character is a literal (CommonMark 0.31, section 2.4). These
# are read as syntax anywhere in a line (emphasis, code, links, HTML, tables, strikethrough, maths on GitHub) ...
_MARKDOWN_INLINE = set("\\`*_[]<>|~$&")
# ... and these at the start of a line only (headings, lists, block quotes: ">" is above)
_MARKDOWN_LINE_START = set("#+-!=")


def markdown_text(text: object) -> str:
    """``str(text)`` as literal Markdown inline text: every character Markdown or a table could read as syntax
    (``| * _ ` [ ] < > ~ $ &`` anywhere, ``# + - ! =`` first) escaped with a backslash, and line breaks and other
    control characters written as escapes (``\\n``), so a user's string stays one cell of a table and plain text."""
    shown = printable(text)
    return "".join("\\" + ch if ch in _MARKDOWN_INLINE or (i == 0 and ch in _MARKDOWN_LINE_START) else ch
                   for i, ch in enumerate(shown))


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV-injection list


def csv_cell(value: object) -> object:
    """A cell safe to open in a spreadsheet: a string that starts like a formula (``= + - @``, tab, CR) and is not
    a number gets a leading ``'`` (OWASP's advice); control characters written as escapes; numbers as they are."""
    if not isinstance(value, str):
        return value
    text = printable(value)
    if text.startswith(_FORMULA_START):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def csv_text(rows: list[dict], fields: list[str]) -> str:
    """CSV (header, then one line per row; the ``csv`` module's quoting) of ``rows``' ``fields``, every string cell
    made safe by ``csv_cell``; read back and checked to hold as many rows and fields as given (ValueError if not)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: csv_cell(row.get(k)) for k in fields} for row in rows)
    text = buffer.getvalue()
    back = list(csv.reader(io.StringIO(text)))
    if back[:1] != [list(fields)] or len(back) != len(rows) + 1 or any(len(r) != len(fields) for r in back):
        raise ValueError("the CSV written does not read back as the table it was made from; nothing was replaced")
    return text
