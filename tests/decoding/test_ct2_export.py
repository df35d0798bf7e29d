"""``syntaxnmt export-ct2``: what CTranslate2 can represent is exported (files, quantization),
what it cannot is refused with one line naming it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import syntaxnmt.decoding.ct2_export as ct2_export
from syntaxnmt.checkpoint import save_checkpoint
from syntaxnmt.data.prepare import load_tokenizers
from syntaxnmt.decoding.ct2_engine import CT2Engine
from syntaxnmt.decoding.ct2_export import CONFIG_FILE, MARKER, SOURCE_TOKENIZER, TARGET_TOKENIZER, export_ct2, unsupported
from syntaxnmt.decoding.loading import checkpoint_path
from syntaxnmt.errors import UserError
from syntaxnmt.model import build_model
from tests.conftest import parsed_data, write_doc_ids

pytest.importorskip("ctranslate2")


def syntaxnmt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "syntaxnmt", *args], capture_output=True, text=True)


def model_of(cfg):
    return build_model(cfg, **load_tokenizers(cfg).vocab_sizes())


def export_refused(cfg, tmp_path) -> str:
    """``syntaxnmt export-ct2`` of a checkpoint of ``cfg``'s model: exit 2, nothing written; its stderr."""
    ckpt = tmp_path / "model.pt"
    save_checkpoint(ckpt, {"config": cfg.model_dump(mode="json"), "model": model_of(cfg).state_dict()})
    r = syntaxnmt("export-ct2", "--checkpoint", str(ckpt), "-o", str(tmp_path / "out"))
    assert r.returncode == 2
    assert not (tmp_path / "out").exists()
    return r.stderr


def test_tree_relation_model_refused_in_one_line(make_config, corpus, parsed_prepared_dir, tmp_path):
    cfg = make_config({"data": parsed_data(corpus), "model": {"syntax": {"relations": [["tree_distance", "none", "none", "none"]]}}}, prepared_dir=parsed_prepared_dir)
    assert export_refused(cfg, tmp_path) == "syntaxnmt: error: CTranslate2 cannot represent tree relations (model.syntax.relations: tree_distance)\n"


def context_config(make_config, corpus, parsed_prepared_dir, tmp_path, kind, side):
    docs = write_doc_ids(corpus, tmp_path, per_doc=3)
    data = {**parsed_data(corpus), "train_docs": str(docs["train"]), "dev_docs": str(docs["dev"])}
    return make_config({"data": data, "model": {"context": {"kind": kind, "side": side}}}, prepared_dir=parsed_prepared_dir)


@pytest.mark.parametrize("kind, side", [("han", "both"), ("concat", "source")])
def test_document_context_models_are_refused_naming_their_kind(make_config, corpus, parsed_prepared_dir, tmp_path, kind, side):
    """A HAN model would export without its HAN blocks, a concatenation model without its <sep>-joined documents."""
    cfg = context_config(make_config, corpus, parsed_prepared_dir, tmp_path, kind, side)
    assert unsupported(build_model(cfg, src_vocab=40, tgt_vocab=40), cfg) == f"a document-context model (model.context.kind: {kind}; CTranslate2 translates sentences alone)"


def test_han_model_refused_in_one_line(make_config, corpus, parsed_prepared_dir, tmp_path):
    cfg = context_config(make_config, corpus, parsed_prepared_dir, tmp_path, "han", "both")
    assert export_refused(cfg, tmp_path) == "syntaxnmt: error: CTranslate2 cannot represent a document-context model (model.context.kind: han; CTranslate2 translates sentences alone)\n"


@pytest.mark.parametrize(
    "model, train, refused",
    [
        ({"arch": "rnn"}, {}, "model.arch rnn"),
        ({"syntax": {"qk_source": [["upos", "word", "word", "word"]]}}, {}, "linguistic heads (model.syntax.qk_source)"),
        ({"syntax": {"parent_scaled": [[True, False, False, False]]}}, {}, "parent-scaled heads"),
        ({"syntax": {"input_features": ["upos"]}}, {}, "input features (model.syntax.input_features: upos)"),
        ({"syntax": {"relations": [["linear", "none", "linear", "linear"]]}, "positions": "none"}, {}, "relative positions on some heads or layers only"),
        ({"syntax": {"relations": [["linear"] * 4]}}, {}, "relative positions together with absolute positions (model.positions: sinusoidal"),
        ({}, {"multitask": {"lisa": {"weight": 1.0, "inject_parse": True}}}, "attention extensions in encoder layer 0 (ParentAttention"),
        ({"attention_normalizer": "entmax15"}, {}, "model.attention_normalizer entmax15"),
        ({"hard_attention": "decode"}, {}, "model.hard_attention decode"),
        ({"syntax": {"relations": [["linear"] * 4]}, "positions": "none"}, {}, None),
        ({}, {"multitask": {"pos": {"weight": 1.0}, "parse": {"weight": 1.0}}}, None),  # training-only classifiers
        ({}, {"alignment": {"guided_weight": 1.0, "layer": 0, "head": 0, "leaky": True}}, "a leak slot in the cross-attention"),
        ({}, {"alignment": {"guided_weight": 1.0, "layer": 0, "head": 0, "leaky": True, "full_context": True}}, None),  # the leak is in the alignment pass only
    ],
)
def test_what_ctranslate2_cannot_represent(make_config, corpus, parsed_prepared_dir, model, train, refused):
    align = {"train_align": str(corpus["train"]["align"])} if "alignment" in train else {}
    cfg = make_config({"data": {**parsed_data(corpus), **align}, "model": model, "train": train}, prepared_dir=parsed_prepared_dir)
    why = unsupported(model_of(cfg), cfg)
    assert why == refused if refused is None else why.startswith(refused)


def test_multitask_model_exports(make_config, corpus, parsed_prepared_dir, tmp_path):
    cfg = make_config({"data": parsed_data(corpus), "train": {"multitask": {"pos": {"weight": 1.0}}}}, prepared_dir=parsed_prepared_dir)
    ckpt = tmp_path / "mtl.pt"
    model = model_of(cfg)
    assert any(k.startswith("multitask.") for k in model.state_dict())
    save_checkpoint(ckpt, {"config": cfg.model_dump(mode="json"), "model": model.state_dict()})
    out = export_ct2(ckpt, tmp_path / "ct2")
    assert (out / "model.bin").is_file()


def test_export_files_and_quantization(trained_run, tmp_path):
    ckpt = checkpoint_path(trained_run, "best")
    fp32 = export_ct2(ckpt, tmp_path / "fp32")
    int8 = export_ct2(ckpt, tmp_path / "int8", "int8")
    for out in (fp32, int8):
        assert {"model.bin", "config.json", CONFIG_FILE, SOURCE_TOKENIZER, TARGET_TOKENIZER} <= {p.name for p in out.iterdir()}
        ct2_config = json.loads((out / "config.json").read_text())
        assert ct2_config["add_source_eos"] is True and ct2_config["layer_norm_epsilon"] == 1e-5
    assert json.loads((int8 / CONFIG_FILE).read_text())["quantization"] == "int8"
    assert (int8 / "model.bin").stat().st_size < (fp32 / "model.bin").stat().st_size
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_existing_folder_needs_force_and_force_replaces_only_an_export(trained_run, tmp_path):
    ckpt = checkpoint_path(trained_run, "best")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    r = syntaxnmt("export-ct2", "--checkpoint", str(ckpt), "-o", str(out))
    assert r.returncode == 2 and r.stderr.startswith(f"syntaxnmt: error: {out}: exists") and r.stderr.count("\n") == 1
    r = syntaxnmt("export-ct2", "--checkpoint", str(ckpt), "-o", str(out), "--force")  # not an export: kept
    assert r.returncode == 2 and r.stderr.startswith(f"syntaxnmt: error: {out}: not written by `syntaxnmt export-ct2`") and r.stderr.count("\n") == 1
    assert (out / "keep.txt").read_text() == "x" and not (out / "model.bin").exists()
    new = tmp_path / "new"
    r = syntaxnmt("export-ct2", "--checkpoint", str(ckpt), "-o", str(new))
    assert r.returncode == 0, r.stderr
    assert json.loads((new / MARKER).read_text())["written_by"] == "syntaxnmt export-ct2"
    r = syntaxnmt("export-ct2", "--checkpoint", str(ckpt), "-o", str(new), "--force", "--quantization", "int8")  # an export: replaced
    assert r.returncode == 0, r.stderr
    assert json.loads((new / CONFIG_FILE).read_text())["quantization"] == "int8" and (new / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out"]  # no temporary folder left


def test_not_an_export_is_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    r = syntaxnmt("translate", "--checkpoint", str(tmp_path / "dir"), "--engine", "ctranslate2")
    assert r.returncode == 2
    assert r.stderr == f"syntaxnmt: error: {tmp_path / 'dir'}: not a syntaxnmt CTranslate2 export (no {CONFIG_FILE}; run `syntaxnmt export-ct2`)\n"


def test_a_failed_write_names_the_folder_asked_for_not_its_temporary(trained_run, tmp_path, monkeypatch):
    """The export is built in a temporary folder beside ``-o``; a full disk named that folder (issue 25)."""
    def full_disk(model, cfg, toks, out, quantization="float32"):
        raise OSError(28, "No space left on device", str(out / "model.bin"))

    monkeypatch.setattr(ct2_export, "write_export", full_disk)
    ckpt = checkpoint_path(trained_run, "best")
    with pytest.raises(UserError) as info:
        export_ct2(ckpt, tmp_path / "out")
    assert str(info.value) == f"{tmp_path / 'out'}: cannot write the export (No space left on device)"
    assert list(tmp_path.iterdir()) == []  # no temporary folder left
    with pytest.raises(UserError) as info:  # translate --engine ctranslate2 --checkpoint X.pt converts X.pt in a scratch folder
        CT2Engine(ckpt)
    assert str(info.value) == f"{ckpt}: converting it for CTranslate2: a temporary folder: cannot write the export (No space left on device)"
