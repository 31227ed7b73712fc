"""Which tracr settings a program needs: searches over verify-tracr's exact verdicts.

find_min_exactness  the smallest mlp_exactness found to verify at the given length: doubling from
                    1 until one verifies (up to a cap), then bisection between the last value not
                    verified and the first verified one; the answer e comes with e - 1 not verified
                    (refuted, or undecided at the ball precision cap; each value an
                    exact verify-tracr verdict; verdicts need not be monotone in e, so e is the
                    boundary this search meets, and every value it tried is listed).
find_max_length     the largest length L such that every length 1..L verifies at the given
                    settings: lengths 1, 2, ... checked in turn (each compiled at that length)
                    until one fails or the cap is reached.
"""
from __future__ import annotations

from depthcert.checkers.errors import BadInput

MAX_EXACTNESS = 1 << 20


def _verdict(check, **kw) -> str:
    res = check(**kw)
    return {0: "verified", 1: "refuted", 3: "undecided"}.get(res.status, f"exit {res.status}")


def find_min_exactness(check, start: int = 1, cap: int = MAX_EXACTNESS) -> dict:
    """check(mlp_exactness=e) -> Result; returns the search record."""
    tried: dict[int, str] = {}

    def run(e):
        if e not in tried:
            tried[e] = _verdict(check, mlp_exactness=e)
        return tried[e] == "verified"

    low, e = None, start  # low: the largest value seen refuted below the first verified one
    while e <= cap and not run(e):
        low, e = e, e * 2
    if e > cap:
        return {"mlp_exactness": None, "note": f"no value up to {cap} verifies", "tried": _listing(tried)}
    high = e
    if low is None:
        return {"mlp_exactness": high, "fails_at": None, "note": f"{high} is where the search starts",
                "tried": _listing(tried)}
    while high - low > 1:
        mid = (low + high) // 2
        if run(mid):
            high = mid
        else:
            low = mid
    return {"mlp_exactness": high, "fails_at": low, "tried": _listing(tried)}


def find_max_length(check, cap: int) -> dict:
    """check(max_seq_len=L) -> Result, for L = 1..cap in turn."""
    if cap < 1:
        raise BadInput("--find-max length needs --max-seq-len >= 1 (the cap)")
    tried: dict[int, str] = {}
    for L in range(1, cap + 1):
        tried[L] = _verdict(check, max_seq_len=L)
        if tried[L] != "verified":
            return {"max_length": L - 1 if L > 1 else None, "fails_at": L, "tried": _listing(tried)}
    return {"max_length": cap, "fails_at": None, "note": f"every length up to the cap {cap} verifies",
            "tried": _listing(tried)}


def _listing(tried: dict) -> dict:
    return {str(k): v for k, v in sorted(tried.items())}
