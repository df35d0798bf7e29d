"""External word aligners: eflomal (Östling & Tiedemann 2016), and ``syntaxnmt align-external``.

eflomal ("Efficient Low-Memory Aligner", the ``eflomal`` PyPI package) is a Bayesian
IBM1 → HMM → HMM+fertility aligner trained by Gibbs sampling. Its Python API
(``eflomal.Aligner().align``) writes the two directional alignments in Pharaoh format; both
directions are symmetrized here with :func:`syntaxnmt.alignment.symmetrize`.

Reproducibility: eflomal 2.0 seeds its samplers from ``/dev/urandom`` and has no seed option
(neither in its Python API nor on its command line), so two runs may differ slightly.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

from syntaxnmt.alignment.symmetrize import SYMMETRIZATIONS, symmetrization
from syntaxnmt.alignment.symmetrize import symmetrize as symmetrize_links
from syntaxnmt.config import Config
from syntaxnmt.data.corpus import read_parallel
from syntaxnmt.data.links import Links, format_links, parse_links
from syntaxnmt.data.prepare import annotate_split, model_words
from syntaxnmt.errors import UserError
from syntaxnmt.textio import write_lines

DIRECTIONS = ("forward", "reverse")


def _import_eflomal():
    try:
        import eflomal  # optional aligner, loaded only by align-external / lexicon
    except ImportError:
        raise UserError("eflomal is not installed; install it with `pip install eflomal` (needs a C compiler)") from None
    return eflomal


def run_eflomal(
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    *,
    symmetrize: str = "grow-diag-final-and",
    seed: int | None = None,
    model: int = 3,
    n_samplers: int = 3,
    rel_iterations: float = 1.0,
    null_prior: float = 0.2,
) -> list[Links]:
    """Align tokenized sentence pairs with eflomal; return 0-indexed ``(src, tgt)`` links per pair.

    ``src_lines``/``tgt_lines`` are whitespace-tokenized sentences (strings), line-aligned; an
    empty sentence gets no links. eflomal lowercases words itself. It runs in both directions
    (``forward``: each target word picks at most one source word; ``reverse``: each source word
    picks at most one target word) and the two are combined with ``symmetrize``: one of
    :data:`~syntaxnmt.alignment.SYMMETRIZATIONS`, or ``"forward"``/``"reverse"`` for one direction.
    ``model``: 1 = IBM1, 2 = HMM, 3 = HMM + fertility; ``n_samplers`` independent Gibbs samplers
    (eflomal runs them in parallel threads); ``rel_iterations`` scales eflomal's default number
    of iterations; ``null_prior`` is the prior probability of a NULL link.

    ``seed`` is accepted for interface stability but eflomal cannot be seeded (see the module
    docstring); passing one emits a warning.

    Raises :class:`UserError` if eflomal is not installed, the inputs differ in length, a
    sentence spans several lines, or eflomal fails.
    """
    if symmetrize not in SYMMETRIZATIONS + DIRECTIONS:
        raise UserError(f"unknown symmetrization {symmetrize!r}; choose one of {', '.join(SYMMETRIZATIONS + DIRECTIONS)}")
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"eflomal: {len(src_lines)} source sentences but {len(tgt_lines)} target sentences")
    for side, lines in (("source", src_lines), ("target", tgt_lines)):
        for k, line in enumerate(lines, start=1):
            if "\n" in line or "\r" in line:
                raise UserError(f"eflomal: {side} sentence {k} contains a line break")
    eflomal = _import_eflomal()
    if seed is not None:
        warnings.warn("eflomal has no seed option (it seeds from /dev/urandom); `seed` is ignored", stacklevel=2)
    if not src_lines:
        return []
    src_tokens = [line.split() for line in src_lines]
    tgt_tokens = [line.split() for line in tgt_lines]
    aligner = eflomal.Aligner(model=model, n_samplers=n_samplers, rel_iterations=rel_iterations, null_prior=null_prior)
    with tempfile.TemporaryDirectory(prefix="syntaxnmt-eflomal-") as tmp:
        fwd_path, rev_path = Path(tmp) / "forward.links", Path(tmp) / "reverse.links"
        try:
            aligner.align(
                [" ".join(t) + "\n" for t in src_tokens],
                [" ".join(t) + "\n" for t in tgt_tokens],
                links_filename_fwd=str(fwd_path),
                links_filename_rev=str(rev_path),
                quiet=True,
            )
        except (subprocess.CalledProcessError, OSError, ValueError) as e:  # named without eflomal's temporary files
            raise UserError(f"eflomal failed ({_failure(e)}) aligning {len(src_lines)} sentence pairs") from None
        directions = {name: _read_links(path, src_tokens, tgt_tokens) for name, path in (("forward", fwd_path), ("reverse", rev_path))}
    if symmetrize in DIRECTIONS:
        return directions[symmetrize]
    return [symmetrize_links(f, r, symmetrize) for f, r in zip(directions["forward"], directions["reverse"])]


def _failure(e: Exception) -> str:
    """Why eflomal failed, without the paths of the temporary files it was given (its command line
    names them, and they are gone by the time the user reads the message)."""
    if isinstance(e, subprocess.CalledProcessError):
        code = e.returncode
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return str(e)


def _read_links(path: Path, src_tokens: list[list[str]], tgt_tokens: list[list[str]]) -> list[Links]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if len(lines) != len(src_tokens):
        raise UserError(f"eflomal wrote {len(lines)} alignment lines for {len(src_tokens)} sentence pairs")
    return [
        parse_links(line, where=f"eflomal output line {k + 1}", src_len=len(s), tgt_len=len(t))[0]
        for k, (line, s, t) in enumerate(zip(lines, src_tokens, tgt_tokens))
    ]


def align_external(cfg: Config, output: str | Path | None = None, symmetrize: str = "grow-diag-final-and", log=print) -> Path:
    """Align the training corpus of ``cfg`` with eflomal; write ``output`` (default ``data.train_align``).

    Pairs that ``prepare`` skips (an empty side, a bad tree with ``bad_tree: skip``) get an empty line.
    """
    d = cfg.data
    output = output or d.train_align
    if not output:
        raise UserError("give the output file with -o, or set data.train_align in the config")
    for key in ("train_src", "train_tgt"):
        if not getattr(d, key):
            raise UserError(f"data.{key} is not set in the config")
    method = symmetrization(symmetrize)
    text = read_parallel(d.train_src, d.train_tgt)
    parses = None
    if d.annotate != "none":
        text, parses, _ = annotate_split(cfg, text, d.train_src, d.train_conllu, log)
    src_text, tgt_text = model_words(cfg, text, parses)
    log(f"aligning {len(src_text)} sentence pairs with eflomal ({method})")
    links = run_eflomal(src_text, tgt_text, symmetrize=method)
    lines = [""] * text.counts["read"]
    for line_number, pair_links in zip(text.line_numbers, links):
        lines[line_number - 1] = format_links(pair_links)
    write_lines(output, lines)
    log(f"{sum(len(x) for x in links)} links written to {output}")
    return Path(output)
