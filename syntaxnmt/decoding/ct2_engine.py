"""Translating with CTranslate2: ``syntaxnmt translate --engine ctranslate2``, and
``Translator.from_checkpoint(..., engine="ctranslate2")`` (:class:`syntaxnmt.api.Translator`).

The text pipeline is the PyTorch engine's (:func:`syntaxnmt.decoding.sources.encode_source_lines`: the
parser's words for a model trained on a parsed corpus, SentencePiece, source truncation; the
target tokenizer's decoding); only the search runs in ``ctranslate2.Translator``. Search settings
map onto CTranslate2's: beam size, length penalty (log P / length**alpha), coverage penalty,
minimum length, n-best; the longest output ``max_len_a * |x| + max_len_b`` is applied per
sentence by decoding up to the batch's longest limit and cutting each output at its own, which
for greedy search is exactly our limit. PAD and BOS are never emitted, as in
:func:`syntaxnmt.decoding.search.greedy_search`. Beam search ranks unfinished hypotheses by their raw
log-probability (CTranslate2) rather than the normalized one (ours), so beam outputs may differ
slightly; greedy outputs are the same (``tests/test_ct2_engine.py``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from syntaxnmt.config import Config, DecodeConfig, config_from_dict
from syntaxnmt.cpu.pools import decode_workers
from syntaxnmt.data.prepare import tokenizers_from_assets
from syntaxnmt.decoding.ct2_export import CONFIG_FILE, SOURCE_TOKENIZER, TARGET_TOKENIZER, export_ct2
from syntaxnmt.decoding.output import Output, without_empty_lines
from syntaxnmt.decoding.search import Hypothesis, max_output_lengths
from syntaxnmt.decoding.sources import encode_source_lines
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, PAD, FeatureSpec


class CT2Engine:
    """A CTranslate2 model exported by :func:`syntaxnmt.decoding.ct2_export.export_ct2`, with its tokenizers and config."""

    def __init__(self, path: str | Path, device: str = "cpu", threads: int | None = None, compute_type: str = "default", inter_threads: int | None = None):
        """``threads``: CTranslate2's threads in all (default: torch's). ``inter_threads``: batches
        searched at once, sharing them; default (None): ``decode.workers`` decides per call, as for
        the PyTorch engine (:func:`syntaxnmt.cpu.pools.decode_workers`: on the CPU one batch
        per thread when there are several batches), with a translator made for each split used."""
        path = Path(path)
        if path.is_file():  # a checkpoint: export it to a temporary folder first
            self._tmp = tempfile.TemporaryDirectory(prefix="syntaxnmt-ct2-")
            scratch = Path(self._tmp.name) / "model"
            try:
                path = export_ct2(path, scratch)
            except UserError as e:  # named after the user's checkpoint, not the scratch folder
                raise UserError(f"{path}: converting it for CTranslate2: {str(e).replace(str(scratch), 'a temporary folder')}") from None
        meta = path / CONFIG_FILE
        if not meta.is_file():
            raise UserError(f"{path}: not a syntaxnmt CTranslate2 export (no {CONFIG_FILE}; run `syntaxnmt export-ct2`)")
        self.cfg: Config = config_from_dict(json.loads(meta.read_text(encoding="utf-8"))["config"], source=str(meta))
        assets = {"spm_src": (path / SOURCE_TOKENIZER).read_bytes(), "spm_tgt": (path / TARGET_TOKENIZER).read_bytes(), "tags": None}
        self.toks = tokenizers_from_assets(self.cfg, assets)
        self.tgt_ids = {self.toks.tgt.id_to_piece(i): i for i in range(len(self.toks.tgt))}
        self.path, self.device, self.compute_type = path, device, compute_type
        self.threads, self.inter_threads = threads or torch.get_num_threads(), inter_threads
        self._translators: dict[tuple[int, int], object] = {}
        self.suppress = [[self.toks.tgt.id_to_piece(PAD)], [self.toks.tgt.id_to_piece(BOS)]]

    @property
    def translator(self):
        """The translator of one batch at a time (or of the fixed ``inter_threads``): scoring, checks."""
        return self.translator_for(self.inter_threads or 1)

    def translator_for(self, workers: int):
        """The ``ctranslate2.Translator`` searching ``workers`` batches at once (``inter_threads``),
        the threads shared between them; made once per split, when first used (the model is loaded
        only for the splits a command searches with)."""
        import ctranslate2

        key = (workers, max(1, self.threads // workers))
        if key not in self._translators:
            self._translators[key] = ctranslate2.Translator(str(self.path), device=self.device, compute_type=self.compute_type, inter_threads=key[0], intra_threads=key[1])
        return self._translators[key]

    def translate_ids(self, sources: Sequence[np.ndarray], decode: DecodeConfig, *, beam: int | None = None, nbest: int = 1) -> list[list[Hypothesis]]:
        """Search every source (subword ids, no EOS); results in input order."""
        check_decode(decode)
        beam = decode.beam_size if beam is None else beam
        max_pos = self.cfg.model.max_positions - 2
        sources = [s[:max_pos] for s in sources]
        limits = max_output_lengths(torch.tensor([len(s) for s in sources]), decode.max_len_a, decode.max_len_b, max_pos).tolist()
        if not sources:
            return []
        batches = -(-len(sources) // decode.batch_size)
        workers = self.inter_threads or decode_workers(decode.workers, batches, torch.device(self.device), self.threads)[0]
        results = self.translator_for(workers).translate_batch(
            [[self.toks.src.id_to_piece(int(i)) for i in s] for s in sources],
            max_batch_size=decode.batch_size,
            beam_size=beam,
            num_hypotheses=nbest,
            length_penalty=decode.length_penalty,
            coverage_penalty=decode.coverage_penalty,
            min_decoding_length=decode.min_len,
            max_decoding_length=max(limits),
            suppress_sequences=self.suppress,
            return_scores=True,
        )
        alpha = decode.length_penalty

        def hypothesis(tokens: list[str], score: float, limit: int) -> Hypothesis:
            # CTranslate2's score is ours, log P / (|y| + 1)**alpha (EOS counted): log P is recovered from it.
            return Hypothesis([self.tgt_ids[t] for t in tokens[:limit]], score, score * (len(tokens) + 1) ** alpha)

        return [[hypothesis(h, score, limit) for h, score in zip(r.hypotheses, r.scores)] for r, limit in zip(results, limits)]

    def follow(self, cfg: Config) -> "CT2Engine":
        """Search with ``cfg``, the exported config with the translation-time options applied
        (:func:`~syntaxnmt.decoding.loading.translation_config`): its ``decode`` settings and spaCy
        pipeline. One-hot attention is refused: CTranslate2's attention is softmax."""
        if cfg.model.hard_attention != self.cfg.model.hard_attention:
            raise UserError("--model.hard_attention: CTranslate2's attention is softmax (translate with --engine torch)")
        self.cfg = cfg
        return self

    def translate_outputs(self, lines: Sequence[str], decode: DecodeConfig, *, conllu: str | None = None, source_name: str = "<input>", docs: Sequence[str] | None = None, nbest: int = 1, progress: bool = False) -> list[list[Output]]:
        """Raw source lines to n-best lists of :class:`~syntaxnmt.decoding.output.Output`, best
        first, as the PyTorch engine's :func:`~syntaxnmt.decoding.output.translate_outputs`: an
        empty or blank line gets an empty output without a search. No document context (``docs``
        is refused); ``progress`` is not shown."""
        if docs is not None:
            raise UserError("--docs: document context needs --engine torch")

        def search(kept: list[str], _numbers: list[int]) -> list[list[Output]]:
            sources, _ = encode_source_lines(self.cfg, self.toks, kept, FeatureSpec(), conllu, source_name)
            return [[Output(self.toks.tgt.decode(h.tokens), h.score, h.log_prob, h.tokens) for h in nb] for nb in self.translate_ids(sources, decode, nbest=nbest)]

        return without_empty_lines(lines, search)


def check_decode(decode: DecodeConfig) -> None:
    """Refuse, in one line, the search settings that CTranslate2's search does not have."""
    if decode.unk_replace != "none":
        raise UserError(f"decode.unk_replace {decode.unk_replace} reads our cross-attention: translate with --engine torch")
    if decode.length_penalty_type != "power":
        raise UserError(f"decode.length_penalty_type {decode.length_penalty_type}: CTranslate2 normalizes by |y|^alpha only (power); translate with --engine torch")


def ct2_device(device: torch.device) -> str:
    """CTranslate2's name for a torch device (``cuda`` when it has a GPU for it, else ``cpu``)."""
    import ctranslate2  # deferred: CTranslate2 loads only for export-ct2 / --engine ctranslate2

    return "cuda" if device.type == "cuda" and ctranslate2.get_cuda_device_count() > 0 else "cpu"
