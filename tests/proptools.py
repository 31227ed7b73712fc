"""Example counts of the property suite, scaled by the active hypothesis profile.

Every property of tests/test_properties_*.py is decorated with `prop(n)`: n examples in the
"ci" profile (the default, see tests/conftest.py), n * 10 in the "deep" profile
(`python -m pytest --hypothesis-profile=deep`).  A test that pins `max_examples` in a plain
@settings overrides every profile; `prop` scales the pinned count instead, so the deep profile
really runs more examples of every property.

The factor is the active profile's max_examples over the ci profile's (100): a profile
registered with max_examples=300 runs every property 3x.
"""
from __future__ import annotations

from hypothesis import HealthCheck, settings

CI_MAX_EXAMPLES = 100  # max_examples of the "ci" profile: the unit of the scale factor


def scale() -> float:
    """How many times the ci counts the active profile runs."""
    return settings.default.max_examples / CI_MAX_EXAMPLES


def scaled(n: int) -> int:
    """n examples in the ci profile, scaled by the active one (at least 1)."""
    return max(1, round(n * scale()))


def prop(n: int, **kw) -> settings:
    """@prop(n): settings for a property with n examples in the ci profile (scaled)."""
    base = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.filter_too_much])
    base.update(kw)
    return settings(max_examples=scaled(n), **base)
