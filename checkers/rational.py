"""Exact numbers in files: ints, or "p/q" strings, parsed strictly into Fractions."""
from __future__ import annotations

import math
import re
from fractions import Fraction

from depthcert.checkers.errors import BadInput

# ASCII digits only: "\d" would also accept e.g. Arabic-Indic digits, which int() reads silently
_RATIONAL = re.compile(r"^\s*([+-]?[0-9]+)\s*(?:/\s*([0-9]+)\s*)?$", re.ASCII)
MAX_DIGITS = 4000  # inputs: below Python's default int/str conversion limit (4300 digits)


def parse_rational(value, where: str) -> Fraction:
    """Parse an int or a "p/q" / "p" string; bools, floats, NaN, inf and q = 0 are rejected."""
    if isinstance(value, bool):
        raise BadInput(f"{where}: expected an int or a 'p/q' string, got {value!r}")
    if isinstance(value, int):
        if value.bit_length() > MAX_DIGITS * 10 // 3:
            raise BadInput(f"{where}: a number with more than {MAX_DIGITS} digits")
        return Fraction(value)
    if isinstance(value, str):
        m = _RATIONAL.match(value)
        if not m:
            raise BadInput(f"{where}: {value!r} is not an exact rational (int or 'p/q')")
        if len(m.group(1)) > MAX_DIGITS or len(m.group(2) or "") > MAX_DIGITS:
            raise BadInput(f"{where}: a number with more than {MAX_DIGITS} digits")
        num, den = int(m.group(1)), int(m.group(2) or 1)
        if den == 0:
            raise BadInput(f"{where}: zero denominator in {value!r}")
        return Fraction(num, den)
    raise BadInput(f"{where}: expected an int or a 'p/q' string, got {type(value).__name__} {value!r}")


def format_rational(q) -> int | str:
    """An int when integral, otherwise "p/q"."""
    q = Fraction(q)
    return q.numerator if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def short_decimal(q) -> str:
    """4 significant digits of an exact rational in scientific notation (huge ones included):
    an approximation for reading, printed beside the exact value, never instead of it."""
    q = Fraction(q)
    if q == 0:
        return "0"
    a = abs(q)
    if a.numerator.bit_length() + a.denominator.bit_length() > LOG_DECIMAL_BITS:
        return ("-" if q < 0 else "") + _log_decimal(a)
    e = len(str(a.numerator)) - len(str(a.denominator))
    if Fraction(10) ** e > a:
        e -= 1
    text = f"{float(a / Fraction(10) ** e):.3f}"
    if text == "10.000":  # 9.9996.. rounds up to the next power of ten
        text, e = "1.000", e + 1
    return ("-" if q < 0 else "") + f"{text}e{e:+d}"


LOG_DECIMAL_BITS = 20_000  # larger numbers: short_decimal reads their leading bits only


def _log_decimal(a: Fraction) -> str:
    """short_decimal of a positive rational from the 64 leading bits of its numerator and
    denominator and their bit lengths: linear time, no decimal string or power of ten of the
    number's size is built (a 10^7-digit margin would take minutes).  Accurate to far better than
    the 4 digits shown (the exponent's float error is below 1e-6 up to 2^(10^9))."""
    n, d = a.numerator, a.denominator
    sn, sd = max(0, n.bit_length() - 64), max(0, d.bit_length() - 64)
    lg = math.log10(n >> sn) - math.log10(d >> sd) + (sn - sd) * math.log10(2)
    e = math.floor(lg)
    mant = 10 ** (lg - e)
    if f"{mant:.3f}" == "10.000":
        mant, e = 1.0, e + 1
    return f"{mant:.3f}e{e:+d}"


def exact_text(q, long: int = 30) -> str:
    """An exact number as text; one longer than `long` characters also as a short decimal."""
    text = str(format_rational(q))
    return text + f" (~{short_decimal(q)})" if len(text) > long else text


def decimal_text(q, digits: int = 10) -> str:
    """An exact rational as a decimal for reading: exact when it has at most `digits`
    significant digits, otherwise rounded to nearest at `digits` (never instead of the exact value)."""
    q = Fraction(q)
    from decimal import Context, Decimal

    ctx = Context(prec=digits, Emax=10**9, Emin=-10**9)
    d = ctx.divide(Decimal(q.numerator), Decimal(q.denominator))
    text = str(d.normalize(ctx)) if d != 0 else "0"
    if "E" in text:
        mant, exp = text.split("E")
        e = int(exp)
        if -6 <= e <= 0 or 0 < e < digits and "." not in mant:  # plain notation when short
            text = format(d.normalize(ctx), "f")
        else:
            text = f"{mant}e{e:+d}"
    return text
