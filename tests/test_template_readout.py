"""head_family.template_readout (hits counted per distinct weight by np.bincount, one Fraction per
distinct entry value) against the definition: for every point (s, y) and h < count, row y gets w at
row offset(h) + s_h, added up in Fractions point by point."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.tasks import make_task
from depthcert.constructions.head_family import Template, template_readout


def _reference(template: Template, task, dim: int) -> list:
    W = [[Fraction(0)] * dim for _ in task.classes]
    at = [template.at(h) for h in range(template.count)]
    for batch in task.batches(97):
        for s, y in zip(batch.ids.tolist(), batch.labels.tolist()):
            for h, (offset, w) in enumerate(at):
                W[y][offset + s[h]] += Fraction(w)
    return W


@pytest.mark.parametrize("length,alphabet,n_points", [(3, 3, None), (5, 2, None), (4, 4, 50), (8, 3, 5000)])
@pytest.mark.parametrize("weights", ["one", "two", "per position"])
def test_template_readout_is_the_definition(length, alphabet, n_points, weights):
    task = make_task("sc", length=length, alphabet=alphabet, n_points=n_points)
    M = alphabet + 1
    w = {"one": lambda h: 1, "two": lambda h: Fraction(1, 3) if h % 2 else 2,
         "per position": lambda h: Fraction(h + 1, 5)}[weights]
    # overlapping blocks (offset h * 2 with blocks of M rows): entries collect several positions' weights
    template = Template(length, lambda h: (h * 2, w(h)))
    dim = 2 * (length - 1) + M + 3
    W = template_readout(template, task, dim)
    assert W.shape == (task.size, dim) and not W.flags.writeable
    assert W.tolist() == _reference(template, task, dim)
    assert {type(v) for v in W.flat} == {Fraction}


def test_a_read_out_row_outside_the_stream_is_refused():
    task = make_task("sc", length=3, alphabet=3)
    with pytest.raises(ValueError, match="outside the stream"):
        template_readout(Template(3, lambda h: (h * 4, 1)), task, 10)
