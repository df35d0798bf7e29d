"""Tests for ``syntaxnmt demo``: it ends with a BLEU however little training its budget allows,
warns when that is too little to mean much, and says so when a re-run finds its training finished."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cli import run_cli

from syntaxnmt.checkpoint import load_checkpoint, save_checkpoint
from syntaxnmt.data.synthetic import write_corpus
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.demo import MARKER, WRITTEN_BY, refuse_to_remove
from syntaxnmt.textio import write_marker

TINY = ["--model.d_model=32", "--model.heads=2", "--model.ffn_dim=64", "--model.enc_layers=1", "--model.dec_layers=1", "--train.threads=1", "--train.tensorboard=false", "--decode.beam_size=2"]
WARNING = re.compile(
    r"syntaxnmt: warning: the demo trained (\d+) updates?, fewer than the 300 it needs for a meaningful score \(the end of its learning-rate warm-up\), "
    r"so BLEU \d+\.\d\d says little; continue the run with `syntaxnmt demo --dir (\S+) --minutes (\d+)` \(--minutes is the total training time: "
    r"about 300 updates at this machine's speed\), or start over with --fresh"
)


def _demo(capsys, directory: Path, *argv: str) -> tuple[str, list[str]]:
    """Run the demo; (stdout, its warnings on stderr)."""
    code, out, err = run_cli(capsys, "demo", "--dir", directory, *argv, *TINY)
    assert code == 0, err
    return out, [line for line in err.splitlines() if line.startswith("syntaxnmt: warning:")]


def test_demo_on_a_slow_machine_prints_a_bleu_warns_and_a_rerun_says_it_is_finished(tmp_path, capsys):
    """A budget far too short for the first validation (update 200), as on a machine many times
    slower than a quiet one: the demo still translates and scores, and warns that its score says
    little; running it again (budget spent) says the training is finished, trains no further, and
    scores again."""
    directory = tmp_path / "demo"
    write_corpus(directory / "corpus", n_train=300, n_dev=20, n_test=10, seed=1)  # the demo reuses a corpus it finds
    write_marker(directory, MARKER, WRITTEN_BY)  # in its own folder
    for run in range(2):
        out, warnings = _demo(capsys, directory, "--minutes", "0.001")
        assert "test (10 sentences, beam 2): BLEU = " in out, out
        steps = re.search(r"stopped \(max_minutes\) at update (\d+),", out)  # 1 or 2 updates: the clock decides
        assert steps, out
        assert ("resumed" in out) == (run == 1)
        finished = f"the demo's training in {directory}/run is finished (its 0.001-minute training budget was spent at update {steps.group(1)})"
        assert (finished in out) == (run == 1), out
        assert len(warnings) == 1 and WARNING.fullmatch(warnings[0]), warnings
        trained, where, minutes = WARNING.fullmatch(warnings[0]).groups()
        assert trained == steps.group(1) and where == str(directory) and int(minutes) >= 1
    assert len((directory / "test.hyp").read_text(encoding="utf-8").splitlines()) == 10
    assert Path(directory / "run" / "best.pt").is_file()
    refuse_to_remove(directory)  # --fresh takes every entry of a demo's folder for its own (issue 49)...
    (directory / "run" / "NOTES.md").write_text("mine")
    with pytest.raises(UserError, match=r"demo: holds what `syntaxnmt demo` did not write \(run/NOTES.md\)"):
        refuse_to_remove(directory)  # ... and no file a user put in it


def test_a_run_stopped_early_is_not_trained_further_and_enough_updates_give_no_warning(tmp_path, capsys):
    """A re-run after early stopping says so and does not resume (training would go on to the
    next validation); the threshold follows ``train.warmup_steps``, and a run that reaches it
    gets no warning."""
    directory = tmp_path / "demo"
    write_corpus(directory / "corpus", n_train=300, n_dev=20, n_test=10, seed=1)
    write_marker(directory, MARKER, WRITTEN_BY)
    fast = ["--train.warmup_steps=2", "--train.max_steps=3", "--train.valid_every=3"]
    out, warnings = _demo(capsys, directory, *fast)
    assert "stopped (max_steps) at update 3" in out and warnings == []
    last = directory / "run" / "last.pt"
    state = load_checkpoint(last)
    state["progress"]["bad_validations"] = 5  # as a run early stopping ended (demo patience 5)
    save_checkpoint(last, state)
    out, warnings = _demo(capsys, directory, "--train.warmup_steps=2", "--train.max_steps=10", "--train.valid_every=3")
    assert f"the demo's training in {directory}/run is finished (early stopping at update 3 (5 validations without improvement)): translating with it again; --fresh starts over" in out
    assert "resumed" not in out and "test (10 sentences, beam 2): BLEU = " in out and warnings == []
    assert load_checkpoint(last)["progress"]["step"] == 3


def test_minutes_that_are_not_a_positive_time_are_refused_before_any_file_is_written(tmp_path, capsys):
    """``demo --minutes 0`` trained without a time limit (0 is train.max_minutes' "no limit");
    ``--minutes -1`` wrote the 20,000-pair corpus before the config refused it (issue 25 audit)."""
    from test_cli import assert_one_line_error

    for minutes in ("0", "-1", "nan"):
        code, _, err = run_cli(capsys, "demo", "--dir", tmp_path / "demo", "--minutes", minutes)
        assert_one_line_error(code, err, f"--minutes {minutes}", "positive number of minutes")
        assert not (tmp_path / "demo").exists()


def test_a_full_disk_names_the_demo_config(tmp_path, monkeypatch):
    """Issue 49: the demo's config was written with ``write_text``: a full disk named no file."""
    import errno
    import os

    import pytest

    from syntaxnmt import textio
    from syntaxnmt.errors import UserError
    from syntaxnmt.experiments.demo import demo_config

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(textio.os, "fsync", full)  # the disk fills as the file is committed
    with pytest.raises(UserError, match=rf"^{tmp_path}/demo.yaml: cannot write \(No space left on device\)$"):
        demo_config(tmp_path, 1.0)
    assert list(tmp_path.iterdir()) == []
