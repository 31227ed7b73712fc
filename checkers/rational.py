"""Exact numbers in files: ints, or "p/q" strings, parsed strictly into Fractions."""
from __future__ import annotations

import re
from fractions import Fraction

from checkers.errors import BadInput

_RATIONAL = re.compile(r"^\s*([+-]?\d+)\s*(?:/\s*(\d+)\s*)?$")


def parse_rational(value, where: str) -> Fraction:
    """Parse an int or a "p/q" / "p" string; bools, floats, NaN, inf and q = 0 are rejected."""
    if isinstance(value, bool):
        raise BadInput(f"{where}: expected an int or a 'p/q' string, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, str):
        m = _RATIONAL.match(value)
        if not m:
            raise BadInput(f"{where}: {value!r} is not an exact rational (int or 'p/q')")
        num, den = int(m.group(1)), int(m.group(2) or 1)
        if den == 0:
            raise BadInput(f"{where}: zero denominator in {value!r}")
        return Fraction(num, den)
    raise BadInput(f"{where}: expected an int or a 'p/q' string, got {type(value).__name__} {value!r}")


def format_rational(q) -> int | str:
    """An int when integral, otherwise "p/q"."""
    q = Fraction(q)
    return q.numerator if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
