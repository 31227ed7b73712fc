"""Issue 41 hole 6: a journal refusal says what was seen (checkers/journal.py check_signature,
used by both journals).

  * a line edited in place (any field, its run fingerprint included) no longer matches its
    checksum: "checksum mismatch ... edited in place or corrupted", never "copied from another
    journal";
  * an intact line (its checksum holds) that names another run: "belongs to another run ...
    copied from another journal", never "edited".

Both through verify-construction's journal (the exact kernel's) and verify-model's (accuracy).
"""
from __future__ import annotations

import json

import pytest

from depthcert.checkers.journal import line_checksum
from test_journal_integrity import edit, files, refused, written  # noqa: F401 (files: a fixture)

EDITED = "checksum mismatch: the line's contents differ from what its checksum records, so it was edited in place"
COPIED = "the line is intact (its checksum holds) but belongs to another run"


@pytest.mark.parametrize("changes", [{"checked": 499}, {"run": "0" * 64}, {"min_index": 3, "run": "f" * 64}])
def test_a_line_edited_in_place_is_an_edit_not_a_splice(capsys, files, changes):  # noqa: F811
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    lines[2] = edit(lines[2], False, **changes)
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 3, EDITED)
    assert "copied" not in capsys.readouterr().err


def test_an_intact_line_of_another_run_is_a_copy_not_an_edit(capsys, files):  # noqa: F811
    tmp, w = files
    _, bad_lines = written(capsys, tmp, w["bad"], "jbad")
    j, lines = written(capsys, tmp, w["good"])
    lines[1] = bad_lines[1]
    j.write_text("\n".join(lines))
    refused(capsys, w["good"], j, 2, COPIED)


def test_check_signature_names_what_it_saw():
    from depthcert.checkers.errors import BadInput
    from depthcert.checkers.journal import check_signature

    line = {"run": "a" * 64, "lo": 0, "hi": 10}
    line["sum"] = line_checksum(line)
    check_signature(line, "a" * 64, "here")  # intact, this run: accepted
    with pytest.raises(BadInput, match="intact .* another run"):
        check_signature(line, "b" * 64, "here")
    for edited in (dict(line, hi=11), dict(line, run="b" * 64)):
        for run_id in ("a" * 64, "b" * 64):
            with pytest.raises(BadInput, match="edited in place") as exc:
                check_signature(edited, run_id, "here")
            assert "copied" not in str(exc.value)


def test_verify_model_journal_line_edited_in_place(tmp_path, capsys):
    """The accuracy journal: a line's run fingerprint edited in place (checksum not recomputed)."""
    from test_trained_models import CHECKPOINT, _journal_lines, _rewrite, run

    j = str(tmp_path / "run.journal")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "1000", "--json",
            "--journal", j]
    assert run(argv, capsys)[0] == 1  # refuted: some points wrong
    _rewrite(j, 3, False, run="0" * 64)
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith(f"error: journal {j} line 3: ") and EDITED in err and "copied" not in err, err
    assert json.loads(open(j).read().splitlines()[2])["run"] == "0" * 64  # the journal is left as it was


def test_a_header_edited_in_place_is_not_only_called_another_run(capsys, files):  # noqa: F811
    """A header whose model fingerprint was edited in place: the line says the fingerprint is not this
    run's and that the header may have been edited, not only that another model wrote it."""
    tmp, w = files
    j, lines = written(capsys, tmp, w["good"])
    head = json.loads(lines[0])
    head["model"] = "0" * 64
    lines[0] = json.dumps(head)
    j.write_text("\n".join(lines))
    from test_journal_integrity import run

    code, out, err = run(capsys, w["good"], j)
    assert code == 2 and out is None and err.count("\n") == 1
    assert err.startswith(f"error: journal {j} line 1: its model fingerprint is not this run's") and "header edited" in err
