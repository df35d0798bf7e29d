"""Tests for syntaxnmt.decoding.documents: HAN document translation in waves, with constraints (issue 52)."""

from __future__ import annotations

import pytest
from conftest import deep_merge, quiet, tiny_tree, write_doc_ids
from test_cli import run_cli
from test_output import _contains

from syntaxnmt.api import Translator
from syntaxnmt.config import load_config
from syntaxnmt.textio import read_lines


@pytest.fixture(scope="module")
def han_both_checkpoint(corpus, tmp_path_factory) -> str:
    """A HAN model on both sides (it reads its own translations of the previous sentences: the
    documents are translated in waves), trained for 6 updates on documents of 3 lines."""
    from syntaxnmt.training.train import train

    work = tmp_path_factory.mktemp("han_both")
    docs = write_doc_ids(corpus, work, 3)
    tree = deep_merge(tiny_tree(corpus, work / "run", work / "prepared"), {"data": {"train_docs": str(docs["train"]), "dev_docs": str(docs["dev"])}, "model": {"context": {"kind": "han", "sentences": 2, "side": "both"}}, "train": {"max_steps": 6}})
    cfg = load_config(None, tree)
    train(cfg, log=quiet)
    return f"{cfg.work_dir}/best.pt"


def test_a_han_model_meets_every_constraint_in_its_document_waves(han_both_checkpoint, corpus, tmp_path, capsys):
    """``translate --docs --constraints``: every sentence of every wave writes its phrases, the
    later sentences reading the constrained translations before them; the API gives the same."""
    lines = [" ".join(s.split()[:8]) for s in read_lines(corpus["test"]["src"])[:6]]
    ids = ["a", "a", "a", "b", "c", "c"]
    cons = [["mado"], [], ["sono kawa", "tomo"], ["isha"], [], ["onna"]]
    src, cfile, dfile = tmp_path / "in.txt", tmp_path / "cons.txt", tmp_path / "docs.txt"
    src.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    cfile.write_text("".join("\t".join(c) + "\n" for c in cons), encoding="utf-8")
    dfile.write_text("".join(f"{x}\n" for x in ids), encoding="utf-8")
    code, out, err = run_cli(capsys, "translate", "--checkpoint", han_both_checkpoint, "-i", src, "--docs", dfile, "--beam", 3, "--constraints", cfile)
    assert code == 0, err
    texts = out.splitlines()
    for text, phrases in zip(texts, cons):
        for p in phrases:
            assert _contains(text, p) >= 1, (text, phrases)
    translator = Translator.from_checkpoint(han_both_checkpoint, device="cpu")
    assert [t.text for t in translator.translate(lines, beam=3, docs=ids, constraints=cons)] == texts
    plain = [t.text for t in translator.translate(lines, beam=3, docs=ids)]
    assert plain != texts  # the constraints reached the search
