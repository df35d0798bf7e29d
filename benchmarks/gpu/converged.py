"""Runs of the converged Multi30k study (recipes/multi30k/study-converged.set.yaml, issue 50) on a lent
GPU machine, which has no spaCy: the set's systems read the parser's words and parses of the test
sets, so the CPU machine parses them into CoNLL-U files that give the same words and parses as the
live pipeline (checked), and the GPU machine runs a copy of the set that reads them.

    python benchmarks/gpu/converged.py bundle        # CPU machine: .gpu/conllu/<test>.en.conllu, checked
    python3 benchmarks/gpu/converged.py set          # GPU machine: writes the set copy, prints its path
    python3 benchmarks/gpu/converged.py pack OUT     # GPU machine: finished runs' results -> OUT/runs/...
    python benchmarks/gpu/converged.py unpack DIR    # CPU machine: DIR/runs/... -> runs/, then --collect

(benchmarks/gpu/converged.sh runs set, the experiment and pack in one device command.) A run brought
back is finished here (``done.json`` and every test hypothesis), so ``syntaxnmt experiment SET
--jobs 2`` skips it and ``--collect`` copies its scores into results/multi30k-study-converged/.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "recipes" / "multi30k" / "study-converged.set.yaml"
GPU_SET = SET.with_name("study-converged-gpu.set.yaml")  # written on the GPU machine only
CONLLU = ROOT / ".gpu" / "conllu"
# What a finished run's table needs (experiments.runner: done.json, the hypotheses, the scores); the
# checkpoints stay behind.
KEPT = ("done.json", "scores.json.gz", "config.yaml", "valid.log", "train.log")


class Refused(Exception):
    """A step that cannot go on: one line on stderr, exit status 2."""


def test_sets() -> dict[str, dict]:
    return yaml.safe_load(SET.read_text(encoding="utf-8"))["test_sets"]


def conllu_of(name: str, folder: Path = CONLLU) -> Path:
    return folder / f"{name}.en.conllu"


def bundle(folder: Path = CONLLU) -> None:
    """Parse the set's test sources with ``syntaxnmt parse`` (the corpus's spaCy pipeline) and check
    that every system reads from the CoNLL-U files the words and parses the live pipeline gives."""
    from syntaxnmt.config import expand_env, load_config
    from syntaxnmt.decoding.sources import parser_words, source_parses
    from syntaxnmt.textio import read_lines

    cfg = load_config(SET.parent / "syntax" / "base.yaml")
    folder.mkdir(parents=True, exist_ok=True)
    key = lambda p: (list(p.words), list(p.upos), list(p.xpos), list(p.heads), list(p.deprel))  # noqa: E731
    for name, test in test_sets().items():
        src = expand_env(test["src"])
        lines = read_lines(src)
        subprocess.run([sys.executable, "-m", "syntaxnmt", "parse", "-i", src, "-o", str(conllu_of(name, folder))], check=True)
        live, read = source_parses(cfg, lines), source_parses(cfg, lines, str(conllu_of(name, folder)))
        differ = [i + 1 for i, (a, b) in enumerate(zip(live, read)) if key(a) != key(b)]
        # the words of a system without parses: the pipeline's tokenizer alone, live
        differ += [i + 1 for i, (a, b) in enumerate(zip(parser_words(cfg, lines), read)) if list(a) != list(b.words)]
        if differ or len(live) != len(read):
            raise Refused(f"{conllu_of(name, folder)}: lines {sorted(set(differ))[:5]} read otherwise than the live pipeline parses them")
        print(f"{conllu_of(name, folder)}: {len(lines)} sentences, words and parses as the live pipeline's")


def write_gpu_set(folder: Path = CONLLU, target: Path = GPU_SET) -> Path:
    """The committed set with each test set's CoNLL-U parses (``conllu``): the same systems, seeds,
    budget, work_dirs and results folder."""
    tree = yaml.safe_load(SET.read_text(encoding="utf-8"))
    for name, test in tree["test_sets"].items():
        path = conllu_of(name, folder)
        if not path.is_file():
            raise Refused(f"{path} not found: run `python benchmarks/gpu/converged.py bundle` on the CPU machine and carry .gpu")
        test["conllu"] = str(path)
    target.write_text("# Written by benchmarks/gpu/converged.py set (the GPU machine's copy; do not commit)\n" + yaml.safe_dump(tree, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return target


def finished_runs(set_path: Path) -> list[Path]:
    """The work_dirs of the set's finished runs (every seed of every system)."""
    from syntaxnmt.experiments.sets import is_finished, load_set, set_runs

    spec = load_set(set_path)
    return [Path(r.cfg.work_dir) for r in set_runs(set_path, spec, list(spec.configs)) if is_finished(r.cfg, spec)]


def run_files(work: Path) -> list[Path]:
    return [work / f for f in KEPT if (work / f).is_file()] + sorted(work.glob("*.hyp"))


def pack(out: Path, set_path: Path = GPU_SET, root: Path = ROOT) -> list[Path]:
    """Copy the finished runs' results to ``out`` under their paths relative to ``root``."""
    runs = finished_runs(set_path)
    for work in runs:
        rel = (root / work).resolve().relative_to(root.resolve())
        (out / rel).mkdir(parents=True, exist_ok=True)
        for f in run_files(root / work):
            shutil.copy2(f, out / rel / f.name)
    print(f"packed {len(runs)} finished run(s) into {out}: {', '.join(w.name for w in runs) or 'none'}")
    return runs


def unpack(src: Path, root: Path = ROOT) -> list[Path]:
    """Bring runs packed on the GPU machine into this checkout's ``runs/``; a run already finished
    here is left as it is."""
    brought = []
    for done in sorted(src.glob("runs/**/done.json")):
        rel = done.parent.relative_to(src)
        target = root / rel
        if (target / "done.json").is_file():
            print(f"{rel}: already finished here, left as it is")
            continue
        target.mkdir(parents=True, exist_ok=True)
        for f in run_files(done.parent):
            shutil.copy2(f, target / f.name)
        brought.append(rel)
    print(f"brought {len(brought)} run(s) into {root / 'runs'}; then: syntaxnmt experiment {SET.relative_to(ROOT)} --collect")
    return brought


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("bundle")
    sub.add_parser("set")
    sub.add_parser("pack").add_argument("out", type=Path)
    sub.add_parser("unpack").add_argument("src", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "bundle":
            bundle()
        elif args.cmd == "set":
            print(write_gpu_set())
        elif args.cmd == "pack":
            pack(args.out)
        else:
            unpack(args.src)
    except Refused as e:
        print(f"converged.py: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
