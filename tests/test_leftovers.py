"""Small defects, each pinned: verify-construction --point under --max-seconds, exact
PathsDisagree messages, undecided reasons kept by the journals."""
from __future__ import annotations

import json
import random
import time

from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction

STOPPED_WITHIN = 10  # a run under --max-seconds 1 stops within this (about 1 s unloaded)


def _big_icqa_weights(tmp_path):
    """ICQA k=2's weights with every non-zero attention entry a rational of ~4,000 digits: one
    point's exact evaluation takes seconds to minutes (its numbers have no float64 path)."""
    from depthcert.checkers.tasks import make_task
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.constructions import registry

    rng = random.Random(1)
    w = model_to_json(registry.build(make_task("icqa", k=2), None).model)

    def big(x):
        return x if x in (0, "0") else f"{rng.randrange(10 ** 3990, 10 ** 3995)}/{rng.randrange(10 ** 3990, 10 ** 3995)}"

    for layer in w["layers"]:
        for head in layer:
            head["W_QK"] = [[big(x) for x in row] for row in head["W_QK"]]
            head["W_V"] = [[big(x) for x in row] for row in head["W_V"]]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(w))
    return path


def test_one_point_stops_at_max_seconds(tmp_path, capsys):
    """`--point N` evaluates under --max-seconds as the whole run does: weights of thousands of
    digits ran one point for minutes past --max-seconds 1 (exit 0 long after the limit)."""
    path = _big_icqa_weights(tmp_path)
    t0 = time.perf_counter()
    code = run_main(_verify_construction, ["icqa", "--k", "2", "--weights", str(path), "--point", "3",
                                           "--max-seconds", "1"])
    seconds = time.perf_counter() - t0
    out = capsys.readouterr()
    assert code == 2 and not out.out, (code, out)
    assert "evaluating point 3 ran past the limit of 1 s" in out.err and "--max-seconds" in out.err, out.err
    assert len(out.err.strip().splitlines()) == 1 and seconds < STOPPED_WITHIN


def test_one_point_within_the_limit_is_shown(capsys):
    code = run_main(_verify_construction, ["icqa", "--k", "2", "--point", "3", "--max-seconds", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "correct" and out["point"] == 3
