"""Tests for safe checkpoint loading (issue 25): no code runs from a checkpoint, foreign or damaged
files are one-line errors, ``--trust-checkpoint`` loads an older syntaxnmt's checkpoints."""

from __future__ import annotations

import os
import pickle
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import quiet
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.checkpoint import load_checkpoint, load_model_checkpoint, save_checkpoint
from syntaxnmt.cli import build_parser
from syntaxnmt.errors import UserError
from syntaxnmt.training import loop
from syntaxnmt.training.train import train

# Every command that ends in load_checkpoint (directly, through translate.load_model or by resuming).
LOADING_COMMANDS = (
    "train", "train-joint", "experiment", "decode-experiment", "demo", "translate", "average-checkpoints",
    "export-ct2", "align", "align-experiment", "attention", "plot", "analyze-heads", "serve", "score",
)


class RunsCode:
    """Unpickled, it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def crafted_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A checkpoint shaped like a model's whose unpickling creates a marker file: (path, marker)."""
    path, marker = tmp_path / "crafted.pt", tmp_path / "pwned"
    torch.save({"config": {}, "model": {}, "payload": RunsCode(marker)}, path)
    return path, marker


def old_format(state: dict) -> dict:
    """``state`` as a checkpoint written before issue 25 holds it: numpy's RNG state as the tuple
    of ``np.random.get_state()`` (a numpy array inside, which the safe loader refuses)."""
    old = dict(state, rng=dict(state["rng"]))
    old["rng"]["numpy"] = loop._numpy_state(state["rng"]["numpy"])
    assert isinstance(old["rng"]["numpy"][1], np.ndarray)
    return old


def one_line_error(code: int, err: str) -> str:
    return assert_one_line_error(code, err)


# ---------------------------------------------------------------- no code runs


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    path, marker = crafted_checkpoint(tmp_path)
    for load in (load_checkpoint, load_model_checkpoint):
        with pytest.raises(UserError, match=r"crafted\.pt: holds Python objects .*system.*--trust-checkpoint") as e:
            load(path)
        assert "\n" not in str(e.value)
    assert not marker.exists()
    load_checkpoint(path, trust=True)  # the payload is real: trusted, it runs
    assert marker.exists()


def test_a_plain_pickle_with_code_runs_nothing(tmp_path):
    path, marker = tmp_path / "plain.pkl", tmp_path / "pwned"
    path.write_bytes(pickle.dumps({"config": {}, "model": {}, "payload": RunsCode(marker)}))
    with pytest.raises(UserError, match="plain.pkl"):
        load_checkpoint(path)
    assert not marker.exists()


def test_translate_refuses_a_crafted_checkpoint_in_one_line(tmp_path):
    path, marker = crafted_checkpoint(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-m", "syntaxnmt", "translate", "--checkpoint", str(path)],
        input="a sentence\n", capture_output=True, text=True, check=False, env=env, cwd=tmp_path, timeout=120,
    )
    line = one_line_error(done.returncode, done.stderr)
    assert str(path) in line and "--trust-checkpoint" in line
    assert done.stdout == ""
    assert not marker.exists()


# ---------------------------------------------------------------- foreign and damaged files


def test_non_finite_weights_are_refused(trained_run, tmp_path):
    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    model = state["model"]
    storages = [v.untyped_storage().data_ptr() for v in model.values()]
    floats = [k for k, v in model.items() if v.is_floating_point() and storages.count(v.untyped_storage().data_ptr()) == 1]  # untied
    model[floats[-1]].view(-1)[0] = float("inf")
    model[floats[1]].view(-1)[-1] = float("nan")
    save_checkpoint(tmp_path / "nan.pt", state)
    with pytest.raises(UserError, match=rf"nan\.pt: the model weights are not finite \({re.escape(floats[1])} holds"):
        load_model_checkpoint(tmp_path / "nan.pt")
    with pytest.raises(UserError, match=re.escape(floats[1])):
        load_model_checkpoint(tmp_path / "nan.pt", trust=True)  # trusting a file does not make NaN weights usable


def test_foreign_files_are_one_line_user_errors(trained_run, tmp_path, capsys):
    good = (Path(trained_run.work_dir) / "best.pt").read_bytes()
    model = load_checkpoint(Path(trained_run.work_dir) / "best.pt")["model"]
    files = {
        "list.pt": ([torch.zeros(2)], "holds a list, not a dict"),
        "bare.pt": (model, "no 'config' or 'model'"),
        "weights.pt": ({"model": [1, 2], "config": {}}, "its 'model' is a list"),
    }
    for name, (obj, _) in files.items():
        save_checkpoint(tmp_path / name, obj)
    (tmp_path / "truncated.pt").write_bytes(good[: len(good) // 2])
    (tmp_path / "text.pt").write_text("a b c\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    expected = {name: fragment for name, (_, fragment) in files.items()}
    expected.update({"truncated.pt": "not a readable syntaxnmt checkpoint", "text.pt": "not a file written by torch.save", "empty.pt": "not a file written by torch.save"})
    for name, fragment in expected.items():
        code, out, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / name)
        line = one_line_error(code, err)
        assert f"{tmp_path / name}: " in line and fragment in line, line
        assert out == ""


def test_a_damaged_stored_tokenizer_is_one_line_naming_the_checkpoint(trained_run, tmp_path, capsys):
    """Issue 49: SentencePiece's traceback at the first use of a damaged tokenizer."""
    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    good = state["assets"]["spm_tgt"]
    damaged = {
        "cut.pt": ({**state["assets"], "spm_tgt": good[: len(good) // 3]}, "target tokenizer ('assets' spm_tgt) is not a readable SentencePiece model"),
        "text.pt": ({**state["assets"], "spm_src": "a string"}, "source tokenizer ('assets' spm_src) is a str"),
        "list.pt": ([1, 2], "stored tokenizers ('assets') are a list"),
    }
    for name, (assets, fragment) in damaged.items():
        save_checkpoint(tmp_path / name, {**state, "assets": assets})
        code, out, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / name, "-i", trained_run.data.dev_src)
        line = one_line_error(code, err)
        assert f"{tmp_path / name}: " in line and fragment in line, line


def test_integer_weights_are_refused_not_loaded_truncated(trained_run, tmp_path, capsys):
    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name] = (state["model"][name] * 100).long()
    save_checkpoint(tmp_path / "int.pt", state)
    code, out, err = run_cli(capsys, "translate", "--checkpoint", tmp_path / "int.pt", "-i", trained_run.data.dev_src)
    line = one_line_error(code, err)
    assert f"{tmp_path / 'int.pt'}: its weights do not fit" in line and f"{name} is int64 in the checkpoint, float32 in the model" in line, line


def test_the_loader_bounds_what_a_small_checkpoint_expands_to(trained_run, tmp_path):
    """Issue 49: a 1 MB zip of deflated zeros made the loader allocate 1 GiB; refused from the
    archive's directory, and a stride-0 view of one element is refused before it is checked."""
    import zipfile

    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    torch.save({**state, "unused": torch.zeros(16 << 20)}, tmp_path / "big.pt")  # 64 MiB of zeros
    with zipfile.ZipFile(tmp_path / "big.pt") as z, zipfile.ZipFile(tmp_path / "bomb.pt", "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename))
    assert (tmp_path / "bomb.pt").stat().st_size < 2 << 20
    with pytest.raises(UserError, match=r"bomb\.pt: its archive expands to [\d,]+ bytes from [\d,]+ on disk"):
        load_checkpoint(tmp_path / "bomb.pt")
    load_checkpoint(tmp_path / "big.pt")  # stored uncompressed, as torch.save writes it: loads
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name] = torch.zeros(1).expand(1 << 28)
    save_checkpoint(tmp_path / "view.pt", state)
    with pytest.raises(UserError, match=rf"view\.pt: the model weight {re.escape(name)} claims 268,435,456 elements over a storage of 4 bytes"):
        load_checkpoint(tmp_path / "view.pt")


MEASURE = """
import sys, torch
from syntaxnmt.decoding import loading
def rss():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1]) // 1024
load_weights = loading.load_weights
def measuring(*args, **kw):  # called while the loaded checkpoint is held
    print(rss() - before)
    return load_weights(*args, **kw)
loading.load_weights = measuring
before = rss()
loading.load_model(sys.argv[1], torch.device("cpu"))
"""


def test_translation_skips_the_keys_it_does_not_use_unread(trained_run, tmp_path):
    """Issue 49: loading a model read every key of its checkpoint (a training checkpoint's optimizer
    state, or anything else); memory-mapped, what translation does not use is never read. Measured
    in a process of its own (this one keeps the memory it frees: ``runtime.keep_freed_memory``)."""
    state = load_checkpoint(Path(trained_run.work_dir) / "best.pt")
    save_checkpoint(tmp_path / "big.pt", {**state, "unused": torch.ones(64 << 20)})  # 256 MiB
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "big.pt")], capture_output=True, text=True, env=env, timeout=300, check=True)
    assert int(done.stdout.split()[0]) < 128, done.stdout  # MiB grown while the checkpoint is held
    assert load_checkpoint(tmp_path / "big.pt", lazy=True)["unused"][-1] == 1  # there, when it is read

# ---------------------------------------------------------------- real checkpoints


def test_a_training_checkpoint_loads_safely(trained_run):
    """Everything ``train`` saves (config, weights, optimizer, scheduler, progress, RNG states,
    tokenizers as bytes) is read by ``torch.load(weights_only=True)``."""
    path = Path(trained_run.work_dir) / "last.pt"
    direct = torch.load(path, map_location="cpu", weights_only=True)
    state = load_model_checkpoint(path)
    assert {"config", "model", "optimizer", "scheduler", "progress", "rng", "assets"} <= state.keys() == direct.keys()
    assert isinstance(state["assets"]["spm_src"], bytes) and state["assets"]["spm_src"] == direct["assets"]["spm_src"]
    assert isinstance(state["rng"]["numpy"], dict) and state["rng"]["numpy"]["keys"].dtype == torch.int64
    assert state["progress"]["step"] == 12


def test_rng_states_survive_a_checkpoint_bit_for_bit(tmp_path):
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    np.random.standard_normal()  # numpy now holds a cached Gaussian (has_gauss 1)
    saved = loop.rng_state()
    assert saved["numpy"]["has_gauss"] == 1 and int(saved["numpy"]["keys"].max()) >= 2**31  # keys beyond int32
    save_checkpoint(tmp_path / "rng.pt", {"rng": saved})

    def draws():
        return random.random(), np.random.standard_normal(3).tolist(), np.random.randint(0, 2**31, 3).tolist(), torch.rand(3).tolist()

    expected = draws()
    assert draws() != expected  # (the comparison can fail)
    loop.set_rng_state(load_checkpoint(tmp_path / "rng.pt")["rng"])
    assert draws() == expected
    loop.set_rng_state(old_format({"rng": saved})["rng"])  # a trusted older checkpoint's tuple
    assert draws() == expected


def test_an_older_checkpoint_loads_safely_without_the_flag(trained_run, tmp_path, capsys):
    """Numeric NumPy arrays (the RNG state of checkpoints written before issue 25) are data: the
    safe loader reads them; an array of Python objects is still refused."""
    old = tmp_path / "old.pt"
    save_checkpoint(old, old_format(load_checkpoint(Path(trained_run.work_dir) / "best.pt")))
    assert isinstance(load_checkpoint(old)["rng"]["numpy"][1], np.ndarray)
    src = tmp_path / "src.txt"
    src.write_text("".join(Path(trained_run.data.dev_src).read_text().splitlines(keepends=True)[:2]))
    code, out, err = run_cli(capsys, "translate", "--checkpoint", old, "-i", src)
    assert code == 0, err
    assert len(out.splitlines()) == 2

    objects = tmp_path / "objects.pt"
    torch.save({"config": {}, "model": {}, "rng": np.array([{"a": 1}, None], dtype=object)}, objects)
    with pytest.raises(UserError, match="--trust-checkpoint"):
        load_checkpoint(objects)


def test_a_checkpoint_written_by_the_layout_before_the_stage_packages_translates_the_same():
    """tests/fixtures/old-layout.pt was written by syntaxnmt 9058d3d (flat modules, numpy RNG state):
    it loads, and translates its input to what that version printed."""
    import subprocess
    import sys

    fixtures = Path(__file__).parent / "fixtures"
    run = subprocess.run(
        [sys.executable, "-m", "syntaxnmt", "translate", "--checkpoint", str(fixtures / "old-layout.pt"), "--beam", "2", "-i", str(fixtures / "old-layout.input.txt")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == (fixtures / "old-layout.expected.txt").read_text()


def test_an_older_training_checkpoint_resumes_exactly(make_config):
    def cfg(max_steps, work_dir=None):
        return make_config({"train": {"max_steps": max_steps, "valid_every": 2}}, work_dir=work_dir)

    full = cfg(4)
    train(full, log=quiet)
    half = cfg(2)
    train(half, log=quiet)
    last = Path(half.work_dir) / "last.pt"
    save_checkpoint(last, old_format(load_checkpoint(last)))
    assert train(cfg(4, Path(half.work_dir)), resume=True, log=quiet).step == 4
    a, b = load_checkpoint(Path(full.work_dir) / "last.pt"), load_checkpoint(last)  # the resumed run saved the new format
    assert not isinstance(b["rng"]["numpy"], tuple)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


def test_every_command_that_loads_checkpoints_takes_trust_checkpoint(capsys):
    commands = build_parser()._subparsers._group_actions[0].choices
    for name in LOADING_COMMANDS:
        assert "--trust-checkpoint" in commands[name]._option_string_actions, name
    assert "--trust-checkpoint" not in commands["prepare"]._option_string_actions
    code, _, err = run_cli(capsys, "experiment", "set.yaml", "--jobs", "2", "--trust-checkpoint")
    assert "--jobs 1" in one_line_error(code, err)
