"""Journals that cannot lie (issue 22, item 5; checkers/journal.py).

A journal written by a real run is edited the ways the issue names -- a chunk's margin, its
`checked` count, a forged counterexample, a line spliced from another model's journal, a
garbage or truncated line, an old version -- and resumed with verify-construction.  Every edit
either gives exit 2 with one line naming the journal line, or (where it changes nothing the
verdict rests on) the verdict of a fresh run.  Edits are made both raw (the checksum catches
them) and with the checksum recomputed (the count checks and the re-evaluation of the recorded
points catch them)."""
from __future__ import annotations

import json

import pytest

from depthcert.checkers.journal import line_checksum
from depthcert.checkers.tasks import make_task
from depthcert.checkers.weights_file import model_to_json
from depthcert.constructions import registry
from depthcert.cli import verify_construction as cli

TASK = make_task("multihop", hops=2, k=3, n_entities=4)  # 1944 points: 4 chunks of 500
GOOD = registry.build(TASK, "linear").model
BAD = GOOD.with_weight(("W_O", 1, GOOD.layout.index("dst", 2)), 2)  # fails at a point of the first chunk
SIZES = ["multihop", "--hops", "2", "--k", "3", "--n-entities", "4", "--symmetry", "off", "--workers", "1",
         "--chunk-points", "500", "--json"]


@pytest.fixture()
def files(tmp_path):
    paths = {}
    for name, model in (("good", GOOD), ("bad", BAD)):
        w = tmp_path / f"{name}.json"
        w.write_text(json.dumps(model_to_json(model)))
        paths[name] = str(w)
    return tmp_path, paths


def run(capsys, weights, journal=None):
    argv = SIZES + ["--weights", weights] + (["--journal", str(journal)] if journal else [])
    code = cli.run_main(cli._verify_construction, argv)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out else None), out.err


def written(capsys, tmp_path, weights, name="j"):
    """A journal of a full run of `weights`; its lines."""
    j = tmp_path / name
    code, _, err = run(capsys, weights, j)
    assert code in (0, 1) and err == "", err
    return j, j.read_text().split("\n")


def edit(line: str, resum: bool, **changes) -> str:
    obj = json.loads(line)
    obj.update(changes)
    if resum:
        obj["sum"] = line_checksum(obj)
    return json.dumps(obj)


def refused(capsys, weights, j, line: int, needle: str):
    code, out, err = run(capsys, weights, j)
    assert code == 2 and out is None, (code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"error: journal {j} line {line}: ") and needle in err, err


def same_as_fresh(capsys, weights, j, from_journal: int):
    code, out, err = run(capsys, weights, j)
    fresh_code, fresh, _ = run(capsys, weights)
    assert err == "" and code == fresh_code
    for key in ("verdict", "min_margin", "points_checked", "points_covered", "counterexample"):
        assert out.get(key) == fresh.get(key), key
    assert out["journal"]["from_journal"] == from_journal and out["journal"]["chunks"] == 4
    return out


# ------------------------------------------------------------------ edits that must be refused

@pytest.mark.parametrize("resum,needle", [(False, "checksum mismatch"), (True, "positive minimum margin")])
def test_margin_edited_negative(capsys, files, resum, needle):
    """Before: VERIFIED with "min margin -7" (exit 0)."""
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], resum, min_num="-0x7")
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, needle)


def test_margin_raised_is_caught_by_re_evaluation(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[3] = edit(lines[3], True, min_num="0x5")
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 4, "re-evaluated has margin numerator 1, the journal records 5")


@pytest.mark.parametrize("resum,needle", [(False, "checksum mismatch"), (True, "499 of its 500 points checked")])
def test_checked_count_edited(capsys, files, resum, needle):
    """Before: REFUTED (exit 1) with no counterexample at all."""
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], resum, checked=499)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, needle)


def test_forged_counterexample(capsys, files):
    """Before: REFUTED with a counterexample whose own logits show the label winning."""
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], True, bad_index=700, checked=201, min_num="-0x1", min_index=700)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, "counterexample 700 re-evaluated has margin numerator 1")


def test_forged_counterexample_with_inconsistent_count(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], True, bad_index=700, checked=500, min_num="-0x1", min_index=700)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, "records point 700 as its first failure but checked 500 points")


def test_one_point_is_singular_in_the_refusal(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], True, bad_index=700, checked=1, min_num="-0x1", min_index=700)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, "as its first failure but checked 1 point, the last of which is point 500")


def test_line_spliced_from_another_models_journal(capsys, files):
    tmp, w = files
    _, bad_lines = written(capsys, tmp, w["bad"], "jbad")
    j, lines = written(capsys, tmp, w["good"])
    lines[1] = bad_lines[1]  # the tampered model's failing first chunk
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 2, "belongs to another run")
    # with the run fingerprint and the checksum rewritten: the recorded counterexample is re-evaluated
    lines[1] = edit(bad_lines[1], True, run=json.loads(lines[2])["run"])
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 2, "counterexample")


def test_good_chunks_spliced_into_a_failing_run(capsys, files):
    """The other direction: the good model's verified chunks would hide the tampered model's failure.
    (With every line's fingerprint and checksum recomputed by a deliberate forger, a chunk whose
    recorded minimum-margin point has the same margin in both models would pass: the limit stated
    in checkers/journal.py.)"""
    tmp, w = files
    _, good_lines = written(capsys, tmp, w["good"], "jgood")
    j, lines = written(capsys, tmp, w["bad"])
    j.write_text("\n".join([lines[0]] + good_lines[1:]))
    refused(capsys, w["bad"], j, 2, "belongs to another run")


@pytest.mark.parametrize("garbage", ["garbage", "{}", '{"lo": 0}', "[1, 2]", "\xff"])
def test_garbage_line_in_the_middle(capsys, files, garbage):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    j.write_text("\n".join(lines[:2] + [garbage] + lines[2:]))
    refused(capsys, w["good"], j, 3, "line")


@pytest.mark.parametrize("lo,hi", [(250, 750), (0, 400), (2000, 2500)])
def test_chunk_not_of_this_run(capsys, files, lo, hi):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[1] = edit(lines[1], True, lo=lo, hi=hi)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 2, "is not a chunk of this run")


@pytest.mark.parametrize("changes,needle", [
    ({"min_num": "1"}, "hexadecimal"),
    ({"min_num": None}, "no minimum margin"),
    ({"checked": 0}, "records 0 points checked"),
    ({"checked": 501}, "records 501 points checked"),
    ({"bad_index": -2}, "neither -1"),
    ({"batches": [-1, 0]}, "batches two counts"),
    ({"lo": "500"}, "must be integers"),
    ({"extra": 1}, "not a chunk line of journal version 3"),
], ids=lambda x: json.dumps(x) if isinstance(x, dict) else None)
def test_malformed_fields_with_checksum_recomputed(capsys, files, changes, needle):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], True, **changes)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, needle)


def test_repeated_chunk_with_other_results(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    j.write_text("\n".join(lines[:-1] + [edit(lines[2], True, min_index=501)]) + "\n")
    refused(capsys, w["good"], j, 6, "already recorded on line 3")


@pytest.mark.parametrize("version", [1, 2, 4, "3"])
def test_other_version(capsys, files, version):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    head = json.loads(lines[0])
    head["version"] = version
    j.write_text("\n".join([json.dumps(head)] + lines[1:]))
    refused(capsys, w["good"], j, 1, "start a new journal file")


def test_version_1_journal_is_refused(capsys, files):
    """A journal as version 1 wrote it (no fingerprint or checksum on chunk lines)."""
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    head = json.loads(lines[0])
    head["version"] = 1
    old = [json.dumps({"lo": 0, "hi": 500, "checked": 500, "min_num": "-7", "bad_index": -1, "batches": [0, 0]})]
    j.write_text("\n".join([json.dumps(head)] + old) + "\n")
    refused(capsys, w["good"], j, 1, "version 1")


# ------------------------------------------------------------------ edits that change nothing the verdict rests on

def test_untouched_journal_resumes_every_chunk(capsys, files):
    tmp, w = files
    j, _ = written(capsys, tmp, w["good"])
    out = same_as_fresh(capsys, w["good"], j, 4)
    assert out["journal"]["points_re_evaluated"] == 4


def test_failing_run_resumes_to_the_same_counterexample(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["bad"])
    out = same_as_fresh(capsys, w["bad"], j, 1)
    assert out["verdict"] == "refuted" and out["counterexample"]["index"] == json.loads(lines[1])["bad_index"]


def test_truncated_last_line_is_redone_and_cut_off(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    j.write_text("\n".join(lines[:4]) + "\n" + lines[4][:60])  # a crash in the middle of the last append
    same_as_fresh(capsys, w["good"], j, 3)
    assert j.read_text().split("\n")[4] != lines[4][:60]  # the partial line was cut off, the chunk re-recorded
    same_as_fresh(capsys, w["good"], j, 4)


def test_deleted_line_is_recomputed(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    j.write_text("\n".join(lines[:2] + lines[3:]))
    same_as_fresh(capsys, w["good"], j, 3)


def test_batch_counts_and_identical_repeat_are_harmless(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], True, batches=[7, 1])  # bookkeeping only (which path ran the batches)
    j.write_text("\n".join(lines[:-1] + [lines[2]]) + "\n")
    same_as_fresh(capsys, w["good"], j, 4)


def test_human_output_says_how_many_chunks_came_from_the_journal(capsys, files):
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    j.write_text("\n".join(lines[:3]) + "\n")
    code = cli.run_main(cli._verify_construction, [a for a in SIZES if a != "--json"] +
                        ["--weights", w["good"], "--journal", str(j)])
    out = capsys.readouterr().out
    assert code == 0 and f"journal {j}: 2 of 4 chunks came from the journal" in out, out
