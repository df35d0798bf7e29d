"""``syntaxnmt prepare``: raw parallel text -> (parses) -> SentencePiece -> cached binary splits.

The cache lives in ``Config.prepared_dir`` with a ``meta.json`` holding the data config it was
built from; a cache built from a different data config is rebuilt, an identical one reused.

Each split stores ``src`` and ``tgt`` (subword ids) and ``src_word`` (the word index of every
source piece). With ``data.annotate`` the source side is parsed first; the model then sees the
parser's words (joined by spaces, no Moses tokenization), and the split also stores the words'
``heads``, ``upos``, ``xpos`` and ``deprel`` (tag ids from ``tags.json``) -- with
``data.structure_control``, the parses of the control (:mod:`syntaxnmt.data.controls`). With
``data.train_align`` the train split also stores ``tgt_word`` (the word index of every target
piece) and ``align``: the word links projected onto subwords, flattened ``i0 j0 i1 j1 ...``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sacremoses import MosesTokenizer
from tqdm.auto import tqdm

from syntaxnmt.config import Config, DataConfig
from syntaxnmt.data.annotations import annotate
from syntaxnmt.data.batches import REBUILD, RaggedArray, Split
from syntaxnmt.data.controls import apply_controls
from syntaxnmt.data.corpus import ParallelText, length_filter, read_parallel
from syntaxnmt.data.documents import SEP, read_doc_ids
from syntaxnmt.data.features import TagVocab
from syntaxnmt.data.links import parse_links, word_ids_from_pieces, words_to_subwords
from syntaxnmt.data.subwords import Tokenizer, train_sentencepiece
from syntaxnmt.data.words import train_word_vocab
from syntaxnmt.errors import UserError
from syntaxnmt.inputs import TAG_NAMES
from syntaxnmt.syntax import BIE_VOCAB
from syntaxnmt.textio import atomic_write_text, read_lines, remove_stale_temporaries, write_lines

META = "meta.json"
TAGS = "tags.json"


@dataclass
class Tokenizers:
    """What turns text into a model's inputs: the source and target tokenizers and, for a parsed
    corpus, the tag vocabularies (ids of UPOS, XPOS and dependency labels)."""

    src: Tokenizer
    tgt: Tokenizer
    tags: TagVocab | None = None

    def vocab_sizes(self) -> dict[str, int]:
        """The sizes :func:`syntaxnmt.model.build_model` takes: both vocabularies and the tag sets."""
        return {"src_vocab": len(self.src), "tgt_vocab": len(self.tgt), **tag_vocab_sizes(self.tags)}


def spm_paths(prepared: Path, data: DataConfig) -> tuple[Path, Path]:
    """The SentencePiece models (``*.model``) or word vocabularies (``*.words``, ``data.vocab: word``)."""
    prefix, suffix = ("vocab", "words") if data.vocab == "word" else ("spm", "model")
    if data.joint_vocab:
        joint = prepared / f"{prefix}.joint.{suffix}"
        return joint, joint
    return prepared / f"{prefix}.{data.src_lang}.{suffix}", prepared / f"{prefix}.{data.tgt_lang}.{suffix}"


def load_tokenizers(cfg: Config) -> Tokenizers:
    """The source and target tokenizers of a prepared corpus."""
    src_spm, tgt_spm = spm_paths(cfg.prepared_dir, cfg.data)
    return _tokenizers(cfg, src_spm, tgt_spm, load_tag_vocab(cfg))


def _tokenizers(cfg: Config, src_spm: Path | bytes, tgt_spm: Path | bytes, tags: TagVocab | None) -> Tokenizers:
    d = cfg.data
    src_moses = d.moses_tokenize and d.annotate == "none"  # a parser has tokenized the source already
    return Tokenizers(
        Tokenizer(src_spm, d.src_lang, src_moses, d.lowercase),
        Tokenizer(tgt_spm, d.tgt_lang, d.moses_tokenize, d.lowercase),
        tags,
    )


def tokenizer_assets(toks: Tokenizers) -> dict:
    """The tokenizers as a checkpoint stores them (SentencePiece models and tag vocabularies), so
    that a model translates from any folder and on another machine, without its prepared corpus."""
    return {"spm_src": toks.src.model_proto(), "spm_tgt": toks.tgt.model_proto(), "tags": toks.tags.itos if toks.tags is not None else None}


def tokenizers_from_assets(cfg: Config, assets: dict) -> Tokenizers:
    """The tokenizers stored in a checkpoint by :func:`tokenizer_assets`."""
    tags = TagVocab(assets["tags"]) if assets.get("tags") is not None else None
    return _tokenizers(cfg, assets["spm_src"], assets["spm_tgt"], tags)


def _read_json(path: Path) -> object:
    """The JSON document of a file of the prepared corpus; a damaged one (not UTF-8 or not JSON:
    a write cut short, a disk error) is a :class:`UserError` that says how to rebuild the corpus."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f":{e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise UserError(f"{path}{where}: the prepared corpus is damaged ({reason}): {REBUILD}") from None


def read_meta(prepared: Path) -> dict | None:
    """The prepared corpus's ``meta.json`` (None when there is none); a damaged one -- not JSON, or
    without its ``data_config`` and ``counts`` -- is a :class:`UserError` naming it."""
    path = prepared / META
    if not path.is_file():
        return None
    meta = _read_json(path)
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), dict) for k in ("data_config", "counts")) or not isinstance(meta.get("inputs", {}), dict):
        raise UserError(f"{path}: the prepared corpus is damaged (no data_config and counts in it): {REBUILD}")
    return meta


def _read_tag_vocab(prepared: Path) -> TagVocab | None:
    path = prepared / TAGS
    if not path.is_file():
        return None
    itos = _read_json(path)
    if not isinstance(itos, dict):
        raise UserError(f"{path}: the prepared corpus is damaged (not a table of tag sets): {REBUILD}")
    return TagVocab(itos)


def load_tag_vocab(cfg: Config) -> TagVocab | None:
    """The tag vocabularies of a prepared corpus (None without parses); a broken one is refused."""
    tags = _read_tag_vocab(cfg.prepared_dir)
    if tags is not None and tags.problem():
        raise UserError(f"{cfg.prepared_dir / TAGS}: {tags.problem()}; re-run `syntaxnmt prepare` to rebuild the corpus")
    return tags


def feature_vocab_sizes(cfg: Config) -> dict[str, int]:
    """Sizes of the tag sets a model of ``cfg``'s prepared corpus may embed (see :func:`tag_vocab_sizes`)."""
    return tag_vocab_sizes(load_tag_vocab(cfg))


def tag_vocab_sizes(tags: TagVocab | None) -> dict[str, int]:
    """Sizes of the tag sets a model may embed (``upos``, ``xpos``, ``deprel`` when parsed; ``bie``)."""
    sizes = {"bie": len(BIE_VOCAB)}
    if tags is not None:
        sizes.update({name: tags.size(name) for name in TAG_NAMES})
    return sizes


def check_tag_sets(cfg: Config, tags: TagVocab | None) -> None:
    """A model or objective reading a tag set the corpus's parses leave empty (XPOS of a treebank
    without it: every tag ``_``) is a user error naming the key, found before training starts."""
    syn, pos = cfg.model.syntax, cfg.train.multitask.pos
    readers = [(s, "model.syntax.qk_source") for row in syn.qk_source for s in row] + [(s, "model.syntax.input_features") for s in syn.input_features]
    readers += [(pos.tags, "train.multitask.pos.tags")] if pos.weight > 0 else []
    for name, key in readers:
        if tags is not None and name in TAG_NAMES and tags.is_empty(name):
            source = cfg.data.train_conllu if cfg.data.annotate == "conllu" else f"spaCy {cfg.data.spacy_pipeline}"
            raise UserError(f"{key} uses {name}, but the parses of the corpus ({source}) have no {name} tags (every one is '_')")


_PATH_KEYS = ("train_src", "train_tgt", "dev_src", "dev_tgt", "train_conllu", "dev_conllu", "train_align", "train_docs", "dev_docs", "prepared_dir")


def _absolute_paths(fingerprint: dict) -> dict:
    """The same data spelled two ways (``../shared/data`` or its absolute path) is the same cache."""
    return {k: (os.path.abspath(v) if k in _PATH_KEYS and isinstance(v, str) and v else v) for k, v in fingerprint.items()}


def _fingerprint(data: DataConfig) -> dict:
    fingerprint = _absolute_paths(data.model_dump(mode="json"))
    align = Path(data.train_align)
    if data.train_align and align.is_file():  # a rewritten alignment file invalidates the cache
        fingerprint["train_align_stat"] = [align.stat().st_size, align.stat().st_mtime_ns]
    return fingerprint


_INPUT_KEYS = ("train_src", "train_tgt", "dev_src", "dev_tgt", "train_conllu", "dev_conllu", "train_align", "train_docs", "dev_docs")


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    """SHA-256 of a file's bytes (once per process while its inode is unchanged: any write moves its ctime)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def input_digests(data: DataConfig) -> dict[str, str]:
    """The SHA-256 of every input file of ``data`` that exists, by key (``train_src``, ...): the
    cache key covers the files' content, so a file edited in place is a new corpus. Hashing costs
    about 2 ms per MB (the Multi30k training files: 1 ms; docs/robustness.md)."""
    digests = {}
    for key in _INPUT_KEYS:
        path = getattr(data, key)
        if path and os.path.isfile(path):
            st = os.stat(path)
            digests[key] = _file_digest(os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return digests


def stale_reason(cfg: Config) -> str | None:
    """Why an existing prepared corpus must be rebuilt although its data config matches, or None:
    a broken tag vocabulary, or an input file whose content changed since it was prepared (a
    cache written before input digests were stored is trusted)."""
    tags = _read_tag_vocab(cfg.prepared_dir)
    if tags is not None and tags.problem():
        return tags.problem()
    meta = read_meta(cfg.prepared_dir)
    stored = meta.get("inputs") if meta is not None else None
    if stored is not None:
        current = input_digests(cfg.data)
        changed = [k for k in _INPUT_KEYS if stored.get(k) != current.get(k)]
        if changed:
            return f"{', '.join(f'data.{k}' for k in changed)} changed since the corpus was prepared"
    return None


def is_prepared(cfg: Config) -> bool:
    meta = read_meta(cfg.prepared_dir)
    if meta is None or stale_reason(cfg):
        return False
    stored = _absolute_paths(meta["data_config"])
    current = _fingerprint(cfg.data)
    # A key added to DataConfig after the cache was built does not invalidate it at its default.
    defaults = DataConfig().model_dump(mode="json")
    current = {k: v for k, v in current.items() if k in stored or v != defaults.get(k)}
    return stored == current


def parse_source(cfg: Config, lines: Sequence[str], text_path: str, conllu_path: str = "", progress: bool = True, line_numbers: Sequence[int] | None = None):
    """Parses of ``lines`` as configured in ``data.annotate`` (``None`` for a skipped bad tree);
    ``line_numbers``: the lines' numbers in ``text_path``, for messages (default 1, 2, ...)."""
    d = cfg.data
    return annotate(lines, method=d.annotate, pipeline=d.spacy_pipeline, conllu_path=conllu_path, text_path=text_path, bad_tree=d.bad_tree, progress=progress, line_numbers=line_numbers)


def annotate_split(cfg: Config, text: ParallelText, src_path: str, conllu_path: str, log) -> tuple[ParallelText, list, dict]:
    """Parse the kept pairs of a split; pairs whose tree is bad are dropped when ``bad_tree: skip``."""
    d = cfg.data
    if d.annotate == "conllu":
        if not conllu_path:
            raise UserError(f"data.annotate is conllu but no CoNLL-U file is set for {src_path}")
        # The CoNLL-U file holds one sentence per non-empty line of the source file.
        src_lines = read_lines(src_path)
        nonempty = [i + 1 for i, line in enumerate(src_lines) if line.strip()]
        parses, counts = parse_source(cfg, [src_lines[i - 1] for i in nonempty], src_path, conllu_path, line_numbers=nonempty)
        by_line = dict(zip(nonempty, parses))
        parses = [by_line[n] for n in text.line_numbers]
    else:
        log(f"parsing {len(text.src)} sentences of {src_path} with spaCy ({d.spacy_pipeline})")
        parses, counts = parse_source(cfg, text.src, src_path)
    keep = [i for i, p in enumerate(parses) if p is not None]
    kept = ParallelText([text.src[i] for i in keep], [text.tgt[i] for i in keep], [text.line_numbers[i] for i in keep], text.counts)
    return kept, [parses[i] for i in keep], {"bad_tree": len(parses) - len(keep)}


def _normalized(lines: list[str], lang: str, d: DataConfig, moses: bool) -> list[str]:
    """The text SentencePiece is trained on: stripped, lowercased and Moses-tokenized as configured."""
    if not (moses or d.lowercase):
        return [line.strip() for line in lines]

    mt = MosesTokenizer(lang=lang) if moses else None
    res = []
    for line in tqdm(lines, desc=f"normalize {lang}", unit="sent", leave=False, mininterval=1.0):
        line = line.strip().lower() if d.lowercase else line.strip()
        res.append(mt.tokenize(line, escape=False, return_str=True) if mt else line)
    return res


def model_words(cfg: Config, text: ParallelText, parses: list | None) -> tuple[list[str], list[str]]:
    """The words the model sees, space-separated, per pair: the parser's words or the normalized
    source, and the normalized target. SentencePiece is trained on them; word alignments index them."""
    d = cfg.data
    if parses is not None:
        src_text = [" ".join(w.lower() if d.lowercase else w for w in p.words) for p in parses]
    else:
        src_text = _normalized(text.src, d.src_lang, d, d.moses_tokenize)
    return src_text, _normalized(text.tgt, d.tgt_lang, d, d.moses_tokenize)


def _save_alignments(out: Path, path: str, text: ParallelText, src_text: list[str], tgt_text: list[str], src_words, tgt_ids, tok: Tokenizer, keep: Sequence[int]) -> int:
    """Project the word links of ``path`` (one line per line of the training files) onto the subwords
    of the kept pairs; store ``train.align`` and ``train.tgt_word``. Returns the number of word links."""
    lines = read_lines(path)
    if len(lines) != text.counts["read"]:
        raise UserError(f"{path}: {len(lines)} alignment lines but the training files have {text.counts['read']} lines")
    tgt_words = [word_ids_from_pieces(tok.sp.id_to_piece(list(ids))) for ids in tgt_ids]
    links, n_links = [], 0
    for k in keep:
        where = f"{path}:{text.line_numbers[k]}"
        for side, words, pieces in (("source", src_text[k], src_words[k]), ("target", tgt_text[k], tgt_words[k])):
            if len(words.split()) != (max(pieces) + 1 if len(pieces) else 0):
                raise UserError(f"{where}: the {side} sentence has {len(words.split())} words but its subwords make {max(pieces, default=-1) + 1}")
        _, word_links = parse_links(lines[text.line_numbers[k] - 1], where=where, src_len=len(src_text[k].split()), tgt_len=len(tgt_text[k].split()))
        n_links += len(word_links)
        links.append([x for link in sorted(words_to_subwords(word_links, src_words[k], tgt_words[k], where)) for x in link])
    RaggedArray.save(out / "train.align", links)
    RaggedArray.save(out / "train.tgt_word", [tgt_words[k] for k in keep])
    return n_links


def _encode_source(tok: Tokenizer, text: ParallelText, parses: list | None) -> tuple[list[list[int]], list[list[int]]]:
    if parses is not None:
        return tok.encode_words([p.words for p in parses])
    return tok.encode_with_words(text.src)


def _save_split(out: Path, name: str, src, words, tgt, parses, tags: TagVocab | None, keep: Sequence[int]) -> None:
    RaggedArray.save(out / f"{name}.src", [src[i] for i in keep])
    RaggedArray.save(out / f"{name}.src_word", [words[i] for i in keep])
    RaggedArray.save(out / f"{name}.tgt", [tgt[i] for i in keep])
    if parses is not None and tags is not None:
        RaggedArray.save(out / f"{name}.heads", [parses[i].heads for i in keep])
        for tag in TAG_NAMES:
            RaggedArray.save(out / f"{name}.{tag}", [tags.encode(tag, getattr(parses[i], tag)) for i in keep])


def _save_docs(out: Path, name: str, docs_path: str, text_path: str, text: ParallelText, keep: Sequence[int]) -> None:
    """The document index of every kept sentence (field ``doc``: one number per sentence), in corpus order."""
    docs = read_doc_ids(docs_path, text.counts["read"], text_path)
    RaggedArray.save(out / f"{name}.doc", [docs[text.line_numbers[i] - 1 : text.line_numbers[i]] for i in keep])


def _read_splits(cfg: Config, log) -> tuple[ParallelText, ParallelText, list | None, list | None, dict[str, int]]:
    """The train and dev pairs and, with ``data.annotate``, their parses and bad-tree counts."""
    d = cfg.data
    train = read_parallel(d.train_src, d.train_tgt)
    dev = read_parallel(d.dev_src, d.dev_tgt)
    if not train.src:
        raise UserError(f"{d.train_src}: no non-empty sentence pairs")
    if not dev.src:
        raise UserError(f"{d.dev_src}: no non-empty sentence pairs")
    bad = {"train": 0, "dev": 0}
    if d.annotate == "none":
        return train, dev, None, None, bad
    train, train_parses, c = annotate_split(cfg, train, d.train_src, d.train_conllu, log)
    bad["train"] = c["bad_tree"]
    dev, dev_parses, c = annotate_split(cfg, dev, d.dev_src, d.dev_conllu, log)
    bad["dev"] = c["bad_tree"]
    return train, dev, train_parses, dev_parses, bad


def _train_subwords(cfg: Config, src_text: list[str], tgt_text: list[str], log) -> None:
    """SentencePiece model(s) on the text the model sees, joint or one per language."""
    d = cfg.data
    src_spm, tgt_spm = spm_paths(cfg.prepared_dir, d)
    symbols = (SEP,) if d.train_docs else ()  # a document corpus: the separator of concatenation models
    if d.vocab == "word":
        log(f"word vocabulary ({'joint' if d.joint_vocab else 'separate'}, <= {d.vocab_size} words)")
        for path, text in ((src_spm, src_text + tgt_text),) if d.joint_vocab else ((src_spm, src_text), (tgt_spm, tgt_text)):
            train_word_vocab(text, path, d.vocab_size, symbols)
        return
    spm_args = dict(vocab_size=d.vocab_size, model_type=d.spm_model_type, character_coverage=d.spm_character_coverage, max_sentences=d.spm_max_sentences, seed=cfg.seed, symbols=symbols)
    log(f"training SentencePiece ({d.spm_model_type}, {'joint' if d.joint_vocab else 'separate'}, vocab <= {d.vocab_size})")
    if d.joint_vocab:
        train_sentencepiece(src_text + tgt_text, src_spm, **spm_args)
    else:
        train_sentencepiece(src_text, src_spm, **spm_args)
        train_sentencepiece(tgt_text, tgt_spm, **spm_args)


def prepared_arrays(folder: Path) -> list[Path]:
    """The arrays ``prepare`` writes in ``folder`` (``{train,dev}.FIELD.{data,offsets}.npy``), and
    nothing else: a rebuild removes these only, whatever else ``data.prepared_dir`` holds."""
    fields = {"src", "src_word", "tgt", "heads", "align", "tgt_word", "doc", *TAG_NAMES}
    names = {f"{split}.{field}.{part}.npy" for split in ("train", "dev") for field in fields for part in ("data", "offsets")}
    return [p for p in folder.glob("*.npy") if p.name in names]


def prepare(cfg: Config, force: bool = False, log=print) -> dict:
    """Build (or reuse) the prepared corpus of ``cfg``; returns the counts written to ``meta.json``."""
    d = cfg.data
    out = cfg.prepared_dir
    if not force:  # with --force a damaged cache is not read: it is rebuilt
        if is_prepared(cfg):
            load_tokenizers(cfg)  # a damaged file of the cache is an error here, not a silent "up to date"
            for split in ("train", "dev"):
                Split.load(out, split)
            log(f"prepared corpus up to date in {out}")
            return read_meta(out)["counts"]
        if (out / META).is_file() and stale_reason(cfg):
            log(f"rebuilding the prepared corpus in {out}: {stale_reason(cfg)}")
    for key in ("train_src", "train_tgt", "dev_src", "dev_tgt"):
        if not getattr(d, key):
            raise UserError(f"data.{key} is not set in the config")
    digests = input_digests(d)  # before reading: a file changed during prepare is stale next time
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    (out / META).unlink(missing_ok=True)  # the cache is invalid until this run completes
    for stale in prepared_arrays(out):  # a field of the previous build (e.g. parses) must not linger
        stale.unlink()

    train, dev, train_parses, dev_parses, bad = _read_splits(cfg, log)
    tags = None
    if train_parses is not None:
        tags = TagVocab.from_parses(train_parses)  # the real inventories: the controls permute them
        atomic_write_text(out / TAGS, json.dumps(tags.itos, indent=1, ensure_ascii=False))
        if d.structure_control != "none":
            log(f"structure control {d.structure_control}: the parses of the train and dev splits replaced (syntaxnmt.data.controls)")
            train_parses = apply_controls(train_parses, d.structure_control, tags)
            dev_parses = apply_controls(dev_parses, d.structure_control, tags)
    else:
        (out / TAGS).unlink(missing_ok=True)

    # SentencePiece is trained on the text the model sees.
    src_text, tgt_text = model_words(cfg, train, train_parses)
    _train_subwords(cfg, src_text, tgt_text, log)
    toks = load_tokenizers(cfg)

    # Train split: encode and filter by length.
    src_ids, src_words = _encode_source(toks.src, train, train_parses)
    tgt_ids = toks.tgt.sp.encode(tgt_text)
    keep, dropped = length_filter([len(s) for s in src_ids], [len(t) for t in tgt_ids], d.min_len, d.max_len, d.max_len_ratio)
    _save_split(out, "train", src_ids, src_words, tgt_ids, train_parses, tags, keep)
    if d.train_align:
        n_links = _save_alignments(out, d.train_align, train, src_text, tgt_text, src_words, tgt_ids, toks.tgt, keep)
        log(f"{n_links} word links of {d.train_align} projected onto subwords")
    write_lines(out / "train.lines", [str(train.line_numbers[i]) for i in keep])
    if d.train_docs:
        _save_docs(out, "train", d.train_docs, d.train_src, train, keep)

    # Dev split: every non-empty pair is kept (validation BLEU is computed on the raw references).
    dev_src, dev_words = _encode_source(toks.src, dev, dev_parses)
    dev_tgt = toks.tgt.encode_batch(dev.tgt)
    _save_split(out, "dev", dev_src, dev_words, dev_tgt, dev_parses, tags, range(len(dev.src)))
    if d.dev_docs:
        _save_docs(out, "dev", d.dev_docs, d.dev_src, dev, range(len(dev.src)))
    write_lines(out / "dev.ref", dev.tgt)
    write_lines(out / "dev.raw_src", dev.src)

    counts = {
        "train_read": train.counts["read"],
        "train_empty": train.counts["empty"],
        "train_bad_tree": bad["train"],
        **{f"train_{k}": v for k, v in dropped.items()},
        "train_kept": len(keep),
        "train_src_subwords": sum(len(src_ids[i]) for i in keep),
        "train_tgt_subwords": sum(len(tgt_ids[i]) for i in keep),
        "dev_read": dev.counts["read"],
        "dev_empty": dev.counts["empty"],
        "dev_bad_tree": bad["dev"],
        "dev_kept": len(dev.src),
        "src_vocab": len(toks.src),
        "tgt_vocab": len(toks.tgt),
    }
    meta = {"data_config": _fingerprint(d), "inputs": digests, "counts": counts}
    atomic_write_text(out / META, json.dumps(meta, indent=2))
    log(format_counts(counts))
    return counts


def format_counts(c: dict) -> str:
    bad = f", {c['train_bad_tree']} bad trees" if c.get("train_bad_tree") else ""
    return (
        f"train: {c['train_read']} pairs read, {c['train_empty']} empty{bad}, {c['train_too_short']} too short, "
        f"{c['train_too_long']} too long, {c['train_bad_ratio']} bad length ratio -> {c['train_kept']} kept "
        f"({c['train_src_subwords']} src / {c['train_tgt_subwords']} tgt subwords); "
        f"dev: {c['dev_kept']} kept ({c['dev_empty']} empty{', %d bad trees' % c['dev_bad_tree'] if c.get('dev_bad_tree') else ''}); "
        f"vocab src {c['src_vocab']}, tgt {c['tgt_vocab']}"
    )


def load_split(cfg: Config, name: str) -> Split:
    reason = stale_reason(cfg)
    if reason:
        raise UserError(f"{cfg.prepared_dir}: {reason}; re-run `syntaxnmt prepare`")
    if not is_prepared(cfg):
        raise UserError(f"{cfg.prepared_dir}: no prepared corpus for this data config (run `syntaxnmt prepare`)")
    return Split.load(cfg.prepared_dir, name)
