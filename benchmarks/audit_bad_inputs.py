"""Audit of bad inputs (issue 25): every ``syntaxnmt`` command fed malformed, missing, hostile or
absurd input, as real subprocesses, and ``syntaxnmt serve`` fed bad HTTP requests.

    python benchmarks/audit_bad_inputs.py [--json OUT.json] [--all] [--only NAME,...] [--keep DIR]
                                          [--spawn | --in-process]

Sets up, in a temporary folder, the synthetic corpus (300 training pairs), a tiny config, its
prepared cache and a one-layer Transformer trained for 12 updates, plus hostile files made from
them: crafted pickles whose unpickling would create a marker file, foreign ``.pt`` files (a bare
state_dict, a list), checkpoints cut short, damaged or of another architecture, damaged caches and
attention exports, YAML bombs. Then runs every case of :func:`cases` (``--all``: the extended ones
too) in a process of its own (one thread, its own working folder): forked by :class:`ForkServer`
from a process that has imported syntaxnmt, or with ``--spawn`` as ``python -m syntaxnmt ...``;
then the HTTP cases of :func:`http_cases` against one ``python -m syntaxnmt serve`` on a free port.

A command case passes when the exit status is the expected one (2 for a mistake; the documented
status for a documented behaviour), stderr holds no ``Traceback`` and, for a mistake, is exactly one
line starting ``syntaxnmt: error:`` (holding the case's fragments: the file, key or option), the
marker file does not appear, the shared files (corpus, model, config) and the case's protected
paths are unchanged (file tree and content), and the case's own check holds (e.g. a FIFO is still
a FIFO). An HTTP case passes on the expected 4xx status with a JSON ``error``; after all of them the
server must still answer ``/health``, its stderr must hold no traceback, and the first SIGTERM must
end it with 143.

Prints one line per case, a count of cases by command and a summary listing the failures; writes
everything (command, exit status, stderr, verdict) to ``--json``; exits 1 if any case fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import random
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
MARKER = "PWNED"
"""The file a crafted pickle creates when it is unpickled: it must never appear."""


# ------------------------------------------------------------------ the shared files


class Evil:
    """Unpickling this object calls ``open(MARKER_PATH, "w")``: harmless, and visible."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@dataclass
class Env:
    """The shared files every case reads (under ``assets``: never to be changed by a case)."""

    root: Path
    assets: Path
    marker: Path
    config: Path
    run: Path
    ckpt: Path
    prepared: Path
    corpus: dict
    bad: dict[str, Path] = field(default_factory=dict)


def tiny_tree(assets: Path) -> dict:
    """The config of the audit's model: the tests' tiny Transformer (tests/conftest.py)."""
    c = assets / "corpus"
    return {
        "name": "audit",
        "work_dir": str(assets / "run"),
        "seed": 1,
        "data": {
            "train_src": str(c / "train.src"), "train_tgt": str(c / "train.tgt"),
            "dev_src": str(c / "dev.src"), "dev_tgt": str(c / "dev.tgt"),
            "src_lang": "en", "tgt_lang": "syn", "vocab_size": 200, "prepared_dir": str(assets / "prepared"),
        },
        "model": {"d_model": 32, "heads": 4, "ffn_dim": 64, "enc_layers": 1, "dec_layers": 1, "dropout": 0.1},
        "train": {"max_tokens": 2048, "lr": 2e-3, "warmup_steps": 10, "max_steps": 12, "valid_every": 6,
                  "valid_max_sentences": 10, "log_every": 5, "tensorboard": False, "device": "cpu", "threads": 1},
        "decode": {"beam_size": 3, "batch_size": 16, "max_len_a": 1.2, "max_len_b": 5},
    }


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else lambda d: path.write_text(d, encoding="utf-8"))(data)
    return path


def make_env(root: Path, log: Callable[[str], None] = print) -> Env:
    """Train the tiny model in-process (seconds) and write the hostile files beside it."""
    from syntaxnmt.analysis.export import export_attention
    from syntaxnmt.checkpoint import save_checkpoint
    from syntaxnmt.config import load_config
    from syntaxnmt.data.prepare import prepare
    from syntaxnmt.data.synthetic import write_corpus
    from syntaxnmt.training.train import train

    torch.set_num_threads(1)
    assets = root / "assets"
    corpus = write_corpus(assets / "corpus", n_train=300, n_dev=20, n_test=20, seed=1)
    tree = tiny_tree(assets)
    config = write(assets / "exp.yaml", yaml.safe_dump(tree, sort_keys=False))
    cfg = load_config(config)
    log("preparing and training the audit's tiny model (12 updates)")
    prepare(cfg, log=lambda *_: None)
    train(cfg, log=lambda *_: None)
    run = assets / "run"
    ckpt = run / "best.pt"
    env = Env(root=root, assets=assets, marker=root / MARKER, config=config, run=run, ckpt=ckpt, prepared=assets / "prepared", corpus=corpus)
    b = assets / "bad"
    b.mkdir()
    state = torch.load(ckpt, weights_only=True)
    bad = env.bad
    bad["evil_zip"] = b / "evil.pt"
    torch.save({"config": state["config"], "model": state["model"], "extra": Evil(env.marker)}, bad["evil_zip"])
    bad["evil_raw"] = write(b / "evil-raw.pt", pickle.dumps({"config": Evil(env.marker)}, protocol=2))
    bad["state_dict"] = b / "state_dict.pt"
    torch.save(state["model"], bad["state_dict"])
    bad["list"] = b / "list.pt"
    torch.save([1, 2, 3], bad["list"])
    raw = ckpt.read_bytes()
    bad["truncated"] = write(b / "truncated.pt", raw[: len(raw) // 2])
    bad["empty"] = write(b / "empty.pt", b"")
    bad["random"] = write(b / "random.pt", random.Random(0).randbytes(4096))
    third = len(raw) // 3
    bad["corrupt"] = write(b / "corrupt.pt", raw[:third] + b"\xff" * third + raw[2 * third:])
    nan = {**state, "model": {k: (v.clone().fill_(float("nan")) if v.is_floating_point() and i == 0 else v) for i, (k, v) in enumerate(state["model"].items())}}
    bad["nan"] = b / "nan.pt"
    save_checkpoint(bad["nan"], nan)
    other = {**state, "config": {**state["config"], "model": {**state["config"]["model"], "d_model": 64, "ffn_dim": 128}}}
    bad["other_arch"] = b / "other-arch.pt"
    save_checkpoint(bad["other_arch"], other)
    bad["text"] = write(b / "text.pt", "this is not a checkpoint\n")
    # files
    bad["binary"] = write(b / "binary.bin", bytes(range(256)) * 8)
    bad["latin1"] = write(b / "latin1.txt", "caf\xe9 au lait\n".encode("latin-1"))
    bad["empty_txt"] = write(b / "empty.txt", "")
    bad["one_line"] = write(b / "one.txt", "a red house .\n")
    bad["three_lines"] = write(b / "three.txt", "a red house .\na woman eats .\nthe man .\n")
    bad["bomb"] = write(b / "bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    bad["duplicate"] = write(b / "duplicate.yaml", yaml.safe_dump({k: v for k, v in tree.items() if k != "train"}, sort_keys=False) + "train:\n  max_steps: 5\ntrain:\n  lr: 0.1\n")
    bad["yaml_syntax"] = write(b / "syntax.yaml", "data: {train_src: [unclosed\n")
    bad["yaml_list"] = write(b / "list.yaml", "- 1\n- 2\n")
    bad["unknown_key"] = write(b / "unknown.yaml", yaml.safe_dump({**tree, "trian": {"lr": 1}}, sort_keys=False))
    bad["wrong_type"] = write(b / "wrongtype.yaml", yaml.safe_dump({**tree, "train": {**tree["train"], "max_steps": "many"}}, sort_keys=False))
    bad["python_tag"] = write(b / "pytag.yaml", f"name: !!python/object/apply:builtins.open ['{env.marker}', 'w']\n")
    bad["missing_data"] = write(b / "missing-data.yaml", yaml.safe_dump({**tree, "data": {**tree["data"], "train_src": str(b / "nope.src")}}, sort_keys=False))
    bad["mismatch_data"] = write(b / "mismatch.yaml", yaml.safe_dump({**tree, "data": {**tree["data"], "train_src": str(bad["three_lines"]), "train_tgt": str(bad["one_line"])}}, sort_keys=False))
    bad["latin1_data"] = write(b / "latin1-data.yaml", yaml.safe_dump({**tree, "data": {**tree["data"], "train_src": str(bad["latin1"]), "train_tgt": str(bad["latin1"])}}, sort_keys=False))
    bad["empty_data"] = write(b / "empty-data.yaml", yaml.safe_dump({**tree, "data": {**tree["data"], "train_src": str(bad["empty_txt"]), "train_tgt": str(bad["empty_txt"])}}, sort_keys=False))
    bad["dir_data"] = write(b / "dir-data.yaml", yaml.safe_dump({**tree, "data": {**tree["data"], "train_src": str(b)}}, sort_keys=False))
    bad["traversal_base"] = write(b / "traversal.yaml", "base: ../../../../../../../../etc/passwd\n")
    # experiment sets
    bad["set_list"] = write(b / "list.set.yaml", "- a\n- b\n")
    bad["set_missing_config"] = write(b / "missing.set.yaml", yaml.safe_dump({"name": "s", "baseline": "baseline", "configs": {"baseline": str(b / "nope.yaml")}, "seeds": [1],
                                                                              "test_sets": {"test": {"src": str(corpus["test"]["src"]), "ref": str(corpus["test"]["tgt"])}}, "output": "results.md"}))
    bad["set_duplicate"] = write(b / "dup.set.yaml", "name: s\nseeds: [1]\nseeds: [2]\n")
    # alignments
    bad["pharaoh_bad"] = write(b / "bad.align", "0-0 1-x\n")
    bad["pharaoh_triple"] = write(b / "triple.align", "0-1-2\n")
    bad["pharaoh_negative"] = write(b / "negative.align", "-1-2\n")
    bad["pharaoh_far"] = write(b / "far.align", "0-0 99-99\n")
    bad["pharaoh_ok"] = write(b / "ok.align", "0-0 1-1\n")
    bad["pharaoh_two"] = write(b / "two.align", "0-0\n1-1\n")
    bad["bitext_bad"] = write(b / "bitext.txt", "no separator here\n")
    # CoNLL-U
    bad["conllu_bad"] = write(b / "bad.conllu", "1\tthe\n\n")
    bad["conllu_cycle"] = write(b / "cycle.conllu", "1\ta\ta\tDET\tDT\t_\t2\tdet\t_\t_\n2\tred\tred\tADJ\tJJ\t_\t1\tamod\t_\t_\n3\thouse\thouse\tNOUN\tNN\t_\t0\troot\t_\t_\n\n")
    # contrastive
    bad["contrastive_notjson"] = write(b / "contrastive.txt.json", "{not json")
    bad["contrastive_ints"] = write(b / "ints.json", "[1, 2, 3]")
    bad["contrastive_empty"] = write(b / "empty.json", "[]")
    bad["contrastive_index"] = write(b / "index.json", json.dumps({"items": [{"src": "a red house .", "candidates": ["aru ie .", "ie ."], "correct": 5}]}))
    bad["contrastive_types"] = write(b / "types.json", json.dumps({"items": [{"src": 7, "candidates": "x", "correct": "0"}]}))
    bad["contrapro"] = write(b / "contrapro.json", json.dumps([{"src segment": "a .", "ref segment": "b .", "errors": [{"contrastive": "c ."}], "ante distance": 1,
                                                                "src pronoun": "it", "ref pronoun": "es", "document id": "d", "segment id": 1}]))
    # doc ids
    bad["docs_short"] = write(b / "short.docs", "d1\n")
    # attention export
    att = assets / "att"
    export_attention(ckpt, str(corpus["test"]["src"]), att, sentences="0-1", device=torch.device("cpu"))
    npz = att.with_suffix(".npz").read_bytes()
    write(b / "att-cut.jsonl", att.with_suffix(".jsonl").read_bytes())
    bad["att_cut"] = write(b / "att-cut.npz", npz[: len(npz) // 2])
    write(b / "att-text.jsonl", att.with_suffix(".jsonl").read_bytes())
    bad["att_text"] = write(b / "att-text.npz", "not a zip\n")
    bad["att"] = att
    log("wrote the shared files")
    return env


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    """One bad input: ``argv`` (``{case}`` is the case's own folder, also its working folder)."""

    name: str
    command: str
    argv: list[str]
    expect: int = 2
    fragments: tuple[str, ...] = ()
    stdin: bytes | None = None
    setup: Callable[[Path, Env], object] | None = None  # makes the case's files in its folder
    protect: tuple[str, ...] = ()
    check: Callable[[Path, str, str], str | None] | None = None
    timeout: float = 180
    in_process: bool = True  # can run through ``syntaxnmt.cli.main`` in a test (no stdin, no reader thread)
    reader: str | None = None  # a FIFO (relative to the case folder) that a thread reads meanwhile
    extended: bool = False  # run only with --all (the default table keeps the audit near 5 minutes of one core)


def _copy_run(dst: str) -> Callable[[Path, Env], None]:
    def setup(case: Path, env: Env) -> None:
        shutil.copytree(env.run, case / dst)
    return setup


def _user_files(case: Path, _env: Env) -> None:
    """A folder a user cares about: files, a subfolder, the checkpoint being exported."""
    write(case / "notes.txt", "my notes\n")
    write(case / "sub" / "data.txt", "precious\n")


def _checkpoint_inside(case: Path, env: Env) -> None:
    write(case / "D" / "notes.txt", "keep me\n")
    shutil.copy(env.ckpt, case / "D" / "best.pt")


def _unmarked(case: Path, _env: Env) -> None:
    write(case / "out" / "model.bin", "an export of some other tool\n")


def _symlink(case: Path, _env: Env) -> None:
    write(case / "real" / "file.txt", "behind a link\n")
    (case / "link").symlink_to(case / "real", target_is_directory=True)


def _fifo(case: Path, _env: Env) -> None:
    os.mkfifo(case / "fifo")


def _file_named_out(case: Path, _env: Env) -> None:
    write(case / "out", "a file\n")


def _dir_named_out(case: Path, _env: Env) -> None:
    (case / "out.txt").mkdir()
    write(case / "out.txt" / "inside", "x\n")


def _damaged_meta(case: Path, env: Env) -> None:
    shutil.copytree(env.prepared, case / "prepared")
    write(case / "prepared" / "meta.json", "{not json")


def _cut_array(case: Path, env: Env) -> None:
    shutil.copytree(env.prepared, case / "prepared")
    meta = json.loads((case / "prepared" / "meta.json").read_text(encoding="utf-8"))
    meta["data_config"]["prepared_dir"] = str(case / "prepared")  # the same cache, moved: only the array is damaged
    write(case / "prepared" / "meta.json", json.dumps(meta))
    arr = case / "prepared" / "train.tgt.data.npy"
    arr.write_bytes(arr.read_bytes()[:200])


def _data_beside_config(case: Path, _env: Env) -> None:
    """A config in ``exp/`` naming ``corpus/train.src``, which exists beside it, not in the working folder."""
    write(case / "exp" / "corpus" / "train.src", "a red house .\n")
    write(case / "exp" / "c.yaml", "data:\n  train_src: corpus/train.src\n  train_tgt: corpus/train.src\n")


def _still_fifo(case: Path, _out: str, _err: str) -> str | None:
    return None if stat.S_ISFIFO((case / "fifo").lstat().st_mode) else "the FIFO was replaced by a regular file"


def _dev_full_kept(_case: Path, _out: str, _err: str) -> str | None:
    return None if stat.S_ISCHR(os.lstat("/dev/full").st_mode) else "/dev/full is no longer a character device"


def _stdout_has(text: str) -> Callable[[Path, str, str], str | None]:
    def check(_case: Path, out: str, _err: str) -> str | None:
        return None if text in out else f"stdout lacks {text!r}"
    return check


def _stdout_lines(n: int) -> Callable[[Path, str, str], str | None]:
    def check(_case: Path, out: str, _err: str) -> str | None:
        return None if len(out.splitlines()) == n else f"stdout holds {len(out.splitlines())} lines, not {n}"
    return check


def _file_made(rel: str) -> Callable[[Path, str, str], str | None]:
    def check(case: Path, _out: str, _err: str) -> str | None:
        return None if (case / rel).is_file() else f"{rel} was not written"
    return check


def _fifo_has_lines(case: Path, _out: str, _err: str) -> str | None:
    problem = _still_fifo(case, _out, _err)
    got = (case / "fifo.read").read_text(encoding="utf-8") if (case / "fifo.read").exists() else ""
    return problem or (None if got.count("\n") == 20 else f"the reader got {got.count(chr(10))} lines, not 20")



# ------------------------------------------------------------------ issue 49 item 5: input hygiene in one reader

BOM = "\ufeff".encode("utf-8")
HYGIENE_TEXT = "every dog barks .\nthe man sees a red house .\n"


def _bom_pair(case: Path, _env: Env) -> None:
    write(case / "hyp.txt", BOM + HYGIENE_TEXT.encode("utf-8"))
    write(case / "ref.txt", HYGIENE_TEXT)


def _bom_text(case: Path, _env: Env) -> None:
    write(case / "in.txt", BOM + HYGIENE_TEXT.encode("utf-8"))


def _parsed_every_as_det(_case: Path, out: str, _err: str) -> str | None:
    """``parse`` read 'every', not '\\ufeffevery' (tagged NUM before issue 49)."""
    return None if "\t\ufeff" not in out and "1\tevery\t_\tDET\t" in out else "the first word is not 'every' tagged DET"


def _long_lines(chars: int) -> Callable[[Path, Env], None]:
    def setup(case: Path, _env: Env) -> None:
        write(case / "long.txt", b"a red house .\n" + b"x" * chars + b"\n")
    return setup


def _edit_checkpoint(name: str, edit: Callable[[dict], None]) -> Callable[[Path, Env], None]:
    """A copy of the audit's checkpoint at ``{case}/name``, changed by ``edit(state)``."""
    def setup(case: Path, env: Env) -> None:
        from syntaxnmt.checkpoint import save_checkpoint

        state = torch.load(env.ckpt, weights_only=True)
        edit(state)
        save_checkpoint(case / name, state)
    return setup


def _first_float(state: dict) -> str:
    return next(k for k, v in state["model"].items() if v.is_floating_point())


def _zip_bomb(case: Path, env: Env) -> None:
    """The audit's checkpoint plus 64 MiB of zeros under an unused key, deflated: a 1 MB file
    that the loader of issue 49 expanded in full."""
    import io
    import zipfile

    buf = io.BytesIO()
    torch.save({**torch.load(env.ckpt, weights_only=True), "unused": torch.zeros(16 << 20)}, buf)
    with zipfile.ZipFile(buf) as z, zipfile.ZipFile(case / "bomb.pt", "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename))


_TMPFS: list[bool] = []  # the answer of _tmpfs_possible, found once


def _tmpfs_possible() -> bool:
    """Whether this process may mount a tmpfs (root, and a ``mount`` that works): the full-disk case needs one."""
    if not _TMPFS:
        ok = os.geteuid() == 0 and shutil.which("mount") is not None
        if ok:
            with tempfile.TemporaryDirectory() as d:
                ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", d], capture_output=True).returncode == 0
                if ok:
                    subprocess.run(["umount", d], capture_output=True)
        _TMPFS.append(ok)
    return _TMPFS[0]


def _full_tensorboard_disk(case: Path, _env: Env) -> None:
    """The run's ``tensorboard`` folder on an 8 KiB tmpfs with one 4 KiB page free: the event file
    fills it within the first updates; the checkpoints, on another disk, are written (unmounted by the check)."""
    (case / "run" / "tensorboard").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(case / "run" / "tensorboard")], check=True)
    write(case / "run" / "tensorboard" / "filler", b"\0" * 4096)


def _tensorboard_stopped(case: Path, out: str, _err: str) -> str | None:
    subprocess.run(["umount", "-l", str(case / "run" / "tensorboard")], capture_output=True)
    if not (case / "run" / "best.pt").is_file():
        return "training did not go on to write best.pt"
    return None if "tfevents" in out and ": cannot write (No space left on device): TensorBoard logging stopped, training goes on" in out else "stdout lacks the message that TensorBoard stopped, naming its file"


def input_hygiene_cases(env: Env) -> list[Case]:
    """Issue 49 item 5: a byte-order mark, a line over the limits, an input without end, a damaged
    stored tokenizer, integer or stride-0 weights, a zip bomb, a full disk under TensorBoard during
    ``train`` (root only: it mounts a tmpfs; a full disk under a file ``atomic_write`` writes is
    ``translate-output-dev-full``)."""
    C, ck, cfg = Case, str(env.ckpt), str(env.config)
    one = str(env.bad["one_line"])
    out = [
        C("bom-evaluate", "evaluate", ["evaluate", "--hyp", "{case}/hyp.txt", "--ref", "{case}/ref.txt"], setup=_bom_pair, expect=0, check=_stdout_has("BLEU = 100.00")),
        C("bom-parse", "parse", ["parse", "-i", "{case}/in.txt"], setup=_bom_text, expect=0, check=_parsed_every_as_det),
        C("bom-parse-stdin", "parse", ["parse"], stdin=BOM + HYGIENE_TEXT.encode("utf-8"), expect=0, check=_parsed_every_as_det, in_process=False),
        C("utf16-input", "translate", ["translate", "--checkpoint", ck, "-i", "{case}/in.txt"], setup=lambda c, e: write(c / "in.txt", "a red house .\n".encode("utf-16")) and None, fragments=("in.txt:1", "UTF-16")),
        C("parse-line-over-spacy-limit", "parse", ["parse", "-i", "{case}/long.txt"], setup=_long_lines(1_000_001), fragments=("line 2 of", "long.txt", "nlp.max_length")),
        C("translate-line-over-limit", "translate", ["translate", "--checkpoint", ck, "-i", "{case}/long.txt"], setup=_long_lines((1 << 20) + 1), fragments=("long.txt:2", "1,048,576 bytes")),
        C("translate-dev-zero", "translate", ["translate", "--checkpoint", ck, "-i", "/dev/zero"], fragments=("/dev/zero:1", "longer than"), timeout=60),
        C("translate-stdin-without-newline", "translate", ["translate", "--checkpoint", ck], stdin=b"a" * (3 << 20), fragments=("<stdin>:1", "longer than"), in_process=False, timeout=60),
        C("evaluate-dev-zero", "evaluate", ["evaluate", "--hyp", "/dev/zero", "--ref", one], fragments=("/dev/zero:1",), timeout=60),
        C("translate-damaged-tokenizer", "translate", ["translate", "--checkpoint", "{case}/tok.pt", "-i", one],
          setup=_edit_checkpoint("tok.pt", lambda s: s["assets"].update(spm_tgt=s["assets"]["spm_tgt"][: len(s["assets"]["spm_tgt"]) // 3])), fragments=("tok.pt", "target tokenizer")),
        C("translate-int64-weights", "translate", ["translate", "--checkpoint", "{case}/int.pt", "-i", one],
          setup=_edit_checkpoint("int.pt", lambda s: s["model"].update({_first_float(s): (s["model"][_first_float(s)] * 100).long()})), fragments=("int.pt", "int64")),
        C("translate-zip-bomb", "translate", ["translate", "--checkpoint", "{case}/bomb.pt", "-i", one], setup=_zip_bomb, fragments=("bomb.pt", "expands to")),
        C("translate-stride-zero-weight", "translate", ["translate", "--checkpoint", "{case}/view.pt", "-i", one],
          setup=_edit_checkpoint("view.pt", lambda s: s["model"].update({_first_float(s): torch.zeros(1).expand(1 << 36)})), fragments=("view.pt", "claims")),  # checking it whole: 64 GB
        C("average-damaged-tokenizer", "average-checkpoints", ["average-checkpoints", "--inputs", ck, "{case}/tok.pt", "-o", "{case}/avg.pt"],
          setup=_edit_checkpoint("tok.pt", lambda s: s["assets"].update(spm_src=b"not a model")), fragments=("tok.pt", "source tokenizer")),
    ]
    if _tmpfs_possible():  # root only: a real full disk (the tests simulate one with ENOSPC)
        out.append(C("train-full-disk-tensorboard", "train", ["train", cfg, "--work_dir={case}/run", "--train.tensorboard=true", "--train.log_every=1", "--train.valid_every=1000", "--train.max_steps=40"],
                     setup=_full_tensorboard_disk, expect=0, check=_tensorboard_stopped, in_process=False))
    return out


EXTENDED = frozenset("""
unknown-option config-directory config-top-level-list override-no-value override-unknown-section config-latin1 data-directory config-wrong-type
lr-string seed-huge dropout-above-one max-steps-negative arch-unknown heads-not-dividing max-tokens-zero lr-nan
work-dir-under-file joint-bomb experiment-bomb experiment-set-list experiment-jobs-zero decode-experiment-list align-experiment-binary demo-dir-is-file
demo-fresh-unmarked synthetic-train-not-number synthetic-output-is-file parse-non-utf8 translate-empty-pt translate-text-as-checkpoint translate-checkpoint-directory translate-beam-negative
translate-beam-not-number translate-decode-override-unknown translate-input-directory translate-binary-input translate-output-missing-folder translate-align-layer-alone translate-alignments-ct2 translate-no-best
translate-threads-negative translate-conllu-unused translate-output-under-file translate-random-bytes score-not-json score-wrong-types evaluate-bootstrap-negative evaluate-non-utf8
evaluate-empty lexicon-min-count-zero average-nothing average-missing-input average-output-directory export-bad-quantization export-existing-no-force align-external-duplicate
align-head-not-number align-non-utf8 align-bad-symmetrize sweep-output-directory sweep-one-indexed-zero aer-binary aer-three-part-link aer-non-utf8
aer-one-indexed-zero plot-head-not-number plot-neither-source plot-bad-extension attention-output-missing-folder attention-bad-sentences heads-bad-sentences serve-port-negative
serve-timeout-nan
""".split())
"""Cases run only with ``--all``: variants of a default case (another number, another file kind)."""


# ------------------------------------------------------------------ nothing a user owns is lost (issue 49)

_HELD_LOCKS: list = []  # lock files the audit holds while a case runs (released by the case's check)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _demo_names_unmarked(case: Path, _env: Env) -> None:
    """A user's project whose entries happen to be named as the demo's: their corpus and trained model."""
    write(case / "P" / "corpus" / "train.src", "my corpus\n")
    write(case / "P" / "run" / "best.pt", "my trained model")


def _demo_marked_with_additions(case: Path, _env: Env) -> None:
    from syntaxnmt.experiments.demo import MARKER as DEMO_MARKER
    from syntaxnmt.experiments.demo import WRITTEN_BY as DEMO_BY
    from syntaxnmt.textio import write_marker

    write(case / "P" / "demo.yaml", "name: demo\n")
    write(case / "P" / "corpus" / "train.src", "the demo's corpus\n")
    write_marker(case / "P", DEMO_MARKER, DEMO_BY)
    write(case / "P" / "NOTES.md", "my notes\n")
    write(case / "P" / "my_experiment" / "best.pt", "my model")


def _user_corpus(case: Path, _env: Env) -> None:
    write(case / "P" / "train.src", "my source\n")
    write(case / "P" / "train.tgt", "my target\n")
    write(case / "P" / "corpus" / "train.src", "my source\n")


def _export_with_user_file(case: Path, env: Env) -> None:
    from syntaxnmt.decoding.ct2_export import export_ct2

    export_ct2(env.ckpt, case / "out")
    write(case / "out" / "NOTES.md", "how I deploy this export\n")


def _run_with_user_backup(case: Path, env: Env) -> None:
    """A copy of the run holding a user's ``.backup.2024.tmp/`` and a temporary a killed periodic write left."""
    shutil.copytree(env.run, case / "run")
    write(case / "run" / ".backup.2024.tmp" / "last.pt", "my backup")
    write(case / "run" / "checkpoints" / f".step-00000012.pt.syntaxnmt-{_dead_pid()}.k2j4h5g6.tmp", "half a checkpoint")


def _stale_temporary_removed(case: Path, _out: str, _err: str) -> str | None:
    left = list((case / "run" / "checkpoints").glob(".step-*.tmp"))
    return f"the stale temporary {left[0].name} was kept" if left else None


def _locked_run(case: Path, env: Env) -> None:
    """The run's work_dir held by another writer (the lock protocol of ``train``: flock plus its PID and host)."""
    import fcntl

    shutil.copytree(env.run, case / "run")
    f = open(case / "run" / ".syntaxnmt-lock", "w", encoding="utf-8")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write("syntaxnmt pid 4242 on host audit-holder\n")
    f.flush()
    _HELD_LOCKS.append(f)


def _release_locks(_case: Path, _out: str, _err: str) -> str | None:
    while _HELD_LOCKS:
        _HELD_LOCKS.pop().close()
    return None


def _other_corpus(case: Path, env: Env) -> None:
    """The run, and a training corpus of another seed (same vocab_size, other pieces) at new paths."""
    from syntaxnmt.data.synthetic import write_corpus

    shutil.copytree(env.run, case / "run")
    write_corpus(case / "other", n_train=300, n_dev=20, n_test=20, seed=2)


def _output_files(case: Path, env: Env) -> None:
    shutil.copy(env.ckpt, case / "M.pt")
    shutil.copy(env.ckpt, case / "N.pt")
    shutil.copy(env.config, case / "exp.yaml")
    write(case / "src.txt", "every apple sees the garden .\n")
    write(case / "tgt.txt", "every apple the garden sees .\n")
    write(case / "set.json", "[]\n")
    write(case / "X", "mine\n")
    os.link(case / "src.txt", case / "hard.txt")
    write(case / "ro.txt", "write-protected\n")
    (case / "ro.txt").chmod(0o444)


def _still_read_only(case: Path, _out: str, _err: str) -> str | None:
    mode = stat.S_IMODE((case / "ro.txt").stat().st_mode)
    return None if mode == 0o444 else f"ro.txt has mode {mode:o}, not 444"


def ownership_cases(env: Env) -> list[Case]:
    """Issue 49 (items 1-4) and issue 51 (items 3, 6): nothing a user owns is removed or written
    over, outputs never overwrite inputs, one writer per work_dir, resume and init_from check the
    vocabulary. Every data-loss case protects the user's files (tree, content and mode)."""
    ck, cfg, one = str(env.ckpt), str(env.config), str(env.bad["one_line"])
    run = ["--work_dir={case}/run", f"--data.prepared_dir={env.prepared}"]  # the run's copy, with the shared prepared corpus (read only)
    other = ["--data.train_src={case}/other/train.src", "--data.train_tgt={case}/other/train.tgt", "--data.prepared_dir={case}/prepared"]
    C = Case
    return [
        C("demo-fresh-demo-names", "demo", ["demo", "--dir", "{case}/P", "--fresh", "--minutes", "0.05"], setup=_demo_names_unmarked, protect=("P",), fragments=("P", "no .syntaxnmt-demo")),
        C("demo-fresh-user-additions", "demo", ["demo", "--dir", "{case}/P", "--fresh", "--minutes", "0.05"], setup=_demo_marked_with_additions, protect=("P",), fragments=("NOTES.md", "my_experiment")),
        C("demo-over-user-corpus", "demo", ["demo", "--dir", "{case}/P", "--minutes", "0.05"], setup=_user_corpus, protect=("P",), fragments=("P", "--force")),
        C("synthetic-over-user-files", "synthetic", ["synthetic", "-o", "{case}/P", "--train", "10", "--dev", "2", "--test", "2"], setup=_user_corpus, protect=("P",), fragments=("train.src", "--force")),
        C("export-force-user-file", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/out", "--force"], setup=_export_with_user_file, protect=("out",), fragments=("NOTES.md",)),
        C("train-cleanup-user-temporary", "train", ["train", cfg, *run, "--resume"], expect=0, setup=_run_with_user_backup, protect=("run/.backup.2024.tmp",), check=_stale_temporary_removed),
        C("train-work-dir-locked", "train", ["train", cfg, *run, "--resume"], setup=_locked_run, protect=("run",), fragments=("in use by syntaxnmt pid 4242 on host audit-holder",), check=_release_locks, in_process=False),
        C("train-resume-corpus-changed", "train", ["train", cfg, "--work_dir={case}/run", *other, "--resume"], setup=_other_corpus, protect=("run",), fragments=("vocabulary", "data.train_src")),
        C("train-resume-lr-applied", "train", ["train", cfg, *run, "--resume", "--train.lr=0.001"], expect=0, setup=_copy_run("run"), check=_stdout_has("train.lr 0.002 -> 0.001: applied on resume")),
        C("train-init-from-other-vocabulary", "train", ["train", cfg, "--work_dir={case}/new", *other, f"--train.init_from={ck}"], setup=_other_corpus, protect=("run",), fragments=("train.init_from", "vocabulary")),
        C("translate-output-onto-checkpoint", "translate", ["translate", "--checkpoint", "{case}/M.pt", "-i", one, "-o", "{case}/M.pt"], setup=_output_files, protect=("M.pt",), fragments=("M.pt", "--checkpoint")),
        C("translate-output-is-alignments", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "{case}/X", "--alignments", "{case}/X"], setup=_output_files, protect=("X",), fragments=("--alignments",)),
        C("translate-output-hard-link-to-input", "translate", ["translate", "--checkpoint", ck, "-i", "{case}/src.txt", "-o", "{case}/hard.txt"], setup=_output_files, protect=("src.txt",), fragments=("hard.txt", "-i")),
        C("translate-output-write-protected", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "{case}/ro.txt"], setup=_output_files, protect=("ro.txt",), fragments=("ro.txt", "Permission denied"), check=_still_read_only),
        C("align-output-onto-source", "align", ["align", "--checkpoint", ck, "--src", "{case}/src.txt", "--tgt", "{case}/tgt.txt", "-o", "{case}/src.txt"], setup=_output_files, protect=("src.txt", "tgt.txt"), fragments=("src.txt", "--src")),
        C("lexicon-output-onto-config", "lexicon", ["lexicon", "{case}/exp.yaml", "-o", "{case}/exp.yaml"], setup=_output_files, protect=("exp.yaml",), fragments=("exp.yaml", "CONFIG")),
        C("score-output-onto-contrastive", "score", ["score", "--checkpoint", ck, "--contrastive", "{case}/set.json", "-o", "{case}/set.json"], setup=_output_files, protect=("set.json",), fragments=("set.json", "--contrastive")),
        C("average-output-onto-input", "average-checkpoints", ["average-checkpoints", "--inputs", "{case}/M.pt", "{case}/N.pt", "-o", "{case}/N.pt"], setup=_output_files, protect=("M.pt", "N.pt"), fragments=("N.pt",)),
    ]


def terminology_cases(env: Env) -> list[Case]:
    """Issue 52: the term dictionary, terminology test set and term-accuracy commands."""
    C = Case
    one, three = str(env.bad["one_line"]), str(env.bad["three_lines"])
    return [
        C("terminology-missing-lexicon", "terminology", ["terminology", "--from-lexicon", "{case}/nope.tsv", "-o", "{case}/d.tsv"], fragments=("nope.tsv", "syntaxnmt lexicon")),
        C("terminology-not-a-lexicon", "terminology", ["terminology", "--from-lexicon", one, "-o", "{case}/d.tsv"], fragments=(f"{Path(one).name}:1", "source<TAB>target")),
        C("terminology-threshold-above-one", "terminology", ["terminology", "--from-lexicon", one, "--threshold", "2", "-o", "{case}/d.tsv"], fragments=("--threshold 2",)),
        C("terminology-set-missing-lexicon", "terminology-set", ["terminology-set", "--lexicon", "{case}/nope.tsv", "--src", one, "--ref", one, "-o", "{case}/out"], fragments=("nope.tsv",)),
        C("evaluate-terms-line-mismatch", "evaluate-terms", ["evaluate-terms", "--ref", one, "--constraints", three, "--hyp", f"plain={one}"], fragments=(Path(three).name, "3 lines")),
        C("evaluate-terms-unnamed-hyp", "evaluate-terms", ["evaluate-terms", "--ref", one, "--constraints", one, "--hyp", one], fragments=("NAME=FILE",)),
    ]


def cases(env: Env) -> list[Case]:
    """The audit's case table (at least 110 command-line cases, every subcommand)."""
    b, ck, cfg, cor = env.bad, str(env.ckpt), str(env.config), env.corpus
    src, tgt = str(cor["test"]["src"]), str(cor["test"]["tgt"])
    gold = str(cor["test"]["align"])
    one, three, empty, binary, latin1 = (str(b[k]) for k in ("one_line", "three_lines", "empty_txt", "binary", "latin1"))
    evil, evil_raw = str(b["evil_zip"]), str(b["evil_raw"])
    C = Case
    LOCAL = ["--data.prepared_dir={case}/prepared", "--work_dir={case}/run"]  # what a case writes stays in its folder
    out: list[Case] = [
        # the command line itself
        C("no-command", "(none)", [], fragments=("COMMAND",)),
        C("unknown-command", "(none)", ["frobnicate"], fragments=("frobnicate",)),
        C("version", "(none)", ["--version"], expect=0, check=_stdout_has("syntaxnmt ")),
        C("unknown-option", "(none)", ["translate", "--checkpoint", ck, "--frobnicate"], fragments=("--frobnicate",)),
        # prepare: config files
        C("config-missing", "prepare", ["prepare", "{case}/nope.yaml"], fragments=("nope.yaml",)),
        C("config-empty", "prepare", ["prepare", empty], fragments=("data.train_src",)),
        C("config-binary", "prepare", ["prepare", binary], fragments=("binary.bin",)),
        C("config-latin1", "prepare", ["prepare", latin1], fragments=("latin1.txt",)),
        C("config-directory", "prepare", ["prepare", str(env.assets / "bad")], fragments=("bad",)),
        C("config-yaml-syntax", "prepare", ["prepare", str(b["yaml_syntax"])], fragments=("syntax.yaml",)),
        C("config-yaml-bomb", "prepare", ["prepare", str(b["bomb"])], fragments=("bomb.yaml", "alias"), timeout=30),
        C("config-duplicate-key", "prepare", ["prepare", str(b["duplicate"])], fragments=("duplicate.yaml", "duplicate key 'train'")),
        C("config-top-level-list", "prepare", ["prepare", str(b["yaml_list"])], fragments=("list.yaml",)),
        C("config-unknown-key", "prepare", ["prepare", str(b["unknown_key"])], fragments=("trian",)),
        C("config-wrong-type", "prepare", ["prepare", str(b["wrong_type"])], fragments=("max_steps",)),
        C("config-python-tag", "prepare", ["prepare", str(b["python_tag"])], fragments=("pytag.yaml",)),
        C("config-base-traversal", "prepare", ["prepare", str(b["traversal_base"])], fragments=("passwd",)),
        C("data-missing-file", "prepare", ["prepare", str(b["missing_data"]), *LOCAL], fragments=("nope.src",)),
        C("data-line-mismatch", "prepare", ["prepare", str(b["mismatch_data"]), *LOCAL], fragments=("three.txt", "one.txt")),
        C("data-non-utf8", "prepare", ["prepare", str(b["latin1_data"]), *LOCAL], fragments=("latin1.txt", "UTF-8")),
        C("data-empty", "prepare", ["prepare", str(b["empty_data"]), *LOCAL], fragments=("empty.txt",)),
        C("data-directory", "prepare", ["prepare", str(b["dir_data"]), *LOCAL], fragments=("is a directory",)),
        C("cache-damaged-meta", "prepare", ["prepare", cfg, "--data.prepared_dir={case}/prepared"], setup=_damaged_meta, fragments=("meta.json", "--force")),
        C("override-unknown-section", "prepare", ["prepare", cfg, "--bogus.key=1"], fragments=("bogus",)),
        C("override-no-value", "prepare", ["prepare", cfg, "--train.lr"], fragments=("train.lr",)),
        # train
        C("lr-inf", "train", ["train", cfg, "--work_dir={case}/run", "--train.lr=1e400"], fragments=("train.lr",)),
        C("lr-nan", "train", ["train", cfg, "--work_dir={case}/run", "--train.lr=.nan"], fragments=("train.lr",)),
        C("lr-string", "train", ["train", cfg, "--work_dir={case}/run", "--train.lr=fast"], fragments=("train.lr",)),
        C("seed-negative", "train", ["train", cfg, "--work_dir={case}/run", "--seed=-1"], fragments=("seed",)),
        C("seed-huge", "train", ["train", cfg, "--work_dir={case}/run", "--seed=99999999999999999999"], fragments=("seed",)),
        C("ffn-dim-absurd", "train", ["train", cfg, "--work_dir={case}/run", "--model.ffn_dim=1000000000000"], fragments=("model.ffn_dim",)),
        C("max-tokens-zero", "train", ["train", cfg, "--work_dir={case}/run", "--train.max_tokens=0"], fragments=("train.max_tokens",)),
        C("dropout-above-one", "train", ["train", cfg, "--work_dir={case}/run", "--model.dropout=1.5"], fragments=("model.dropout",)),
        C("max-steps-negative", "train", ["train", cfg, "--work_dir={case}/run", "--train.max_steps=-5"], fragments=("train.max_steps",)),
        C("heads-not-dividing", "train", ["train", cfg, "--work_dir={case}/run", "--model.heads=5"], fragments=("heads",)),
        C("arch-unknown", "train", ["train", cfg, "--work_dir={case}/run", "--model.arch=lstm9"], fragments=("model.arch",)),
        C("device-unknown", "train", ["train", cfg, "--work_dir={case}/run", "--train.device=tpu"], fragments=("tpu",)),
        C("threads-negative", "train", ["train", cfg, "--threads", "-1"], fragments=("--threads",)),
        C("resume-changed-size", "train", ["train", cfg, "--work_dir={case}/run", "--resume", "--model.d_model=64", "--model.ffn_dim=128"], setup=_copy_run("run"), fragments=("d_model",)),
        C("resume-changed-heads", "train", ["train", cfg, "--work_dir={case}/run", "--resume", "--model.heads=8"], setup=_copy_run("run"), fragments=("heads",)),
        C("resume-crafted-pickle", "train", ["train", cfg, "--work_dir={case}/run", "--resume"], setup=lambda c, e: (_copy_run("run")(c, e), shutil.copy(e.bad["evil_zip"], c / "run" / "last.pt")), fragments=("last.pt",)),
        C("resume-truncated", "train", ["train", cfg, "--work_dir={case}/run", "--resume"], setup=lambda c, e: (_copy_run("run")(c, e), shutil.copy(e.bad["truncated"], c / "run" / "last.pt")), fragments=("last.pt",)),
        C("work-dir-under-file", "train", ["train", cfg, "--work_dir={case}/out/run"], setup=_file_named_out, fragments=("out",)),
        C("cache-cut-array", "train", ["train", cfg, "--work_dir={case}/run", "--data.prepared_dir={case}/prepared"], setup=_cut_array, fragments=("train.tgt.data.npy",)),
        # train-joint
        C("joint-missing-config", "train-joint", ["train-joint", "{case}/nope.yaml"], fragments=("nope.yaml",)),
        C("joint-lr-inf", "train-joint", ["train-joint", cfg, "--work_dir={case}/run", "--train.lr=1e400"], fragments=("train.lr",)),
        C("joint-bomb", "train-joint", ["train-joint", str(b["bomb"])], fragments=("bomb.yaml",), timeout=30),
        # experiment
        C("experiment-n-seeds-zero", "experiment", ["experiment", str(b["set_missing_config"]), "--n-seeds", "0"], fragments=("--n-seeds",)),
        C("experiment-missing-set", "experiment", ["experiment", "{case}/nope.set.yaml"], fragments=("nope.set.yaml",)),
        C("experiment-set-list", "experiment", ["experiment", str(b["set_list"])], fragments=("list.set.yaml",)),
        C("experiment-set-duplicate", "experiment", ["experiment", str(b["set_duplicate"])], fragments=("duplicate key",)),
        C("experiment-set-missing-config", "experiment", ["experiment", str(b["set_missing_config"])], fragments=("nope.yaml",)),
        C("experiment-jobs-zero", "experiment", ["experiment", str(b["set_missing_config"]), "--jobs", "0"], fragments=("--jobs",)),
        C("experiment-bomb", "experiment", ["experiment", str(b["bomb"])], fragments=("bomb.yaml",), timeout=30),
        # decode-experiment, align-experiment
        C("decode-experiment-missing", "decode-experiment", ["decode-experiment", "{case}/nope.yaml"], fragments=("nope.yaml",)),
        C("decode-experiment-list", "decode-experiment", ["decode-experiment", str(b["set_list"])], fragments=("list.set.yaml",)),
        C("decode-experiment-bomb", "decode-experiment", ["decode-experiment", str(b["bomb"])], fragments=("bomb.yaml",), timeout=30),
        C("align-experiment-missing", "align-experiment", ["align-experiment", "{case}/nope.yaml"], fragments=("nope.yaml",)),
        C("align-experiment-duplicate", "align-experiment", ["align-experiment", str(b["set_duplicate"])], fragments=("duplicate key",)),
        C("align-experiment-binary", "align-experiment", ["align-experiment", binary], fragments=("binary.bin",)),
        # demo
        C("demo-minutes-negative", "demo", ["demo", "--dir", "{case}/demo", "--minutes", "-1"], fragments=("--minutes",)),
        C("demo-minutes-zero", "demo", ["demo", "--dir", "{case}/demo", "--minutes", "0"], fragments=("--minutes",)),
        C("demo-fresh-cwd", "demo", ["demo", "--dir", ".", "--fresh", "--minutes", "0.05"], setup=_user_files, protect=(".",), fragments=("current directory",)),
        C("demo-fresh-parent", "demo", ["demo", "--dir", "..", "--fresh", "--minutes", "0.05"], setup=_user_files, protect=("..",), fragments=("parent",)),
        C("demo-fresh-unmarked", "demo", ["demo", "--dir", "{case}/sub", "--fresh", "--minutes", "0.05"], setup=_user_files, protect=(".",), fragments=("sub",)),
        C("demo-dir-is-file", "demo", ["demo", "--dir", "{case}/out", "--minutes", "0.05"], setup=_file_named_out, protect=("out",), fragments=("out",)),
        # synthetic
        C("synthetic-train-negative", "synthetic", ["synthetic", "-o", "{case}/c", "--train", "-5"], fragments=("--train",)),
        C("synthetic-train-zero", "synthetic", ["synthetic", "-o", "{case}/c", "--train", "0"], fragments=("--train",)),
        C("synthetic-train-huge", "synthetic", ["synthetic", "-o", "{case}/c", "--train", "1000000000000"], fragments=("--train",), timeout=60),
        C("synthetic-docs-odd-test", "synthetic", ["synthetic", "-o", "{case}/c", "--documents", "--test", "3"], fragments=("--test",)),
        C("synthetic-output-is-file", "synthetic", ["synthetic", "-o", "{case}/out", "--train", "10", "--dev", "2", "--test", "2"], setup=_file_named_out, protect=("out",), fragments=("out",)),
        C("synthetic-train-not-number", "synthetic", ["synthetic", "-o", "{case}/c", "--train", "lots"], fragments=("--train",)),
        # parse
        C("parse-missing-input", "parse", ["parse", "-i", "{case}/nope.txt", "-o", "{case}/x.conllu"], fragments=("nope.txt",)),
        C("parse-non-utf8", "parse", ["parse", "-i", latin1, "-o", "{case}/x.conllu"], fragments=("latin1.txt",)),
        C("parse-binary-stdin", "parse", ["parse"], stdin=bytes(range(256)), fragments=("<stdin>",), in_process=False),
        C("parse-unknown-pipeline", "parse", ["parse", "-i", one, "--pipeline", "xx_no_such_pipeline"], fragments=("xx_no_such_pipeline",)),
        # translate: checkpoints
        C("translate-missing-checkpoint", "translate", ["translate", "--checkpoint", "{case}/nope.pt", "-i", one], fragments=("nope.pt",)),
        C("translate-crafted-pickle", "translate", ["translate", "--checkpoint", evil, "-i", one], fragments=("evil.pt",)),
        C("translate-crafted-raw-pickle", "translate", ["translate", "--checkpoint", evil_raw, "-i", one], fragments=("evil-raw.pt",)),
        C("translate-bare-state-dict", "translate", ["translate", "--checkpoint", str(b["state_dict"]), "-i", one], fragments=("state_dict.pt",)),
        C("translate-list-pt", "translate", ["translate", "--checkpoint", str(b["list"]), "-i", one], fragments=("list.pt",)),
        C("translate-truncated", "translate", ["translate", "--checkpoint", str(b["truncated"]), "-i", one], fragments=("truncated.pt",)),
        C("translate-empty-pt", "translate", ["translate", "--checkpoint", str(b["empty"]), "-i", one], fragments=("empty.pt",)),
        C("translate-random-bytes", "translate", ["translate", "--checkpoint", str(b["random"]), "-i", one], fragments=("random.pt",)),
        C("translate-corrupted-bytes", "translate", ["translate", "--checkpoint", str(b["corrupt"]), "-i", one], fragments=("corrupt.pt",)),
        C("translate-nan-weights", "translate", ["translate", "--checkpoint", str(b["nan"]), "-i", one], fragments=("nan.pt", "finite")),
        C("translate-other-architecture", "translate", ["translate", "--checkpoint", str(b["other_arch"]), "-i", one], fragments=("other-arch.pt",)),
        C("translate-text-as-checkpoint", "translate", ["translate", "--checkpoint", str(b["text"]), "-i", one], fragments=("text.pt",)),
        C("translate-checkpoint-traversal", "translate", ["translate", "--checkpoint", "../../../../../../../../etc/passwd", "-i", one], fragments=("passwd",)),
        C("translate-checkpoint-directory", "translate", ["translate", "--checkpoint", str(env.run), "-i", one], expect=0, check=_stdout_lines(1)),  # documented: a run folder
        C("translate-crafted-pickle-ct2", "translate", ["translate", "--engine", "ctranslate2", "--checkpoint", evil, "-i", one], fragments=("evil.pt",)),
        C("translate-no-best", "translate", ["translate", cfg, "--work_dir={case}/empty", "-i", one], fragments=("best.pt",)),
        # translate: inputs and numbers
        C("translate-missing-input", "translate", ["translate", "--checkpoint", ck, "-i", "{case}/nope.txt"], fragments=("nope.txt",)),
        C("translate-non-utf8-input", "translate", ["translate", "--checkpoint", ck, "-i", latin1], fragments=("latin1.txt", "UTF-8")),
        C("translate-binary-input", "translate", ["translate", "--checkpoint", ck, "-i", binary], fragments=("binary.bin",)),
        C("translate-non-utf8-stdin", "translate", ["translate", "--checkpoint", ck], stdin="caf\xe9\n".encode("latin-1"), fragments=("<stdin>:1",), in_process=False),
        C("translate-input-directory", "translate", ["translate", "--checkpoint", ck, "-i", str(env.run)], fragments=(str(env.run),)),
        C("translate-beam-zero", "translate", ["translate", "--checkpoint", ck, "-i", one, "--beam", "0"], fragments=("beam",)),
        C("translate-beam-negative", "translate", ["translate", "--checkpoint", ck, "-i", one, "--beam", "-3"], fragments=("beam",)),
        C("translate-beam-huge", "translate", ["translate", "--checkpoint", ck, "-i", one, "--beam", "1000000000"], fragments=("beam",), timeout=60),
        C("translate-beam-not-number", "translate", ["translate", "--checkpoint", ck, "-i", one, "--beam", "five"], fragments=("--beam",)),
        C("translate-nbest-zero", "translate", ["translate", "--checkpoint", ck, "-i", one, "--nbest", "0"], fragments=("--nbest",)),
        C("translate-nbest-above-beam", "translate", ["translate", "--checkpoint", ck, "-i", one, "--nbest", "10"], fragments=("--nbest",)),
        C("translate-batch-size-zero", "translate", ["translate", "--checkpoint", ck, "-i", one, "--batch-size", "0"], fragments=("batch_size",)),
        C("translate-threads-negative", "translate", ["translate", "--checkpoint", ck, "-i", one, "--threads", "-3"], fragments=("--threads",)),
        C("translate-decode-override-type", "translate", ["translate", "--checkpoint", ck, "-i", one, "--decode.beam_size=wide"], fragments=("decode.beam_size",)),
        C("translate-decode-override-unknown", "translate", ["translate", "--checkpoint", ck, "-i", one, "--decode.bogus=1"], fragments=("bogus",)),
        C("translate-docs-short", "translate", ["translate", "--checkpoint", ck, "-i", three, "--docs", str(b["docs_short"])], fragments=("short.docs",)),
        C("translate-conllu-unused", "translate", ["translate", "--checkpoint", ck, "-i", one, "--src-conllu", str(b["conllu_bad"])], expect=0, check=_stdout_lines(1)),  # documented: read only by models with parses
        C("translate-markup-unclosed", "translate", ["translate", "--checkpoint", ck, "-i", "{case}/in.txt", "--markup"],
          setup=lambda c, e: write(c / "in.txt", "a <b>red house .\n") and None, fragments=("in.txt:1",)),
        C("translate-alignments-ct2", "translate", ["translate", "--engine", "ctranslate2", "--checkpoint", ck, "-i", one, "--alignments", "{case}/a.txt"], fragments=("--alignments",)),
        C("translate-align-layer-alone", "translate", ["translate", "--checkpoint", ck, "-i", one, "--align-layer", "0"], fragments=("--align-layer",)),
        # translate: outputs
        C("translate-output-directory", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "{case}/out.txt"], setup=_dir_named_out, protect=("out.txt",), fragments=("out.txt",)),
        C("translate-output-under-file", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "{case}/out/x.txt"], setup=_file_named_out, protect=("out",), fragments=("out",)),
        C("translate-output-dev-full", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "/dev/full"], check=_dev_full_kept, fragments=("/dev/full",)),
        C("translate-output-proc", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "/proc/version"], fragments=("/proc/version",)),
        C("translate-output-fifo", "translate", ["translate", "--checkpoint", ck, "-i", src, "-o", "{case}/fifo"], setup=_fifo, expect=0, check=_fifo_has_lines, reader="fifo", in_process=False),
        C("translate-output-missing-folder", "translate", ["translate", "--checkpoint", ck, "-i", one, "-o", "{case}/no/such/folder/x.txt"], expect=0, check=_file_made("no/such/folder/x.txt")),  # documented: folders are made
        # score
        C("score-missing-contrastive", "score", ["score", "--checkpoint", ck, "--contrastive", "{case}/nope.json"], fragments=("nope.json",)),
        C("score-not-json", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrastive_notjson"])], fragments=("contrastive.txt.json",)),
        C("score-list-of-ints", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrastive_ints"])], fragments=("ints.json",)),
        C("score-empty-list", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrastive_empty"])], fragments=("empty.json",)),
        C("score-index-out-of-range", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrastive_index"])], fragments=("index.json", "correct")),
        C("score-wrong-types", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrastive_types"])], fragments=("types.json",)),
        C("score-contrapro-short-context", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrapro"]), "--context-src", empty, "--context-tgt", empty], fragments=("empty.txt",)),
        C("score-crafted-pickle", "score", ["score", "--checkpoint", evil, "--contrastive", "{case}/ok.json", "--context", "none"],
          setup=lambda c, e: write(c / "ok.json", json.dumps({"items": [{"src": "a red house .", "candidates": ["aru ie .", "ie ."], "correct": 0}]})) and None, fragments=("evil.pt",)),
        C("score-batch-size-zero", "score", ["score", "--checkpoint", ck, "--contrastive", "{case}/ok.json", "--batch-size", "0"],
          setup=lambda c, e: write(c / "ok.json", json.dumps({"items": [{"src": "a red house .", "candidates": ["aru ie .", "ie ."], "correct": 0}]})) and None, fragments=("--batch-size",)),
        # evaluate
        C("evaluate-missing-hyp", "evaluate", ["evaluate", "--hyp", "{case}/nope.txt", "--ref", one], fragments=("nope.txt",)),
        C("evaluate-line-mismatch", "evaluate", ["evaluate", "--hyp", three, "--ref", one], fragments=("three.txt", "one.txt")),
        C("evaluate-empty", "evaluate", ["evaluate", "--hyp", empty, "--ref", empty], fragments=("empty.txt",)),
        C("evaluate-non-utf8", "evaluate", ["evaluate", "--hyp", latin1, "--ref", latin1], fragments=("latin1.txt",)),
        C("evaluate-bootstrap-zero", "evaluate", ["evaluate", "--hyp", one, "--ref", one, "--compare", one, "--bootstrap", "0"], fragments=("bootstrap",)),
        C("evaluate-bootstrap-negative", "evaluate", ["evaluate", "--hyp", one, "--ref", one, "--compare", one, "--bootstrap", "-10"], fragments=("bootstrap",)),
        C("evaluate-compare-mismatch", "evaluate", ["evaluate", "--hyp", one, "--ref", one, "--compare", three], fragments=("three.txt",)),
        # lexicon
        C("lexicon-top-zero", "lexicon", ["lexicon", cfg, "-o", "{case}/lex.tsv", "--top", "0", "--align", gold], fragments=("--top",)),
        C("lexicon-min-count-zero", "lexicon", ["lexicon", cfg, "-o", "{case}/lex.tsv", "--min-count", "0", "--align", gold], fragments=("--min-count",)),
        C("lexicon-align-missing", "lexicon", ["lexicon", cfg, "-o", "{case}/lex.tsv", "--align", "{case}/nope.align"], fragments=("nope.align",)),
        C("lexicon-align-malformed", "lexicon", ["lexicon", cfg, "-o", "{case}/lex.tsv", "--align", str(b["pharaoh_bad"])], fragments=("bad.align",)),
        # average-checkpoints
        C("average-crafted-pickle", "average-checkpoints", ["average-checkpoints", "--inputs", evil, ck, "-o", "{case}/avg.pt"], fragments=("evil.pt",)),
        C("average-bare-state-dict", "average-checkpoints", ["average-checkpoints", "--inputs", str(b["state_dict"]), ck, "-o", "{case}/avg.pt"], fragments=("state_dict.pt",)),
        C("average-other-architecture", "average-checkpoints", ["average-checkpoints", "--inputs", str(b["other_arch"]), ck, "-o", "{case}/avg.pt"], fragments=("other-arch.pt",)),
        C("average-last-zero", "average-checkpoints", ["average-checkpoints", cfg, "--last", "0"], fragments=("--last",)),
        C("average-nothing", "average-checkpoints", ["average-checkpoints"], fragments=("CONFIG",)),
        C("average-no-periodic", "average-checkpoints", ["average-checkpoints", cfg, "--work_dir={case}/run"], setup=_copy_run("run"), fragments=("checkpoints",)),
        C("average-missing-input", "average-checkpoints", ["average-checkpoints", "--inputs", "{case}/nope.pt", ck, "-o", "{case}/avg.pt"], fragments=("nope.pt",)),
        C("average-output-directory", "average-checkpoints", ["average-checkpoints", "--inputs", ck, ck, "-o", "{case}/out.txt"], setup=_dir_named_out, protect=("out.txt",), fragments=("out.txt",)),
        # export-ct2
        C("export-force-cwd", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", ".", "--force"], setup=_user_files, protect=(".",), fragments=("current",)),
        C("export-force-parent", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "..", "--force"], setup=_user_files, protect=("..",), fragments=("..",)),
        C("export-force-checkpoint-folder", "export-ct2", ["export-ct2", "--checkpoint", "{case}/D/best.pt", "-o", "{case}/D", "--force"], setup=_checkpoint_inside, protect=("D",), fragments=("D",)),
        C("export-force-unmarked", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/out", "--force"], setup=_unmarked, protect=("out",), fragments=("out",)),
        C("export-force-symlink", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/link", "--force"], setup=_symlink, protect=("real", "link"), fragments=("link",)),
        C("export-existing-no-force", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/out"], setup=_unmarked, protect=("out",), fragments=("out",)),
        C("export-output-is-file", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/out", "--force"], setup=_file_named_out, protect=("out",), fragments=("out",)),
        C("export-crafted-pickle", "export-ct2", ["export-ct2", "--checkpoint", evil, "-o", "{case}/ct2"], fragments=("evil.pt",)),
        C("export-bad-quantization", "export-ct2", ["export-ct2", "--checkpoint", ck, "-o", "{case}/ct2", "--quantization", "int3"], fragments=("--quantization",)),
        # align-external
        C("align-external-missing-config", "align-external", ["align-external", "{case}/nope.yaml"], fragments=("nope.yaml",)),
        C("align-external-bad-symmetrize", "align-external", ["align-external", cfg, "-o", "{case}/x.align", "--symmetrize", "sideways"], fragments=("sideways",)),
        C("align-external-duplicate", "align-external", ["align-external", str(b["duplicate"])], fragments=("duplicate key",)),
        # align
        C("align-missing-src", "align", ["align", "--checkpoint", ck, "--src", "{case}/nope.txt", "--tgt", tgt], fragments=("nope.txt",)),
        C("align-line-mismatch", "align", ["align", "--checkpoint", ck, "--src", three, "--tgt", one], fragments=("three.txt",)),
        C("align-layer-out-of-range", "align", ["align", "--checkpoint", ck, "--src", one, "--tgt", one, "--layer", "99"], fragments=("99",)),
        C("align-head-not-number", "align", ["align", "--checkpoint", ck, "--src", one, "--tgt", one, "--head", "abc"], fragments=("abc",)),
        C("align-threshold-negative", "align", ["align", "--checkpoint", ck, "--src", one, "--tgt", one, "--method", "threshold", "--threshold", "-1"], fragments=("--threshold",)),
        C("align-batch-size-zero", "align", ["align", "--checkpoint", ck, "--src", one, "--tgt", one, "--batch-size", "0"], fragments=("--batch-size",)),
        C("align-bad-symmetrize", "align", ["align", "--checkpoint", ck, "--reverse-checkpoint", ck, "--src", one, "--tgt", one, "--symmetrize", "sideways"], fragments=("sideways",)),
        C("align-crafted-pickle", "align", ["align", "--checkpoint", evil, "--src", one, "--tgt", one], fragments=("evil.pt",)),
        C("align-non-utf8", "align", ["align", "--checkpoint", ck, "--src", latin1, "--tgt", latin1], fragments=("latin1.txt",)),
        # align-sweep
        C("sweep-gold-malformed", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_bad"])], fragments=("bad.align",)),
        C("sweep-gold-line-mismatch", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_two"])], fragments=("two.align",)),
        C("sweep-gold-out-of-range", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_far"])], fragments=("far.align",)),
        C("sweep-one-indexed-zero", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_ok"]), "--one-indexed-gold"], fragments=("ok.align",)),
        C("sweep-output-directory", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_ok"]), "-o", "{case}/out.txt"], setup=_dir_named_out, protect=("out.txt",), fragments=("out.txt",)),
        # aer
        C("aer-empty-files", "aer", ["aer", "--gold", empty, "--hyp", empty], fragments=("empty.txt",)),
        C("aer-malformed-link", "aer", ["aer", "--gold", str(b["pharaoh_bad"]), "--hyp", str(b["pharaoh_ok"])], fragments=("bad.align",)),
        C("aer-three-part-link", "aer", ["aer", "--gold", str(b["pharaoh_triple"]), "--hyp", str(b["pharaoh_ok"])], fragments=("triple.align",)),
        C("aer-negative-index", "aer", ["aer", "--gold", str(b["pharaoh_negative"]), "--hyp", str(b["pharaoh_ok"])], fragments=("negative.align",)),
        C("aer-line-mismatch", "aer", ["aer", "--gold", str(b["pharaoh_two"]), "--hyp", str(b["pharaoh_ok"])], fragments=("two.align",)),
        C("aer-non-utf8", "aer", ["aer", "--gold", latin1, "--hyp", str(b["pharaoh_ok"])], fragments=("latin1.txt",)),
        C("aer-binary", "aer", ["aer", "--gold", binary, "--hyp", binary], fragments=("binary.bin",)),
        C("aer-src-without-tgt", "aer", ["aer", "--gold", str(b["pharaoh_ok"]), "--hyp", str(b["pharaoh_ok"]), "--src", one], fragments=("--tgt",)),
        C("aer-bitext-malformed", "aer", ["aer", "--gold", str(b["pharaoh_ok"]), "--hyp", str(b["pharaoh_ok"]), "--bitext", str(b["bitext_bad"])], fragments=("bitext.txt",)),
        C("aer-link-outside-sentence", "aer", ["aer", "--gold", str(b["pharaoh_far"]), "--hyp", str(b["pharaoh_ok"]), "--src", one, "--tgt", one], fragments=("far.align",)),
        C("aer-one-indexed-zero", "aer", ["aer", "--gold", str(b["pharaoh_ok"]), "--hyp", str(b["pharaoh_ok"]), "--one-indexed-gold"], fragments=("ok.align",)),
        # attention
        C("attention-missing-input", "attention", ["attention", "--checkpoint", ck, "-i", "{case}/nope.txt", "-o", "{case}/att"], fragments=("nope.txt",)),
        C("attention-bad-sentences", "attention", ["attention", "--checkpoint", ck, "-i", three, "-o", "{case}/att", "--sentences", "b-a"], fragments=("--sentences",)),
        C("attention-sentence-out-of-range", "attention", ["attention", "--checkpoint", ck, "-i", three, "-o", "{case}/att", "--sentences", "999"], fragments=("999",)),
        C("attention-beam-zero", "attention", ["attention", "--checkpoint", ck, "-i", one, "-o", "{case}/att", "--beam", "0"], fragments=("--beam",)),
        C("attention-ref-mismatch", "attention", ["attention", "--checkpoint", ck, "-i", three, "--ref", one, "-o", "{case}/att"], fragments=("one.txt",)),
        C("attention-crafted-pickle", "attention", ["attention", "--checkpoint", evil, "-i", one, "-o", "{case}/att"], fragments=("evil.pt",)),
        C("attention-output-missing-folder", "attention", ["attention", "--checkpoint", ck, "-i", one, "-o", "{case}/no/such/att"], expect=0, check=_file_made("no/such/att.npz")),  # documented: folders are made
        C("attention-conllu-cycle", "attention", ["attention", "--checkpoint", ck, "-i", "{case}/in.txt", "--src-conllu", str(b["conllu_cycle"]), "-o", "{case}/att"],
          setup=lambda c, e: write(c / "in.txt", "a red house\n") and None, fragments=("cycle.conllu",)),
        # plot
        C("plot-truncated-npz", "plot", ["plot", "-a", str(b["att_cut"]).removesuffix(".npz"), "-o", "{case}/x.png"], fragments=("att-cut.npz",)),
        C("plot-npz-not-zip", "plot", ["plot", "-a", str(b["att_text"]).removesuffix(".npz"), "-o", "{case}/x.png"], fragments=("att-text.npz",)),
        C("plot-missing-export", "plot", ["plot", "-a", "{case}/nope", "-o", "{case}/x.png"], fragments=("nope",)),
        C("plot-head-not-number", "plot", ["plot", "-a", str(env.bad["att"]), "-o", "{case}/x.png", "--head", "abc"], fragments=("--head",)),
        C("plot-layer-out-of-range", "plot", ["plot", "-a", str(env.bad["att"]), "-o", "{case}/x.png", "--layer", "99"], fragments=("99",)),
        C("plot-bad-extension", "plot", ["plot", "-a", str(env.bad["att"]), "-o", "{case}/x.xyz"], fragments=("x.xyz",)),
        C("plot-neither-source", "plot", ["plot", "-o", "{case}/x.png"], fragments=("--checkpoint",)),
        C("plot-align-malformed", "plot", ["plot", "-a", str(env.bad["att"]), "-o", "{case}/x.png", "--align", str(b["pharaoh_bad"])], fragments=("bad.align",)),
        C("plot-crafted-pickle", "plot", ["plot", "--checkpoint", evil, "-i", one, "-o", "{case}/x.png"], fragments=("evil.pt",)),
        # analyze-heads
        C("heads-crafted-pickle", "analyze-heads", ["analyze-heads", "--checkpoint", evil, "-i", one, "--src-conllu", str(cor["test"]["conllu"]), "-o", "{case}/h"], fragments=("evil.pt",)),
        C("heads-missing-input", "analyze-heads", ["analyze-heads", "--checkpoint", ck, "-i", "{case}/nope.txt", "-o", "{case}/h"], fragments=("nope.txt",)),
        C("heads-conllu-malformed", "analyze-heads", ["analyze-heads", "--checkpoint", ck, "-i", one, "--src-conllu", str(b["conllu_bad"]), "-o", "{case}/h"], fragments=("bad.conllu",)),
        C("heads-gold-without-ref", "analyze-heads", ["analyze-heads", "--checkpoint", ck, "-i", src, "--src-conllu", str(cor["test"]["conllu"]), "--gold-align", gold, "-o", "{case}/h"], fragments=("--ref",)),
        C("heads-bad-sentences", "analyze-heads", ["analyze-heads", "--checkpoint", ck, "-i", src, "--src-conllu", str(cor["test"]["conllu"]), "--sentences", "x", "-o", "{case}/h"], fragments=("--sentences",)),
        # serve (refused before it listens)
        C("serve-threads-negative", "serve", ["serve", "--checkpoint", ck, "--threads", "-3"], fragments=("--threads",)),
        C("serve-port-negative", "serve", ["serve", "--checkpoint", ck, "--port", "-1"], fragments=("--port",)),
        C("serve-port-huge", "serve", ["serve", "--checkpoint", ck, "--port", "70000"], fragments=("--port",)),
        C("serve-max-work-zero", "serve", ["serve", "--checkpoint", ck, "--max-work", "0", "--parser", "none"], fragments=("--max-work",)),
        C("serve-timeout-nan", "serve", ["serve", "--checkpoint", ck, "--timeout", "nan", "--parser", "none"], fragments=("--timeout",)),
        C("serve-crafted-pickle", "serve", ["serve", "--checkpoint", evil, "--parser", "none"], fragments=("evil.pt",)),
        C("serve-nan-weights", "serve", ["serve", "--checkpoint", str(b["nan"]), "--parser", "none"], fragments=("nan.pt",)),
        # issue 51: unknown options, silent context-free scores, config paths and keys that cannot work
        C("unknown-option-with-value", "prepare", ["prepare", "--bogus", "1"], fragments=("unknown option --bogus",)),
        C("sweep-unknown-option", "align-sweep", ["align-sweep", "--checkpoint", ck, "--src", one, "--tgt", one, "--gold", str(b["pharaoh_ok"]), "--frobnicate", "1"], fragments=("unknown option --frobnicate",)),
        C("evaluate-threads", "evaluate", ["evaluate", "--hyp", one, "--ref", one, "--threads", "1"], fragments=("unknown option --threads",)),
        C("score-threads-negative", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrapro"]), "--threads", "-3"], fragments=("--threads",)),
        C("score-contrapro-without-context", "score", ["score", "--checkpoint", ck, "--contrastive", str(b["contrapro"])], fragments=("contrapro.json", "--context-src", "--context none")),
        C("config-data-path-beside-config", "prepare", ["prepare", "{case}/exp/c.yaml"], setup=_data_beside_config, fragments=("c.yaml", "data.train_src", "working directory")),
        C("rnn-dot-sizes", "prepare", ["prepare", cfg, "--model.arch=rnn", "--model.rnn.score=dot", *LOCAL], fragments=("model.rnn.score dot", "2 x hidden")),
        C("context-two-to-two-separate-vocab", "prepare", ["prepare", cfg, "--model.context.kind=concat", "--model.context.side=both", "--data.joint_vocab=false",
                                                            f"--data.train_docs={b['docs_short']}", f"--data.dev_docs={b['docs_short']}", *LOCAL], fragments=("data.joint_vocab",)),
        *ownership_cases(env),
        *terminology_cases(env),
    ]
    out += input_hygiene_cases(env)
    unknown = EXTENDED - {c.name for c in out}
    assert not unknown, unknown
    for c in out:
        c.extended = c.name in EXTENDED
    names = Counter(c.name for c in out)
    assert all(n == 1 for n in names.values()), [k for k, n in names.items() if n > 1]
    return out


# ------------------------------------------------------------------ running and judging


def tree_state(path: Path) -> dict[str, str]:
    """Every entry under ``path`` (itself included): its kind and, for a file, its SHA-256."""
    state: dict[str, str] = {}
    if not path.exists() and not path.is_symlink():
        return {".": "missing"}
    entries = [path] + (sorted(path.rglob("*")) if path.is_dir() and not path.is_symlink() else [])
    for p in entries:
        rel = "." if p == path else str(p.relative_to(path))
        mode = p.lstat().st_mode
        if stat.S_ISLNK(mode):
            state[rel] = "link:" + os.readlink(p)
        elif stat.S_ISDIR(mode):
            state[rel] = "dir"
        elif stat.S_ISREG(mode):  # content and permissions: a protected file is unchanged in both
            state[rel] = f"file:{stat.S_IMODE(mode):o}:" + hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            state[rel] = f"special:{stat.S_IFMT(mode)}"
    return state


def tree_diff(before: dict[str, str], after: dict[str, str]) -> str | None:
    if before == after:
        return None
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = [f"{what}: {', '.join(keys[:4])}" for what, keys in (("deleted", gone), ("created", new), ("changed", changed)) if keys]
    return "; ".join(parts)


def shown_lines(err: str) -> list[str]:
    """The non-empty lines of ``err`` as a terminal shows them: a progress bar erased with ``\\r``
    (``translate -o`` shows one) leaves only what follows its last ``\\r``."""
    return [shown for line in err.split("\n") if (shown := line.rsplit("\r", 1)[-1].strip())]


def judge(case: Case, code: int | None, out: str, err: str, problems: list[str]) -> list[str]:
    """The reasons ``case`` fails (empty: it passes)."""
    reasons = list(problems)
    if code is None:
        return reasons + [f"no exit within {case.timeout:g} s"]
    if code != case.expect:
        reasons.append(f"exit status {code}, expected {case.expect}")
    if "Traceback" in err:
        reasons.append("a traceback on stderr")
    if case.expect == 2:
        lines = shown_lines(err)
        if len(lines) != 1 or not lines[0].startswith("syntaxnmt: error: "):
            reasons.append(f"stderr is {len(lines)} lines, not one 'syntaxnmt: error:' line")
        else:
            missing = [f for f in case.fragments if f not in lines[0]]
            if missing:
                reasons.append(f"the error line lacks {missing}")
    return reasons


def _protected(case: Case, folder: Path, env: Env) -> dict[str, Path]:
    paths = {"<shared files>": env.assets}
    for p in case.protect:
        paths[p] = (folder / p).resolve() if not (folder / p).is_symlink() else folder / p
    return paths


def prepare_case(case: Case, env: Env) -> tuple[Path, list[str], dict[str, dict[str, str]]]:
    """The case's folder (made fresh, set up), its argv and the state of what it must not change."""
    folder = env.root / "cases" / case.name
    folder.mkdir(parents=True)
    if case.setup:
        case.setup(folder, env)
    argv = [a.replace("{case}", str(folder)) for a in case.argv]
    before = {k: tree_state(p) for k, p in _protected(case, folder, env).items()}
    return folder, argv, before


def after_case(case: Case, env: Env, folder: Path, before: dict[str, dict[str, str]], out: str, err: str) -> list[str]:
    """What the case changed that it must not have: the marker, protected trees, its own check."""
    problems = []
    if env.marker.exists():
        problems.append("the crafted pickle ran: the marker file appeared")
        env.marker.unlink()
    for key, path in _protected(case, folder, env).items():
        diff = tree_diff(before[key], tree_state(path))
        if diff:
            problems.append(f"{key} changed ({diff})")
    if case.check:
        problem = case.check(folder, out, err)
        if problem:
            problems.append(problem)
    return problems


def subprocess_env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _drain_fifo(path: Path, sink: Path) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as f, open(sink, "wb") as g:
            shutil.copyfileobj(f, g)
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


class ForkServer:
    """A process that has imported ``syntaxnmt`` (as ``python -m syntaxnmt`` does, OpenMP defaults
    first) and forks one child per case: the child is a process of its own -- working folder,
    stdin, stdout and stderr files, exit status, signals -- that runs ``syntaxnmt.cli.main``
    without paying Python's start and torch's import again (about 3 s of CPU per command, 30 s of
    wall time on a loaded 2-core machine). ``--spawn`` runs ``python -m syntaxnmt`` instead."""

    def __init__(self) -> None:
        from syntaxnmt.__main__ import openmp_defaults

        env = subprocess_env()
        env.update(openmp_defaults(env))  # what ``python -m syntaxnmt`` sets before torch loads (this script imports torch first)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--fork-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the fork server did not start")

    def run(self, argv: list[str], cwd: Path, stdin: Path, stdout: Path, stderr: Path, timeout: float) -> int | None:
        request = {"argv": argv, "cwd": str(cwd), "stdin": str(stdin), "stdout": str(stdout), "stderr": str(stderr), "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["exit"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def fork_server() -> None:
    """The loop of :class:`ForkServer` (``--fork-server``): one JSON request per line on stdin,
    ``{"exit": status or null (timed out, killed)}`` per line on stdout."""
    import io
    import traceback

    import syntaxnmt.__main__ as entry  # sets the OpenMP defaults, then imports the CLI (and torch)

    requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    replies.write("ready\n")
    replies.flush()
    for line in requests:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: the case's folder and files, then the command
            code = 1
            try:
                os.chdir(req["cwd"])
                for fd, path, flags in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                    opened = os.open(path, flags, 0o644)
                    os.dup2(opened, fd)
                    os.close(opened)
                sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
                sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
                sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True)
                sys.argv = ["syntaxnmt", *req["argv"]]
                try:
                    entry.main(req["argv"])
                    code = 0
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                except BaseException:  # as Python prints an uncaught exception
                    traceback.print_exc()
                    code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline = time.monotonic() + req["timeout"]
        status = None
        while True:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.02)
        replies.write(json.dumps({"exit": status if status is None or status >= 0 else 128 - status}) + "\n")
        replies.flush()


def run_case(case: Case, env: Env, server: ForkServer | None = None) -> dict:
    """Run ``case`` in a process of its own: forked by ``server``, or ``python -m syntaxnmt ...``;
    returns its record (``passed``, ``reasons``, ...)."""
    folder, argv, before = prepare_case(case, env)
    reader = _drain_fifo(folder / case.reader, folder / (case.reader + ".read")) if case.reader else None
    start = time.monotonic()
    if server:
        io_dir = env.root / "io"
        io_dir.mkdir(exist_ok=True)
        files = [io_dir / f"{case.name}.{k}" for k in ("stdin", "stdout", "stderr")]
        files[0].write_bytes(case.stdin or b"")
        code = server.run(argv, folder, *files, timeout=case.timeout)
        out, err = (f.read_bytes().decode("utf-8", "replace") for f in files[1:])
    else:
        cmd = [sys.executable, "-m", "syntaxnmt", *argv]
        try:
            p = subprocess.run(cmd, cwd=folder, input=case.stdin if case.stdin is not None else b"", capture_output=True, timeout=case.timeout, env=subprocess_env())
            code, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            code, out, err = None, (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
    seconds = time.monotonic() - start
    if reader:
        reader.join(5)
    problems = after_case(case, env, folder, before, out, err)
    reasons = judge(case, code, out, err, problems)
    return {"name": case.name, "command": case.command, "argv": ["syntaxnmt", *argv], "cwd": str(folder), "expect": case.expect, "exit": code,
            "stderr": err[-4000:], "seconds": round(seconds, 2), "passed": not reasons, "reasons": reasons}


def run_case_in_process(case: Case, env: Env) -> dict:
    """Run ``case`` through ``syntaxnmt.cli.main`` in this process (a fast check of the table,
    used by its test; the audit proper runs subprocesses). Not for cases with stdin or a reader."""
    import contextlib
    import io

    from syntaxnmt.cli import main as cli_main

    if not case.in_process:
        raise ValueError(f"{case.name} runs only as a subprocess")
    folder, argv, before = prepare_case(case, env)
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    start = time.monotonic()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli_main(argv)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # what a subprocess would print as a traceback
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        os.chdir(old)
    problems = after_case(case, env, folder, before, out.getvalue(), err.getvalue())
    reasons = judge(case, code, out.getvalue(), err.getvalue(), problems)
    return {"name": case.name, "command": case.command, "argv": ["syntaxnmt", *argv], "cwd": str(folder), "expect": case.expect, "exit": code,
            "stderr": err.getvalue()[-4000:], "seconds": round(time.monotonic() - start, 2), "passed": not reasons, "reasons": reasons}


# ------------------------------------------------------------------ HTTP


@dataclass
class HttpCase:
    name: str
    method: str
    path: str
    expect: tuple[int, ...]
    body: bytes | None = None
    content_type: str = "application/json"
    raw: bytes | None = None  # sent as it is instead of a request made of the fields above
    host: str = "127.0.0.1"
    json_error: bool = True  # the answer must hold a JSON "error" (unless 404 / 405)


def http_cases() -> list[HttpCase]:
    """Bad requests to ``syntaxnmt serve`` (the default limits: 64 sentences of 1000 characters, beam 16)."""
    H = HttpCase
    j = lambda x: json.dumps(x).encode()  # noqa: E731
    return [
        H("malformed-json", "POST", "/translate", (400,), b'{"sentences": ["a red house"'),
        H("empty-body", "POST", "/translate", (400, 422), b""),
        H("not-json-content-type", "POST", "/translate", (415, 400, 422), b"sentences=a", "application/x-www-form-urlencoded"),
        H("top-level-list", "POST", "/translate", (422,), j(["a red house ."])),
        H("top-level-null", "POST", "/translate", (422,), b"null"),
        H("sentences-string", "POST", "/translate", (422,), j({"sentences": "a red house ."})),
        H("sentences-ints", "POST", "/translate", (422,), j({"sentences": [1, 2]})),
        H("sentences-empty", "POST", "/translate", (422,), j({"sentences": []})),
        H("sentences-missing", "POST", "/translate", (422,), j({"beam": 2})),
        H("beam-string", "POST", "/translate", (422,), j({"sentences": ["a ."], "beam": "5"})),
        H("beam-zero", "POST", "/translate", (422,), j({"sentences": ["a ."], "beam": 0})),
        H("beam-negative", "POST", "/translate", (422,), j({"sentences": ["a ."], "beam": -4})),
        H("beam-huge", "POST", "/translate", (422,), j({"sentences": ["a ."], "beam": 10**12})),
        H("beam-float", "POST", "/translate", (422,), j({"sentences": ["a ."], "beam": 2.5})),
        H("beam-infinite", "POST", "/translate", (400, 422), b'{"sentences": ["a ."], "beam": 1e400}'),
        H("beam-nan-literal", "POST", "/translate", (400, 422), b'{"sentences": ["a ."], "beam": NaN}'),
        H("attention-string", "POST", "/translate", (422,), j({"sentences": ["a ."], "attention": "yes"})),
        H("unknown-field", "POST", "/translate", (422,), j({"sentences": ["a ."], "model": "../../etc/passwd"})),
        H("lone-surrogate", "POST", "/translate", (422, 400), b'{"sentences": ["a \\ud800 ."]}'),
        H("too-many-sentences", "POST", "/translate", (413,), j({"sentences": ["a ."] * 65})),
        H("sentence-too-long", "POST", "/translate", (413,), j({"sentences": ["a" * 1001]})),
        H("attention-too-many", "POST", "/translate", (413,), j({"sentences": ["a ."] * 9, "attention": True})),
        H("over-work-budget", "POST", "/translate", (413,), j({"sentences": [" ".join(["a"] * 500)] * 64, "beam": 16})),
        H("body-10-MB", "POST", "/translate", (413,), j({"sentences": ["a " * 5_000_000]})),
        H("deeply-nested", "POST", "/translate", (400, 413, 422), b"[" * 100_000 + b"]" * 100_000),
        H("get-translate", "GET", "/translate", (405,)),
        H("put-translate", "PUT", "/translate", (405,), j({"sentences": ["a ."]})),
        H("traversal-dotdot", "GET", "/static/../../../../etc/passwd", (404,)),
        H("traversal-encoded", "GET", "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd", (404,)),
        H("traversal-encoded-slash", "GET", "/static/..%2f..%2fserver.py", (404,)),
        H("traversal-source", "GET", "/static/../server.py", (404,)),
        H("unknown-path", "GET", "/admin", (404,)),
        # issue 49: a bounded server (run_http serves with --allowed-hosts 127.0.0.1,localhost --read-timeout 2)
        H("docs-off", "GET", "/docs", (404,)),
        H("redoc-off", "GET", "/redoc", (404,)),
        H("openapi-off", "GET", "/openapi.json", (404,)),
        H("host-not-allowed", "GET", "/health", (400,), host="evil.example"),
        H("slow-body", "POST", "/translate", (408,), raw=b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"sentences\""),
        H("slow-headers", "POST", "/translate", (0,), raw=b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty", json_error=False),
        H("content-length-and-chunked", "POST", "/translate", (400,), raw=b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 21\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sen\r\n"),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raw_request(port: int, case: HttpCase, timeout: float = 60) -> tuple[int, bytes]:
    """Send the request as bytes (paths are not normalized, as an attacker's client would not)."""
    head = f"{case.method} {case.path} HTTP/1.1\r\nHost: {case.host}\r\nConnection: close\r\n"
    if case.body is not None:
        head += f"Content-Type: {case.content_type}\r\nContent-Length: {len(case.body)}\r\n"
    data = case.raw if case.raw is not None else head.encode() + b"\r\n" + (case.body or b"")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a server may answer 413 and close before reading all of a large body
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    reply = b"".join(chunks)
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, reply.split(b"\r\n\r\n", 1)[-1]


def run_http(env: Env, progress: Callable[[dict], None]) -> list[dict]:
    """Start ``syntaxnmt serve`` on a free port, send every HTTP case, then check it is still up,
    has printed no traceback, and that the first SIGTERM ends it with 143."""
    port = _free_port()
    err_path = env.root / "serve.stderr"
    cmd = [sys.executable, "-m", "syntaxnmt", "serve", "--checkpoint", str(env.ckpt), "--port", str(port), "--parser", "none", "--threads", "1", "--device", "cpu",
           "--allowed-hosts", "127.0.0.1,localhost", "--read-timeout", "2"]
    records: list[dict] = []
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env=subprocess_env(), cwd=env.root)
        try:
            up = _wait_up(port, proc)
            for case in http_cases():
                start = time.monotonic()
                try:
                    status, body = _raw_request(port, case)
                except OSError as e:
                    status, body = 0, str(e).encode()
                reasons = []
                if status not in case.expect:
                    reasons.append(f"HTTP {status}, expected {'/'.join(map(str, case.expect))}")
                if case.json_error and status not in (404, 405) and b'"error"' not in body:
                    reasons.append("no JSON error in the answer")
                if env.marker.exists():
                    reasons.append("the marker file appeared")
                records.append({"name": "http-" + case.name, "command": "serve (HTTP)", "argv": [case.method, case.path, f"<{len(case.body or b'')} bytes>"],
                                "expect": "/".join(map(str, case.expect)), "exit": status, "stderr": body[:300].decode("utf-8", "replace"),
                                "seconds": round(time.monotonic() - start, 2), "passed": not reasons, "reasons": reasons})
                progress(records[-1])
            alive = up and _health(port)
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = err_path.read_text(encoding="utf-8", errors="replace")
    reasons = [] if alive else ["the server did not answer /health after the bad requests"]
    if code != 143:
        reasons.append(f"SIGTERM: exit status {code}, expected 143")
    if "Traceback" in err:
        reasons.append("a traceback in the server's stderr")
    records.append({"name": "http-server-after", "command": "serve (HTTP)", "argv": ["syntaxnmt", *cmd[3:]], "expect": 143, "exit": code,
                    "stderr": err[-4000:], "seconds": 0.0, "passed": not reasons, "reasons": reasons})
    progress(records[-1])
    return records


def _health(port: int) -> bool:
    try:
        return _raw_request(port, HttpCase("health", "GET", "/health", (200,)), timeout=10)[0] == 200
    except OSError:
        return False


def _wait_up(port: int, proc: subprocess.Popen, timeout: float = 180) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _health(port):
            return True
        time.sleep(0.3)
    return False


# ------------------------------------------------------------------ report


def summary(records: list[dict]) -> str:
    by_command = Counter(r["command"] for r in records)
    failed = [r for r in records if not r["passed"]]
    lines = ["", "cases by command:"]
    lines += [f"  {cmd:<20} {n:>4}  ({sum(not r['passed'] for r in records if r['command'] == cmd)} failed)" for cmd, n in sorted(by_command.items())]
    lines.append(f"{len(records)} cases: {len(records) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        lines.append(f"  FAILED {r['name']}: {'; '.join(r['reasons'])}")
        lines.append(f"    {shlex.join(map(str, r['argv']))}")
        lines.append(f"    stderr: {r['stderr'].strip()[-600:]}")
    return "\n".join(lines)


def row(r: dict) -> str:
    first = (r["stderr"].strip().splitlines() or [""])[-1]
    why = "" if r["passed"] else f"  [{'; '.join(r['reasons'])}]"
    return f"{'ok ' if r['passed'] else 'FAIL'} {r['name']:<36} {str(r['exit']):>4} {r['seconds']:6.1f}s  {first[:110]}{why}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write every case's record and the machine as JSON")
    p.add_argument("--only", help="comma-separated case names (http: the HTTP cases)")
    p.add_argument("--spawn", action="store_true", help="run every case as `python -m syntaxnmt ...` (Python and torch start again per case: "
                   "about 3 s of CPU each) instead of forking it from a process that has imported syntaxnmt")
    p.add_argument("--fork-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--all", action="store_true", help=f"also the {len(EXTENDED)} extended cases (variants of the default ones)")
    p.add_argument("--keep", help="set up in this folder (kept) instead of a temporary one")
    p.add_argument("--in-process", action="store_true", help="a quick check of the table: run the cases through syntaxnmt.cli.main in this process "
                   "(those with stdin or a FIFO reader, and the HTTP cases, are listed as not run); the audit proper runs subprocesses")
    args = p.parse_args()
    if args.fork_server:
        return fork_server()
    from syntaxnmt.cpu.machine import machine_info, with_load_after

    info = machine_info()
    started = time.monotonic()
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="syntaxnmt-audit-")
    root = Path(args.keep or tmp.name).resolve()
    root.mkdir(parents=True, exist_ok=True)
    try:
        env = make_env(root)
        table = cases(env)
        only = set(args.only.split(",")) if args.only else None
        if not args.all and not only:
            table = [c for c in table if not c.extended]
        if only:
            unknown = only - {c.name for c in table} - {"http"}
            if unknown:
                sys.exit(f"unknown case names: {', '.join(sorted(unknown))}")
            table = [c for c in table if c.name in only]
        run_http_cases = (only is None or "http" in only) and not args.in_process
        if args.in_process:
            skipped = [c.name for c in table if not c.in_process]
            table = [c for c in table if c.in_process]
            print(f"in-process check: not run here (subprocess only): {', '.join(skipped)} and the HTTP cases", file=sys.stderr)
        total = len(table) + (len(http_cases()) + 1 if run_http_cases else 0)
        records: list[dict] = []
        with tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True, disable=args.in_process) as bar:  # in-process: no bar above the commands' own
            def progress(r: dict) -> None:
                bar.write(row(r))
                bar.update(1)
            server = None if args.spawn or args.in_process else ForkServer()
            try:
                for case in table:
                    records.append(run_case_in_process(case, env) if args.in_process else run_case(case, env, server))
                    progress(records[-1])
            finally:
                if server:
                    server.close()
            if run_http_cases:
                records += run_http(env, progress)
    finally:
        if tmp:
            tmp.cleanup()
    print(summary(records))
    seconds = time.monotonic() - started
    print(f"{seconds:.0f} s in all ({'in-process' if args.in_process else 'python -m syntaxnmt per case' if args.spawn else 'a forked process per case'})")
    if args.json:
        from syntaxnmt.textio import atomic_write_text

        result = {"mode": "in-process" if args.in_process else "spawn" if args.spawn else "fork", "cases": len(records), "passed": sum(r["passed"] for r in records), "failed": sum(not r["passed"] for r in records),
                  "by_command": dict(Counter(r["command"] for r in records)), "seconds": round(seconds, 1),
                  "machine": with_load_after(info), "records": records}
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    sys.exit(1 if any(not r["passed"] for r in records) else 0)


if __name__ == "__main__":
    main()
