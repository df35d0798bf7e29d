"""Tests for the ``syntaxnmt`` command line: one-line errors with status 2, translate and evaluate."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import deep_merge, tiny_tree

from syntaxnmt.cli import main

NBEST_LINE = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})$")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Run ``syntaxnmt argv`` in-process; returns (exit status, stdout, stderr)."""
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> str:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("syntaxnmt: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def write_config(path: Path, tree: dict) -> Path:
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def config_for(corpus, tmp_path):
    """``config_for(data=None, **tree) -> path`` of a YAML config for the tiny corpus with a fresh prepared_dir."""

    def make(data: dict | None = None, name: str = "exp.yaml", **extra) -> Path:
        tree = deep_merge(tiny_tree(corpus, tmp_path / "work", tmp_path / "prepared"), {"data": data or {}, **extra})
        return write_config(tmp_path / name, tree)

    return make


# ---------------------------------------------------------------- prepare


def test_prepare_line_count_mismatch(capsys, config_for, tmp_path):
    src = write_lines(tmp_path / "bad.src", ["a b", "c d", "e f"])
    tgt = write_lines(tmp_path / "bad.tgt", ["A B", "C D"])
    cfg = config_for({"train_src": str(src), "train_tgt": str(tgt)})
    code, _, err = run_cli(capsys, "prepare", cfg)
    assert_one_line_error(code, err, str(src), str(tgt), "3", "2")


def test_prepare_invalid_utf8(capsys, config_for, tmp_path):
    src = write_lines(tmp_path / "train.src", ["a b", "c d", "e f"])
    tgt = tmp_path / "train.tgt"
    tgt.write_bytes(b"A B\nC \xe9 D\nE F\n")
    code, _, err = run_cli(capsys, "prepare", config_for({"train_src": str(src), "train_tgt": str(tgt)}))
    assert_one_line_error(code, err, f"{tgt}:2", "UTF-8")


def test_prepare_missing_files(capsys, config_for, tmp_path):
    missing = tmp_path / "nowhere" / "train.src"
    code, _, err = run_cli(capsys, "prepare", config_for({"train_src": str(missing)}))
    assert_one_line_error(code, err, str(missing))
    code, _, err = run_cli(capsys, "prepare", tmp_path / "no_such_config.yaml")
    assert_one_line_error(code, err, "no_such_config.yaml")


def test_bad_config_keys(capsys, config_for, tmp_path):
    cfg = config_for()
    code, _, err = run_cli(capsys, "prepare", cfg, "--data.vocab=100")
    assert_one_line_error(code, err, "data.vocab", str(cfg))
    bad = config_for(name="bad.yaml", train={"max_step": 3})
    code, _, err = run_cli(capsys, "prepare", bad)
    assert_one_line_error(code, err, "train.max_step", str(bad))
    code, _, err = run_cli(capsys, "train", cfg, "--model.norm=sideways")
    assert_one_line_error(code, err, "model.norm")
    code, _, err = run_cli(capsys, "prepare", cfg, "--train.lr")
    assert_one_line_error(code, err, "train.lr")


# Each config mistake of issue 13 (which used to end in a traceback after `prepare` had run):
# one line naming the key, exit status 2, before anything is prepared or trained.
CONFIG_MISTAKES = {
    "relations row too short": (["--model.syntax.relations=[[linear, none]]"], "model.syntax.relations"),
    "unknown relation kind": (["--model.syntax.relations=[[linear, none, nearness, none]]"], "nearness"),
    "feature_dim leaves no room": (["--model.syntax.input_features=[bie]", "--model.syntax.feature_combine=concat", "--model.syntax.feature_dim=32"], "model.syntax.feature_dim"),
    "qk_source tags of an unparsed corpus": (["--model.syntax.qk_source=[[upos, word, word, word]]"], "data.annotate"),
    "syntax with arch rnn": (["--model.arch=rnn", "--model.syntax.relations=[[linear]]"], "model.syntax"),
    "max_len above max_positions": (["--model.max_positions=32"], "model.max_positions"),
    "max_tokens 0": (["--train.max_tokens=0"], "train.max_tokens"),
    "max_tokens negative": (["--train.max_tokens=-1"], "train.max_tokens"),
    "shared embedding, separate vocabularies": (["--model.tie_embeddings=all", "--data.joint_vocab=false"], "data.joint_vocab"),
    "vocabulary of specials only": (["--data.vocab_size=4"], "data.vocab_size"),
}


@pytest.mark.parametrize("command", ["prepare", "train", "translate"])
@pytest.mark.parametrize("mistake", list(CONFIG_MISTAKES))
def test_config_mistakes_are_found_at_load(capsys, config_for, tmp_path, command, mistake):
    overrides, key = CONFIG_MISTAKES[mistake]
    code, _, err = run_cli(capsys, command, config_for(), *overrides)
    assert_one_line_error(code, err, key)
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "work").exists()


def test_bad_device_and_unwritable_folder_are_user_errors(capsys, config_for, tmp_path):
    code, _, err = run_cli(capsys, "train", config_for(), "--train.device=tpu0")
    assert_one_line_error(code, err, "device 'tpu0'")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code, _, err = run_cli(capsys, "train", config_for(), f"--work_dir={blocker}/run")
    assert_one_line_error(code, err, str(blocker))


def test_dev_sentence_longer_than_the_position_table_is_a_user_error(capsys, config_for, corpus):
    """Training pairs are cut at data.max_len; dev pairs are all kept, so a short table is refused before training."""
    code, _, err = run_cli(capsys, "train", config_for(), "--model.max_positions=20", "--data.max_len=15")
    assert_one_line_error(code, err, str(corpus["dev"]["src"]), "model.max_positions 20")


def test_vocabulary_smaller_than_the_corpus_characters_is_a_user_error(capsys, config_for):
    code, _, err = run_cli(capsys, "prepare", config_for({"vocab_size": 20}))
    assert_one_line_error(code, err, "data.vocab_size 20", "required_chars")


def test_tag_set_the_parses_lack_is_a_user_error(capsys, config_for, corpus, tmp_path):
    """The synthetic trees have no XPOS (every field '_'): a head reading xpos is refused before training."""
    data = {"annotate": "conllu", "train_conllu": str(corpus["train"]["conllu"]), "dev_conllu": str(corpus["dev"]["conllu"])}
    code, _, err = run_cli(capsys, "train", config_for(data), "--model.syntax.qk_source=[[xpos, word, word, word]]")
    assert_one_line_error(code, err, "model.syntax.qk_source uses xpos", "no xpos tags")
    assert not (tmp_path / "work" / "last.pt").exists()


def test_prepare_succeeds_and_reports_counts(capsys, config_for):
    code, out, _ = run_cli(capsys, "prepare", config_for())
    assert code == 0
    assert re.search(r"\b600\b.*\bkept\b", out)  # the counts report
    code, out, _ = run_cli(capsys, "prepare", config_for())
    assert code == 0 and "up to date" in out


# ---------------------------------------------------------------- train


def test_train_twice_needs_resume(capsys, config_for):
    cfg = config_for(train={"max_steps": 2, "valid_every": 2})
    code, _, err = run_cli(capsys, "train", cfg)
    assert code == 0, err
    code, _, err = run_cli(capsys, "train", cfg)
    assert_one_line_error(code, err, "last.pt", "--resume")
    code, _, err = run_cli(capsys, "train", cfg, "--resume", "--train.max_steps=3")
    assert code == 0, err


# ---------------------------------------------------------------- evaluate


def test_evaluate_line_count_mismatch(capsys, tmp_path):
    hyp = write_lines(tmp_path / "hyp.txt", ["a b c", "d e f"])
    ref = write_lines(tmp_path / "ref.txt", ["a b c", "d e f", "g h i"])
    code, _, err = run_cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert_one_line_error(code, err, str(hyp), str(ref), "2", "3")


def test_evaluate_invalid_utf8(capsys, tmp_path):
    hyp = write_lines(tmp_path / "hyp.txt", ["a b c", "d e f"])
    ref = tmp_path / "ref.txt"
    ref.write_bytes(b"a b c\n\xff\xfe\n")
    code, _, err = run_cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert_one_line_error(code, err, f"{ref}:2")
    code, _, err = run_cli(capsys, "evaluate", "--hyp", tmp_path / "missing.txt", "--ref", ref)
    assert_one_line_error(code, err, "missing.txt")


def test_evaluate_scores(capsys, tmp_path):
    lines = ["the cat sat on the mat", "a dog is in the garden"]
    hyp = write_lines(tmp_path / "hyp.txt", lines)
    ref = write_lines(tmp_path / "ref.txt", lines)
    code, out, _ = run_cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert code == 0
    assert re.search(r"BLEU = 100\.00", out)


# ---------------------------------------------------------------- translate


def test_translate_missing_checkpoint(capsys, tmp_path, config_for):
    code, _, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / "missing.pt")
    assert_one_line_error(code, err, "missing.pt")
    code, _, err = run_cli(capsys, "translate", config_for())  # no best.pt in its work_dir yet
    assert_one_line_error(code, err, "best.pt")
    code, _, err = run_cli(capsys, "translate")
    assert_one_line_error(code, err, "--checkpoint")


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_translate_stdin_and_nbest(capsys, monkeypatch, trained_run, corpus):
    best = Path(trained_run.work_dir) / "best.pt"
    sources = Path(corpus["test"]["src"]).read_text(encoding="utf-8").splitlines()[:4]
    _stdin(monkeypatch, ("\n".join(sources) + "\n").encode())
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "--nbest", "2", "--beam", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 * len(sources)
    parsed = [NBEST_LINE.match(line) for line in lines]
    assert all(parsed), lines
    ids = [int(m.group(1)) for m in parsed]
    assert ids == [i for i in range(len(sources)) for _ in range(2)]
    for i in range(len(sources)):
        scores = [float(m.group(3)) for m in parsed if int(m.group(1)) == i]
        assert scores[0] >= scores[1]

    _stdin(monkeypatch, ("\n".join(sources[:2] + [""] + sources[2:]) + "\n").encode())  # an empty line too
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best)
    assert code == 0, err
    assert len(out.splitlines()) == len(sources) + 1 and "|||" not in out

    _stdin(monkeypatch, b"the dog sleeps .\n\xff\n")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best)
    assert_one_line_error(code, err, "<stdin>:2")

    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "--nbest", "4", "--beam", "2")
    assert_one_line_error(code, err, "--nbest 4 is larger than the beam size 2")


def test_translate_bad_decode_override(capsys, monkeypatch, trained_run):
    best = Path(trained_run.work_dir) / "best.pt"
    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "--decode.beam_size=wide")
    assert_one_line_error(code, err, "decode.beam_size")
    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "--decode.beams=2")
    assert_one_line_error(code, err, "decode.beams")
    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "--batch-size", "0")
    assert_one_line_error(code, err, "decode.batch_size")


def test_translate_refuses_what_cannot_change_after_training(capsys, monkeypatch, trained_run, tmp_path):
    """Unknown keys, wrong values and options fixed at training are one-line errors naming the
    key; a decode option, the model's own value of any key and, with a CONFIG, --work_dir pass."""
    best = Path(trained_run.work_dir) / "best.pt"
    refused = [
        ("--train.bogus=1", "unknown key 'train.bogus'"),
        ("--model.hard_attention=bogus", "'model.hard_attention'"),
        ("--model.hard_attention=train", "--model.hard_attention=train is a training choice"),
        ("--train.lr=0.5", "--train.lr cannot change after training (the model has 0.002)"),
        ("--model.attention_normalizer=sparsemax", "--model.attention_normalizer cannot change after training"),
        ("--model.d_model=64", "--model.d_model cannot change after training"),
        ("--data.lowercase=true", "--data.lowercase cannot change after training"),
        ("--seed=7", "--seed cannot change after training"),
    ]
    for override, fragment in refused:
        _stdin(monkeypatch, b"the dog sleeps .\n")
        code, out, err = run_cli(capsys, "translate", "--checkpoint", best, override)
        assert_one_line_error(code, err, fragment)
        assert out == ""
    for accepted in ("--train.lr=0.002", "--decode.length_penalty=0.6", "--model.hard_attention=none", "--data.spacy_pipeline=xx_unused"):
        _stdin(monkeypatch, b"the dog sleeps .\n")
        code, out, err = run_cli(capsys, "translate", "--checkpoint", best, accepted)
        assert code == 0 and len(out.splitlines()) == 1, (accepted, err)
    cfg_path = write_config(tmp_path / "trained.yaml", {**trained_run.model_dump(mode="json"), "work_dir": str(tmp_path / "elsewhere")})
    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, out, err = run_cli(capsys, "translate", cfg_path, f"--work_dir={trained_run.work_dir}", "--beam", "2")
    assert code == 0 and len(out.splitlines()) == 1, err


def test_translate_nbest_1_and_decode_nbest_print_scores(capsys, monkeypatch, trained_run):
    best = Path(trained_run.work_dir) / "best.pt"
    _stdin(monkeypatch, b"the dog sleeps .\nevery bird sleeps .\n")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "--nbest", "1")
    assert code == 0, err
    assert [NBEST_LINE.match(line).group(1) for line in out.splitlines()] == ["0", "1"]  # --help: 'i ||| text ||| score'
    _stdin(monkeypatch, b"the dog sleeps .\n")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", best, "--decode.nbest=2", "--beam", "2")
    assert code == 0, err
    assert [NBEST_LINE.match(line).group(1) for line in out.splitlines()] == ["0", "0"]


COMPUTING = {
    "translate": [],
    "align": ["--src", "s", "--tgt", "t"],
    "attention": ["-i", "s", "-o", "o"],
    "plot": ["-o", "x.png"],
    "analyze-heads": ["-i", "s", "-o", "o"],
    "serve": [],
    "decode-experiment": ["set.yaml"],
}


@pytest.mark.parametrize("command", list(COMPUTING))
def test_commands_that_compute_take_threads(capsys, command):
    """One shared --threads (syntaxnmt.cpu.threads.configure_threads): a negative count is refused
    before any work; 0 means the default thread policy; N sets torch's threads."""
    code, _, err = run_cli(capsys, command, *COMPUTING[command], "--threads", "-1")
    assert_one_line_error(code, err, "--threads -1: give at least 1 (or 0 for the default)")


def test_threads_set_torchs_threads(capsys, monkeypatch, trained_run):
    import torch

    best = Path(trained_run.work_dir) / "best.pt"
    _stdin(monkeypatch, b"the dog sleeps .\n")
    try:
        code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "--threads", "2", "--beam", "1")
        assert code == 0, err
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


def test_translate_files_with_config(capsys, trained_run, corpus, tmp_path):
    cfg_path = write_config(tmp_path / "trained.yaml", trained_run.model_dump(mode="json"))
    out_path = tmp_path / "out" / "test.hyp"
    code, _, err = run_cli(capsys, "translate", cfg_path, "--checkpoint", "last", "-i", corpus["test"]["src"], "-o", out_path, "--decode.beam_size=2", "--batch-size", "7")
    assert code == 0, err
    hyps = out_path.read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(Path(corpus["test"]["src"]).read_text(encoding="utf-8").splitlines())


def test_parse_then_translate_src_conllu_round_trip(capsys, config_for, corpus, tmp_path):
    """``syntaxnmt parse`` of raw text (punctuation attached to words) is accepted by
    ``translate --src-conllu`` for the same text, on a model with tree-distance heads."""
    cfg = config_for(
        data={"annotate": "conllu", "train_conllu": str(corpus["train"]["conllu"]), "dev_conllu": str(corpus["dev"]["conllu"])},
        model={"syntax": {"relations": [["tree_distance", "none", "none", "none"]]}},
        train={"max_steps": 2, "valid_every": 2, "valid_max_sentences": 4, "threads": 1},
    )
    code, _, err = run_cli(capsys, "train", cfg)
    assert code == 0, err
    raw = write_lines(tmp_path / "raw.en", ["I saw something. It was big.", "Don't stop, he said."])
    parses = tmp_path / "raw.conllu"
    code, _, err = run_cli(capsys, "parse", "-i", raw, "-o", parses)
    assert code == 0, err
    text = parses.read_text(encoding="utf-8")
    # The parser splits "something." and "Don't"; ``# text`` keeps the raw line.
    assert "# text = I saw something. It was big.\n" in text and "# text = Don't stop, he said.\n" in text
    assert "\tsomething\t" in text and "\tn't\t" in text

    out = tmp_path / "raw.hyp"
    code, _, err = run_cli(capsys, "translate", cfg, "-i", raw, "--src-conllu", parses, "-o", out, "--beam", "2")
    assert code == 0, err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    # The model needs the parses: without them it is an error, not a silent fallback.
    code, _, err = run_cli(capsys, "translate", cfg, "-i", raw, "-o", tmp_path / "x.hyp")
    assert_one_line_error(code, err, "--src-conllu", str(raw))
    # Parses of another text are refused, naming the CoNLL-U file, its sentence and the line.
    other = write_lines(tmp_path / "other.en", ["I saw something. It was big.", "Don't stop, she said."])
    code, _, err = run_cli(capsys, "translate", cfg, "-i", other, "--src-conllu", parses, "-o", tmp_path / "y.hyp")
    assert_one_line_error(code, err, f"{parses} sentence 2 (line ", f"line 2 of {other}", "not a tokenization")
    assert not (tmp_path / "y.hyp").exists()


# ---------------------------------------------------------------- real processes


def test_subprocess_translate_nbest_from_stdin(trained_run, tmp_path):
    best = Path(trained_run.work_dir) / "best.pt"
    proc = subprocess.run(
        [sys.executable, "-m", "syntaxnmt", "translate", "--checkpoint", str(best), "--nbest", "2", "--beam", "2"],
        input="the dog sees a cat .\nevery bird sleeps .\n".encode(),
        capture_output=True,
        cwd=tmp_path,
        env=subprocess_env(),
        timeout=300,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = proc.stdout.decode().splitlines()
    assert [NBEST_LINE.match(line).group(1) for line in lines] == ["0", "0", "1", "1"]


def test_subprocess_errors_have_no_traceback(tmp_path, corpus):
    src = write_lines(tmp_path / "a.src", ["x", "y", "z"])
    tgt = write_lines(tmp_path / "a.tgt", ["X"])
    tree = deep_merge(tiny_tree(corpus, tmp_path / "work", tmp_path / "prep"), {"data": {"train_src": str(src), "train_tgt": str(tgt)}})
    cfg = write_config(tmp_path / "mismatch.yaml", tree)
    for argv in (["prepare", str(cfg)], ["translate", "--checkpoint", str(tmp_path / "none.pt")]):
        proc = subprocess.run(
            [sys.executable, "-m", "syntaxnmt", *argv], input=b"", capture_output=True, cwd=tmp_path, env=subprocess_env(), timeout=300
        )
        assert_one_line_error(proc.returncode, proc.stderr.decode())


# ---------------------------------------------------------------- small refusals, --version, long errors


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["experiment", "recipes/synthetic/syntax.set.yaml", "--n-seeds", "0"], "--n-seeds 0: give at least 1"),
        (["translate", "--checkpoint", "model.pt", "--nbest", "0"], "--nbest 0: give at least 1"),
        (["aer", "--gold", "empty.gold", "--hyp", "empty.hyp"], "no sentence pairs"),
    ],
)
def test_subprocess_meaningless_counts_are_refused_in_one_line(tmp_path, argv, fragment):
    """``--n-seeds 0`` ran the set's seeds, ``--nbest 0`` printed one best, AER of two empty files was 0."""
    (tmp_path / "empty.gold").write_text("")
    (tmp_path / "empty.hyp").write_text("")
    repo = Path(__file__).resolve().parents[1]
    argv = [str(repo / a) if a.startswith("recipes/") else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "syntaxnmt", *argv], capture_output=True, cwd=tmp_path, env=subprocess_env(), timeout=300)
    assert_one_line_error(proc.returncode, proc.stderr.decode(), fragment)
    assert proc.stdout == b""


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["serve", "--threads", "-3"], ["syntaxnmt: error: --threads -3: give at least 1 (or 0 for the default)"]),
        (["serve", "--threads", "two"], ["serve: argument --threads: invalid int value: 'two'"]),
        (["trian", "x.yaml"], ["argument COMMAND: invalid choice: 'trian'", "(see `syntaxnmt --help`)"]),
        (["translate", "--beam"], ["translate: argument --beam: expected one argument"]),
    ],
)
def test_command_line_mistakes_are_one_line(capsys, argv, fragments):
    """argparse printed its usage and then its error; ``serve --threads -3`` reached torch and a traceback (issue 25)."""
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, *fragments)
    assert out == ""


def test_subprocess_version():
    from syntaxnmt.cli import package_version

    proc = subprocess.run([sys.executable, "-m", "syntaxnmt", "--version"], capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"syntaxnmt \d+\.\d+\S*\n", proc.stdout) and proc.stdout == f"syntaxnmt {package_version()}\n"


def test_error_line_is_one_line_and_cut_when_long():
    from syntaxnmt.errors import MAX_ERROR_CHARS, UserError, error_line

    assert error_line(UserError("short")) == "short"
    assert error_line("a\nb\r\nc") == "a b c"
    line = error_line("x" * 10_000_000)
    assert line == "x" * MAX_ERROR_CHARS + "... (10000000 characters in all)"


def test_long_error_is_printed_cut(capsys, config_for):
    """An override quoting a huge value: the message names the key, then is cut with its length."""
    code, _, err = run_cli(capsys, "prepare", config_for(), f"--model.d_model={'9x' * 50_000}")
    line = assert_one_line_error(code, err, "model.d_model")
    assert len(line) < 600 and line.endswith(" characters in all)")


def test_translate_writes_into_a_fifo_and_reports_a_full_device(capsys, trained_run, corpus, tmp_path):
    """``-o FIFO`` sends the translations through it (it was replaced by a regular file), and
    ``-o /dev/full`` is a one-line error (it reported success)."""
    import stat

    best = Path(trained_run.work_dir) / "best.pt"
    src = write_lines(tmp_path / "in.txt", ["the dog sees a cat .", "every bird sleeps ."])
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "-o", fifo, "--beam", "2")
        assert code == 0, err
        assert len(os.read(reader, 65536).decode().splitlines()) == 2
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    if os.path.exists("/dev/full"):
        code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "-o", "/dev/full", "--beam", "2")
        # the progress bar (translate -o shows one) is erased with \r; the error is the one line left
        assert code == 2 and "Traceback" not in err
        assert err.rsplit("\r", 1)[-1].startswith("syntaxnmt: error: /dev/full: cannot write (") and err.count("\n") == 1
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_translate_cpu_kernels(capsys, monkeypatch, trained_run, tmp_path):
    """``--cpu-kernels``: each path gives the same translations, the choice is recorded, and a
    value other than auto, onednn or aten is a one-line error."""
    from syntaxnmt.cpu import calibration as kernels
    from syntaxnmt.cpu import linear as fast_linear
    from syntaxnmt.cpu.machine import machine_info

    monkeypatch.delenv(kernels.ENV, raising=False)  # the test session's override (conftest)
    monkeypatch.setattr(kernels, "_mode", kernels._mode)  # the process's mode and plan are restored after
    monkeypatch.setattr(fast_linear, "ONEDNN", fast_linear.ONEDNN)
    monkeypatch.setenv("SYNTAXNMT_CACHE_DIR", str(tmp_path / "kernel-cache"))
    best = Path(trained_run.work_dir) / "best.pt"
    src = write_lines(tmp_path / "in.txt", ["the dog sees a cat .", "every bird sleeps ."])
    outputs = {}
    for mode in ("aten", "onednn", "auto"):
        code, outputs[mode], err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "2", "--cpu-kernels", mode)
        assert code == 0, err
        assert machine_info()["cpu_kernels"]["mode"] == mode
    assert outputs["aten"] == outputs["onednn"] == outputs["auto"] and len(outputs["auto"].splitlines()) == 2
    if fast_linear.enabled():
        timed = machine_info()["cpu_kernels"]  # auto: timed on beam-5 decoding steps
        assert timed["timed"] and set(timed["ms"]) == {"onednn", "aten"} and timed["signature"].startswith("infer d32 ffn64")
    code, default_output, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--beam", "2")
    assert code == 0 and default_output == outputs["auto"], err
    assert machine_info()["cpu_kernels"]["mode"] == "auto"  # the default (the times now from the cache)
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src, "--cpu-kernels", "fast")
    assert_one_line_error(code, err, "--cpu-kernels", "'fast'")
    monkeypatch.setenv(kernels.ENV, "fast")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", src)
    assert_one_line_error(code, err, "SYNTAXNMT_CPU_KERNELS='fast'", "auto, onednn, aten")


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["synthetic", "-o", "c", "--train", "0"], ["--train 0: give 1 to 1,000,000 sentence pairs"]),  # 0 wrote the default 20,000
        (["synthetic", "-o", "c", "--dev", "-5"], ["--dev -5"]),
        (["synthetic", "-o", "c", "--train", "1000000000000"], ["--train 1000000000000"]),  # held every pair in memory
        (["synthetic", "-o", "c", "--documents", "--test", "200000"], ["--test 200000: give 1 to 100,000 documents"]),
        (["align", "--checkpoint", "m.pt", "--src", "a", "--tgt", "b", "--batch-size", "0"], ["align: argument --batch-size: 0: give at least 1"]),
        (["score", "--checkpoint", "m.pt", "--contrastive", "c.json", "--batch-size", "0"], ["--batch-size: 0"]),
        (["attention", "--checkpoint", "m.pt", "-i", "a", "-o", "x", "--beam", "0"], ["--beam: 0"]),
        (["align", "--checkpoint", "m.pt", "--src", "a", "--tgt", "b", "--threshold", "-1"], ["--threshold: -1: give an attention weight from 0 to 1"]),
        (["aer", "--gold", "g", "--hyp", "h", "--src", "a"], ["--src and --tgt go together"]),  # --src alone was ignored
    ],
)
def test_audit_counts_and_options_are_one_line_before_any_work(capsys, tmp_path, monkeypatch, argv, fragments):
    """What the issue-25 audit (benchmarks/audit_bad_inputs.py) found: tracebacks for a batch size or
    beam of 0, silent acceptance of a threshold of -1, of --src without --tgt and of a corpus of 0 pairs."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, *fragments)
    assert out == "" and not (tmp_path / "c").exists()


def test_align_and_translate_docs_name_the_files_that_do_not_match(capsys, trained_run, tmp_path):
    best = Path(trained_run.work_dir) / "best.pt"
    three = write_lines(tmp_path / "three.txt", ["a red house .", "a dog .", "the man ."])
    one = write_lines(tmp_path / "one.txt", ["a red house ."])
    code, _, err = run_cli(capsys, "align", "--checkpoint", best, "--src", three, "--tgt", one)
    assert_one_line_error(code, err, f"{three} has 3 lines but {one} has 1")
    code, _, err = run_cli(capsys, "translate", "--checkpoint", best, "-i", three, "--docs", one)
    assert_one_line_error(code, err, f"{one}: 1 document ids for 3 lines of {three}")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["translate", "--checkpoint", "M.pt", "-i", "in.txt", "-o", "M.pt"], "M.pt: -o is also --checkpoint M.pt, an input of this command"),
        (["translate", "--checkpoint", "M.pt", "-i", "in.txt", "-o", "./link.pt"], "./link.pt: -o is also --checkpoint M.pt"),  # a symbolic link to it
        (["translate", "--checkpoint", "M.pt", "-i", "in.txt", "-o", "X", "--alignments", "X"], "X: given as -o and as --alignments"),
        (["align", "--checkpoint", "M.pt", "--src", "in.txt", "--tgt", "ref.txt", "-o", "in.txt"], "in.txt: -o is also --src in.txt"),
        (["lexicon", "exp.yaml", "-o", "exp.yaml"], "exp.yaml: -o is also CONFIG exp.yaml"),
        (["score", "--checkpoint", "M.pt", "--contrastive", "set.json", "-o", "set.json"], "set.json: -o is also --contrastive set.json"),
        (["average-checkpoints", "--inputs", "M.pt", "N.pt", "-o", "N.pt"], "N.pt: -o is also --inputs N.pt"),
        (["parse", "-i", "in.txt", "-o", "hard.txt"], "hard.txt: -o is also -i in.txt"),  # a hard link: the same inode
        (["attention", "--checkpoint", "M.pt", "-i", "in.txt", "--ref", "att.jsonl", "-o", "att"], "att.jsonl: -o is also --ref att.jsonl"),  # -o OUT writes OUT.jsonl
    ],
)
def test_an_output_onto_an_input_is_refused_before_any_work(capsys, tmp_path, monkeypatch, argv, fragment):
    """Issue 49: ``translate --checkpoint M.pt -o M.pt`` replaced the trained model with its
    translations; the same for align, lexicon, score, average-checkpoints and ``-o X --alignments X``.
    Every command compares its outputs with its inputs (path, link or inode) first: every file is kept."""
    monkeypatch.chdir(tmp_path)
    files = {"M.pt": b"the trained model", "N.pt": b"another", "in.txt": b"a source\n", "ref.txt": b"a ref\n", "set.json": b"[]", "exp.yaml": b"name: x\n", "att.jsonl": b"{}\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "link.pt").symlink_to("M.pt")
    os.link(tmp_path / "in.txt", tmp_path / "hard.txt")
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, fragment)
    assert {name: (tmp_path / name).read_bytes() for name in files} == files and not (tmp_path / "X").exists()
