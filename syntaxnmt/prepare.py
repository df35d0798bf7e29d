"""``syntaxnmt prepare``: raw parallel text -> SentencePiece models -> cached binary splits.

The cache lives in ``Config.prepared_dir`` with a ``meta.json`` holding the data config it was
built from; a cache built from a different data config is rebuilt, an identical one reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from syntaxnmt.batches import RaggedArray, Split
from syntaxnmt.config import Config, DataConfig
from syntaxnmt.corpus import length_filter, read_parallel
from syntaxnmt.errors import UserError
from syntaxnmt.subwords import Tokenizer, train_sentencepiece
from syntaxnmt.textio import atomic_write_text, write_lines

META = "meta.json"


@dataclass
class Tokenizers:
    src: Tokenizer
    tgt: Tokenizer


def spm_paths(prepared: Path, data: DataConfig) -> tuple[Path, Path]:
    if data.joint_vocab:
        joint = prepared / "spm.joint.model"
        return joint, joint
    return prepared / f"spm.{data.src_lang}.model", prepared / f"spm.{data.tgt_lang}.model"


def load_tokenizers(cfg: Config) -> Tokenizers:
    """The source and target tokenizers of a prepared corpus."""
    src_spm, tgt_spm = spm_paths(cfg.prepared_dir, cfg.data)
    d = cfg.data
    return Tokenizers(
        Tokenizer(src_spm, d.src_lang, d.moses_tokenize, d.lowercase),
        Tokenizer(tgt_spm, d.tgt_lang, d.moses_tokenize, d.lowercase),
    )


def _fingerprint(data: DataConfig) -> dict:
    return data.model_dump(mode="json")


def is_prepared(cfg: Config) -> bool:
    meta = cfg.prepared_dir / META
    if not meta.is_file():
        return False
    return json.loads(meta.read_text())["data_config"] == _fingerprint(cfg.data)


def _encode(tok: Tokenizer, lines: list[str], desc: str) -> list[list[int]]:
    out: list[list[int]] = []
    chunk = 2000
    with tqdm(total=len(lines), desc=desc, unit="sent", leave=False, mininterval=1.0) as bar:
        for i in range(0, len(lines), chunk):
            out.extend(tok.encode_batch(lines[i : i + chunk]))
            bar.update(min(chunk, len(lines) - i))
    return out


def prepare(cfg: Config, force: bool = False, log=print) -> dict:
    """Build (or reuse) the prepared corpus of ``cfg``; returns the counts written to ``meta.json``."""
    d = cfg.data
    out = cfg.prepared_dir
    if not force and is_prepared(cfg):
        log(f"prepared corpus up to date in {out}")
        return json.loads((out / META).read_text())["counts"]
    for key in ("train_src", "train_tgt", "dev_src", "dev_tgt"):
        if not getattr(d, key):
            raise UserError(f"data.{key} is not set in the config")
    out.mkdir(parents=True, exist_ok=True)
    (out / META).unlink(missing_ok=True)  # the cache is invalid until this run completes

    train = read_parallel(d.train_src, d.train_tgt)
    dev = read_parallel(d.dev_src, d.dev_tgt)
    if not train.src:
        raise UserError(f"{d.train_src}: no non-empty sentence pairs")
    if not dev.src:
        raise UserError(f"{d.dev_src}: no non-empty sentence pairs")

    # SentencePiece is trained on normalized (lowercased / Moses-tokenized) text.
    from sacremoses import MosesTokenizer

    def normalized(lines: list[str], lang: str) -> list[str]:
        if not (d.moses_tokenize or d.lowercase):
            return [line.strip() for line in lines]
        mt = MosesTokenizer(lang=lang) if d.moses_tokenize else None
        res = []
        for line in tqdm(lines, desc=f"normalize {lang}", unit="sent", leave=False, mininterval=1.0):
            line = line.strip().lower() if d.lowercase else line.strip()
            res.append(mt.tokenize(line, escape=False, return_str=True) if mt else line)
        return res

    src_norm, tgt_norm = normalized(train.src, d.src_lang), normalized(train.tgt, d.tgt_lang)
    src_spm, tgt_spm = spm_paths(out, d)
    spm_args = dict(vocab_size=d.vocab_size, model_type=d.spm_model_type, character_coverage=d.spm_character_coverage, max_sentences=d.spm_max_sentences, seed=cfg.seed)
    log(f"training SentencePiece ({d.spm_model_type}, {'joint' if d.joint_vocab else 'separate'}, vocab <= {d.vocab_size})")
    if d.joint_vocab:
        train_sentencepiece(src_norm + tgt_norm, src_spm, **spm_args)
    else:
        train_sentencepiece(src_norm, src_spm, **spm_args)
        train_sentencepiece(tgt_norm, tgt_spm, **spm_args)
    toks = load_tokenizers(cfg)

    # Train split: encode (SentencePiece only: text is already normalized) and filter by length.
    src_ids = [toks.src.sp.encode(s) for s in tqdm(src_norm, desc="subwords src", unit="sent", leave=False, mininterval=1.0)]
    tgt_ids = [toks.tgt.sp.encode(t) for t in tqdm(tgt_norm, desc="subwords tgt", unit="sent", leave=False, mininterval=1.0)]
    keep, dropped = length_filter([len(s) for s in src_ids], [len(t) for t in tgt_ids], d.min_len, d.max_len, d.max_len_ratio)
    RaggedArray.save(out / "train.src", [src_ids[i] for i in keep])
    RaggedArray.save(out / "train.tgt", [tgt_ids[i] for i in keep])
    write_lines(out / "train.lines", [str(train.line_numbers[i]) for i in keep])

    # Dev split: every non-empty pair is kept (validation BLEU is computed on the raw references).
    RaggedArray.save(out / "dev.src", _encode(toks.src, dev.src, "subwords dev src"))
    RaggedArray.save(out / "dev.tgt", _encode(toks.tgt, dev.tgt, "subwords dev tgt"))
    write_lines(out / "dev.ref", dev.tgt)
    write_lines(out / "dev.raw_src", dev.src)

    counts = {
        "train_read": train.counts["read"],
        "train_empty": train.counts["empty"],
        **{f"train_{k}": v for k, v in dropped.items()},
        "train_kept": len(keep),
        "train_src_subwords": sum(len(src_ids[i]) for i in keep),
        "train_tgt_subwords": sum(len(tgt_ids[i]) for i in keep),
        "dev_read": dev.counts["read"],
        "dev_empty": dev.counts["empty"],
        "dev_kept": len(dev.src),
        "src_vocab": len(toks.src),
        "tgt_vocab": len(toks.tgt),
    }
    meta = {"data_config": _fingerprint(d), "counts": counts}
    atomic_write_text(out / META, json.dumps(meta, indent=2))
    log(format_counts(counts))
    return counts


def format_counts(c: dict) -> str:
    return (
        f"train: {c['train_read']} pairs read, {c['train_empty']} empty, {c['train_too_short']} too short, "
        f"{c['train_too_long']} too long, {c['train_bad_ratio']} bad length ratio -> {c['train_kept']} kept "
        f"({c['train_src_subwords']} src / {c['train_tgt_subwords']} tgt subwords); "
        f"dev: {c['dev_kept']} kept ({c['dev_empty']} empty); vocab src {c['src_vocab']}, tgt {c['tgt_vocab']}"
    )


def load_split(cfg: Config, name: str) -> Split:
    if not is_prepared(cfg):
        raise UserError(f"{cfg.prepared_dir}: no prepared corpus for this data config (run `syntaxnmt prepare`)")
    return Split(cfg.prepared_dir, name)
