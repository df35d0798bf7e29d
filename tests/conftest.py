"""Shared fixtures: a tiny synthetic corpus, tiny configs, a prepared cache and a briefly trained run.

Everything is CPU-sized: a few hundred sentence pairs, a 200-piece joint vocabulary and a
one-layer Transformer with d_model 32, so a training run of a few dozen updates takes seconds.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from syntaxnmt.config import Config, load_config
from syntaxnmt.data.synthetic import write_corpus

N_TRAIN, N_DEV, N_TEST = 600, 30, 30

# The models here are tiny: one thread is as fast, and several threads on a busy machine spin
# against each other (a search that takes 10 ms on one thread can take seconds on two).
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # which the commands run in-process keep (cpu.threads.configure_threads)
# The CPU kernel calibration (cpu.calibration) caches its times in a folder of this test session,
# not in the user's ~/.cache, for the commands run in-process and the subprocesses alike.
_KERNEL_CACHE = tempfile.TemporaryDirectory(prefix="syntaxnmt-test-cache-")
os.environ["SYNTAXNMT_CACHE_DIR"] = _KERNEL_CACHE.name
# And the tests time no kernels: SYNTAXNMT_CPU_KERNELS=onednn (the fixed rule) overrides every
# command's and config's mode, so that which path a product takes does not depend on timings taken
# on a busy machine (two runs compared bitwise must compute alike), and the calibration's seconds
# are not spent (2026-11-24, one thread: 3.6 s in 97 kernel choices, 7 of them timing, over test_cli.py,
# decoding/test_translate.py and training/test_train.py, 1.3 % of their 280 s and 2.2 % of
# test_cli.py's; 0.4 s with this override, in the tests of auto). The tests of ``auto`` remove it
# (monkeypatch.delenv): tests/model/test_kernels.py, the cpu_kernels tests of
# tests/training/test_train.py and tests/test_cli.py.
os.environ["SYNTAXNMT_CPU_KERNELS"] = "onednn"


@pytest.fixture(autouse=True)
def close_figures():
    """Close the matplotlib figures a test drew (the library closes what it saves; tests inspect
    figures without saving them, and open figures pile up across the suite)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def load_script(path: Path, name: str | None = None, *, register: bool = False):
    """A script outside the package (``benchmarks/*.py``, ``recipes/*/prepare.py``) loaded as a
    module named ``name`` (default: its file name); its folder is on ``sys.path`` while it loads
    (the benchmarks import ``_isa`` and each other). ``register`` leaves it in ``sys.modules``
    (dataclasses look their module up there): the caller removes it."""
    name = name or path.stem
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        if register:
            sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def quiet(*_args, **_kwargs) -> None:
    """A ``log`` callback that prints nothing."""


def deep_merge(base: dict, extra: dict | None) -> dict:
    out = copy.deepcopy(base)
    for k, v in (extra or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def write_doc_ids(corpus: dict, folder: Path, per_doc: int, prefix: str = "d") -> dict[str, Path]:
    """Doc-id files for the tiny corpus's train and dev splits: documents of ``per_doc`` lines
    (the last one shorter), ids ``{prefix}0``, ``{prefix}1``, ... -- keys ``train`` and ``dev``."""
    files = {}
    for split in ("train", "dev"):
        n = len(corpus[split]["src"].read_text(encoding="utf-8").splitlines())
        files[split] = folder / f"{split}.docs"
        files[split].write_text("".join(f"{prefix}{i // per_doc}\n" for i in range(n)))
    return files


def tiny_tree(corpus: dict, work_dir: Path, prepared_dir: Path | None = None) -> dict:
    """Config overrides (a nested dict) for a tiny experiment on ``corpus``."""
    return {
        "name": "tiny",
        "work_dir": str(work_dir),
        "seed": 1,
        "data": {
            "train_src": str(corpus["train"]["src"]),
            "train_tgt": str(corpus["train"]["tgt"]),
            "dev_src": str(corpus["dev"]["src"]),
            "dev_tgt": str(corpus["dev"]["tgt"]),
            "src_lang": "en",
            "tgt_lang": "syn",
            "vocab_size": 200,
            "prepared_dir": str(prepared_dir) if prepared_dir else "",
        },
        "model": {"d_model": 32, "heads": 4, "ffn_dim": 64, "enc_layers": 1, "dec_layers": 1, "dropout": 0.1},
        "train": {
            "max_tokens": 2048,
            "lr": 2e-3,
            "warmup_steps": 10,
            "max_steps": 12,
            "valid_every": 6,
            "valid_max_sentences": 10,
            "log_every": 5,
            "tensorboard": False,
            "device": "cpu",
        },
        "decode": {"beam_size": 3, "batch_size": 16, "max_len_a": 1.2, "max_len_b": 5},
    }


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """``{split: {"src"|"tgt"|...: path}}`` of a tiny synthetic corpus (shared, read-only)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=N_TRAIN, n_dev=N_DEV, n_test=N_TEST, seed=1)


@pytest.fixture(scope="session")
def shared_prepared_dir(corpus, tmp_path_factory) -> Path:
    """A prepared cache of the tiny corpus, built once; configs from ``make_config`` reuse it."""
    from syntaxnmt.data.prepare import prepare

    prepared = tmp_path_factory.mktemp("prepared")
    cfg = load_config(None, tiny_tree(corpus, tmp_path_factory.mktemp("unused_work"), prepared))
    prepare(cfg, log=quiet)
    return prepared


@pytest.fixture
def make_config(corpus, shared_prepared_dir, tmp_path):
    """``make_config(extra=None, work_dir=None, prepared_dir=None) -> Config``.

    A tiny config whose ``work_dir`` is a fresh folder under ``tmp_path`` and whose data cache is the
    shared prepared corpus (as long as ``extra`` leaves the data section alone).
    """
    counter = {"n": 0}

    def make(extra: dict | None = None, work_dir: Path | None = None, prepared_dir: Path | None = None) -> Config:
        if work_dir is None:
            counter["n"] += 1
            work_dir = tmp_path / f"run{counter['n']}"
        tree = deep_merge(tiny_tree(corpus, work_dir, prepared_dir or shared_prepared_dir), extra)
        return load_config(None, tree)

    return make


@pytest.fixture(scope="session")
def trained_run(corpus, shared_prepared_dir, tmp_path_factory) -> Config:
    """A run trained for 12 updates (``best.pt`` and ``last.pt`` in its ``work_dir``); read-only."""
    from syntaxnmt.training.train import train

    cfg = load_config(None, tiny_tree(corpus, tmp_path_factory.mktemp("trained") / "run", shared_prepared_dir))
    train(cfg, log=quiet)
    return cfg


def parsed_data(corpus: dict) -> dict:
    """The data overrides of a tiny corpus annotated from the generator's CoNLL-U trees."""
    return {"annotate": "conllu", "train_conllu": str(corpus["train"]["conllu"]), "dev_conllu": str(corpus["dev"]["conllu"])}


@pytest.fixture(scope="session")
def parsed_prepared_dir(corpus, tmp_path_factory) -> Path:
    """A prepared cache of the tiny corpus with its trees and tag vocabularies, built once."""
    from syntaxnmt.data.prepare import prepare

    prepared = tmp_path_factory.mktemp("prepared_parsed")
    cfg = load_config(None, deep_merge(tiny_tree(corpus, tmp_path_factory.mktemp("unused_work"), prepared), {"data": parsed_data(corpus)}))
    prepare(cfg, log=quiet)
    return prepared


def untrained_checkpoint(cfg: Config, path: Path, seed: int = 0) -> Path:
    """A checkpoint of a freshly initialized model of ``cfg`` (what ``load_model`` reads: with the
    modules its training attaches, e.g. multi-task classifiers), no training."""
    from syntaxnmt.checkpoint import save_checkpoint
    from syntaxnmt.data.prepare import feature_vocab_sizes, load_tokenizers
    from syntaxnmt.model import build_model

    toks = load_tokenizers(cfg)
    torch.manual_seed(seed)
    model = build_model(cfg, len(toks.src), len(toks.tgt), **feature_vocab_sizes(cfg))
    save_checkpoint(path, {"config": cfg.model_dump(mode="json"), "model": model.state_dict()})
    return path


def run_translate(args: list[str], cwd, stdin: str) -> subprocess.CompletedProcess:
    """``syntaxnmt translate ARGS`` in a subprocess of one thread, reading ``stdin``, run in ``cwd``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "syntaxnmt", "translate", *args], input=stdin.encode(), capture_output=True, cwd=cwd, env=env, timeout=300)


# Eight short English references for the tables built from made-up outputs (no training).
REFS = [
    "the cat sat on the mat today",
    "a dog barked at the old man",
    "she reads a long book every night",
    "we walked home through the quiet park",
    "the children played in the garden",
    "he drinks coffee in the morning",
    "birds sing loudly in the tall trees",
    "my sister bought a new red car",
]
