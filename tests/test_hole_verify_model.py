"""Issue 41 hole 5 and issue 42's verify-model items.

  * a TransformerLens config key that is not a HookedTransformerConfig field (a typo such as
    normalisation_type) is named in one warning line; --strict-config refuses it (exit 2, one
    line); the repository's own checkpoints, whose configs carry depthcert's training records,
    get no warning;
  * a task that uses fewer tokens or positions than the checkpoint has says so in one line ("the
    inputs use 10 of the checkpoint's 64 tokens"); a task that needs more is refused (exit 2);
  * per-position labels: a TransformerLens checkpoint is read at every position (its logits are
    computed there); a weights file that classifies the last position only is refused with a line
    that says which field to set;
  * exit codes as every command's: a refuted model exits 1 with or without --require-all (which is
    accepted and changes nothing), a verified one 0; every option has help text; "1 point".
"""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKPOINT = os.path.join(ROOT, "training", "checkpoints", "max_of_k_v64_k4.safetensors")
EX = os.path.join(ROOT, "docs", "examples")
K2 = ["--task", "max-of-k", "--vocab", "64", "--k", "2"]


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main

    code = run_main(_main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def typo_checkpoint(tmp_path_factory):
    """The Max-of-K checkpoint with the config key normalisation_type (British spelling) added."""
    from depthcert.interop.transformerlens import read_checkpoint, write_checkpoint

    cfg, sd = read_checkpoint(CHECKPOINT)
    path = str(tmp_path_factory.mktemp("typo") / "typo.safetensors")
    write_checkpoint(path, dict(cfg, normalisation_type="LN"), {k: v.astype("float32") for k, v in sd.items()})
    return path


def test_the_known_fields_are_the_installed_transformerlens_ones():
    tl = pytest.importorskip("transformer_lens")
    from depthcert.interop.transformerlens import TL_FIELDS, TL_VERSION

    assert {f.name for f in dataclasses.fields(tl.HookedTransformerConfig)} == TL_FIELDS
    from importlib.metadata import version

    assert version("transformer-lens") == TL_VERSION


def test_an_unknown_config_key_is_named_in_one_warning_line(typo_checkpoint, capsys):
    code, out, err = _run([typo_checkpoint] + K2, capsys)
    assert code == _run([CHECKPOINT] + K2, capsys)[0] == 1
    assert err.count("\n") == 1 and err.startswith("warning: ignored TransformerLens config key that is not a "
                                                   "HookedTransformerConfig field") and "normalisation_type" in err
    code, out, err = _run([typo_checkpoint] + K2 + ["--json"], capsys)
    assert json.loads(out)["ignored_config_keys"] == ["normalisation_type"] and err.count("\n") == 1


def test_strict_config_refuses_it(typo_checkpoint, capsys):
    code, out, err = _run([typo_checkpoint] + K2 + ["--strict-config"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: --strict-config: ") and "normalisation_type" in err


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(ROOT, "training", "checkpoints"))))
def test_the_repositorys_own_checkpoints_get_no_warning(name):
    from depthcert.interop.transformerlens import read_checkpoint, unknown_config_keys

    path = os.path.join(ROOT, "training", "checkpoints", name)
    if os.path.isdir(path):  # a Hugging Face save_pretrained folder (training/llama_modadd.py): its config.json
        from depthcert.interop.huggingface import config_warning, read_folder

        cfg, _ = read_folder(path)
        assert config_warning(cfg)[0] == []
        assert config_warning(dict(cfg, layer_norm_eps=1e-5))[0] == ["layer_norm_eps"]
        return
    cfg, _ = read_checkpoint(path)
    assert unknown_config_keys(cfg) == []
    assert unknown_config_keys(dict(cfg, normalisation_type="LN")) == ["normalisation_type"]


def test_fewer_tokens_and_positions_are_stated_in_one_line(capsys):
    code, out, err = _run([CHECKPOINT, "--task", "max-of-k", "--vocab", "10", "--k", "2"], capsys)
    lines = [x for x in out.splitlines() if x.startswith("inputs ")]
    assert len(lines) == 1 and "the inputs use 10 of the checkpoint's 64 tokens and 2 of its 4 positions" in lines[0]
    code, out, err = _run([CHECKPOINT, "--task", "max-of-k", "--vocab", "10", "--k", "2", "--json"], capsys)
    assert json.loads(out)["inputs"].startswith("the inputs use 10 of the checkpoint's 64 tokens")


def test_a_task_using_every_token_and_position_prints_no_inputs_line(capsys):
    code, out, err = _run([os.path.join(EX, "prev-token-softmax-20.json"), "--dataset",
                           os.path.join(EX, "prev-token-data.json")], capsys)
    assert code == 0 and "inputs " not in out


@pytest.mark.parametrize("extra,needle", [(["--vocab", "100", "--k", "2"], "model vocabulary lacks 36 tokens"),
                                          (["--vocab", "4", "--k", "5"], "model has 4 positions but task")])
def test_a_task_needing_more_than_the_checkpoint_has_is_refused(capsys, extra, needle):
    code, out, err = _run([CHECKPOINT, "--task", "max-of-k"] + extra, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err


def test_per_position_labels_read_a_transformerlens_checkpoint_at_every_position(tmp_path, capsys):
    """A checkpoint without depthcert's names (outputs not recorded) and a dataset labelling every
    position: decided at every position (it was refused with 'give it outputs "all"', an option
    verify-model does not have)."""
    from depthcert.checkers.weights_file import load_weights
    from depthcert.interop.transformerlens import export_state_dict, write_checkpoint

    cfg, state = export_state_dict(load_weights(os.path.join(EX, "prev-token-softmax-20.json"), None))
    path = str(tmp_path / "plain.safetensors")
    write_checkpoint(path, cfg, state)
    code, out, err = _run([path, "--dataset", os.path.join(EX, "prev-token-data.json")], capsys)
    assert code == 0 and err == "" and "certified accuracy 81/81" in out


def test_per_position_labels_on_a_last_position_weights_file_name_the_field(tmp_path, capsys):
    doc = json.load(open(os.path.join(EX, "prev-token-softmax-20.json")))
    doc["outputs"] = "last"
    path = tmp_path / "last.json"
    path.write_text(json.dumps(doc))
    code, out, err = _run([str(path), "--dataset", os.path.join(EX, "prev-token-data.json")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert 'add "outputs": "all" to the file' in err and "give it" not in err


@pytest.mark.parametrize("extra", [[], ["--require-all"]])
def test_a_refuted_model_exits_1_with_or_without_require_all(capsys, extra):
    code, out, err = _run([os.path.join(EX, "prev-token-softmax-1.json"), "--dataset",
                           os.path.join(EX, "prev-token-data.json")] + extra, capsys)
    assert code == 1 and "verdict        refuted" in out
    code, out, err = _run([os.path.join(EX, "prev-token-softmax-20.json"), "--dataset",
                           os.path.join(EX, "prev-token-data.json")] + extra, capsys)
    assert code == 0 and "verdict        verified" in out


def test_the_exit_codes_the_help_lists_are_the_ones_it_uses():
    from depthcert.cli.errors import EXIT_CODES

    codes = EXIT_CODES["verify-model"]
    assert "with --require-all" not in codes[1] and "certainly wrong" in codes[1]


def test_every_option_has_help_text(monkeypatch):
    from depthcert.cli import verify_model
    from depthcert.cli.common import _Parser

    seen = []
    real = _Parser.parse_args

    def capture(self, argv=None, namespace=None):
        seen.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(_Parser, "parse_args", capture)
    with pytest.raises(SystemExit):
        verify_model._main(["x"])
    monkeypatch.setattr(_Parser, "parse_args", real)
    missing = [a.option_strings or a.dest for a in seen[0]._actions if not a.help]
    assert missing == []


def test_one_point_is_singular(tmp_path, capsys):
    d = tmp_path / "one.json"
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 2, "sequences": [["a", "b", "c", "a"]],
                             "labels": [[None, "a", "b", "c"]]}))
    code, out, err = _run([os.path.join(EX, "prev-token-softmax-20.json"), "--dataset", str(d)], capsys)
    assert err == "" and "(1 point)" in out and "1 points" not in out
