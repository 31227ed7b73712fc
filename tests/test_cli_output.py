"""Printed numbers say exactly what was shown: outward-rounded enclosure ends stay on the right
side of the exact value (whatever carry rounding causes), and long exact margins get a short
decimal beside them (never instead of them)."""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings, strategies as st

from depthcert.checkers.rational import exact_text, short_decimal
from depthcert.cli.common import bound_text

fractions = st.builds(Fraction, st.integers(-10**40, 10**40), st.integers(1, 10**40))


@settings(max_examples=400, deadline=None)
@given(fractions, st.integers(1, 15))
def test_bound_text_rounds_outward_to_the_requested_digits(q, digits):
    lo, hi = Fraction(Decimal(bound_text(q, up=False, digits=digits))), Fraction(Decimal(bound_text(q, up=True, digits=digits)))
    assert lo <= q <= hi
    if q != 0:  # and tightly: within one unit of the last digit kept
        assert hi - lo <= abs(q) * Fraction(2, 10 ** (digits - 1))


def test_bound_text_carry_regressions():
    assert bound_text(Fraction(99999999999, 10**11), up=True) == "1e+0"
    assert bound_text(Fraction(-99999999999, 10**11), up=False) == "-1e+0"
    assert bound_text(Fraction(1, 3), up=False) == "3.333333333e-1"


def test_long_exact_numbers_also_print_a_short_decimal():
    q = Fraction(661607728557823123691, 15807928823176436959040)
    assert exact_text(q) == f"{q.numerator}/{q.denominator} (~4.185e-2)"
    assert exact_text(Fraction(98, 233)) == "98/233"
    assert short_decimal(Fraction(-3, 10**500)) == "-3.000e-500"
    assert short_decimal(Fraction(10**600 + 1)) == "1.000e+600"
