"""``POST /translate`` with ``{"documents": [[...], ...]}``: each document is translated in order
with its context, as ``Translator.translate(docs=...)`` (and ``syntaxnmt translate --docs``) does;
a sentence-level model answers as for the sentences sent flat; the limits count every sentence;
malformed document requests are 422s."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import deep_merge, quiet, tiny_tree
from fastapi.testclient import TestClient

from syntaxnmt.api import Translator
from syntaxnmt.config import load_config
from syntaxnmt.serving.server import Limits, create_app
from syntaxnmt.textio import read_lines

LIMITS = Limits(max_sentences=8, max_chars=200, max_beam=6, max_attention_sentences=4, max_work=400, timeout=60)


@pytest.fixture(scope="module")
def han_checkpoint(corpus, tmp_path_factory) -> str:
    return _train_han(corpus, tmp_path_factory, "source")


@pytest.fixture(scope="module")
def han_both_checkpoint(corpus, tmp_path_factory) -> str:
    """HAN on both sides: the decoder also reads its own translations of the previous sentences."""
    return _train_han(corpus, tmp_path_factory, "both")


def _train_han(corpus, tmp_path_factory, side: str) -> str:
    from syntaxnmt.training.train import train

    work = tmp_path_factory.mktemp(f"serve_han_{side}")
    docs = {}
    for split in ("train", "dev"):
        n = len(read_lines(corpus[split]["src"]))
        docs[split] = work / f"{split}.docs"
        docs[split].write_text("".join(f"{split}{i // 3}\n" for i in range(n)))
    tree = deep_merge(tiny_tree(corpus, work / "run", work / "prepared"), {"data": {"train_docs": str(docs["train"]), "dev_docs": str(docs["dev"])}, "model": {"context": {"kind": "han", "sentences": 2, "side": side}}, "train": {"max_steps": 6}})
    cfg = load_config(None, tree)
    train(cfg, log=quiet)
    return f"{cfg.work_dir}/best.pt"


@pytest.fixture(scope="module")
def documents(corpus) -> list[list[str]]:
    lines = [" ".join(s.split()[:8]) for s in read_lines(corpus["test"]["src"])[:6]]  # short: within the work budget
    return [lines[:3], lines[3:4], lines[4:6]]


@pytest.fixture(scope="module")
def han_client(han_checkpoint):
    with TestClient(create_app(han_checkpoint, device="cpu", parser="none", limits=LIMITS)) as c:
        yield c


@pytest.fixture(scope="module")
def sentence_client(trained_run):
    with TestClient(create_app(f"{trained_run.work_dir}/best.pt", device="cpu", parser="none", limits=LIMITS)) as c:
        yield c


def post(client, body):
    return client.post("/translate", content=json.dumps(body), headers={"content-type": "application/json"})


def test_documents_are_translated_with_their_context_as_the_python_api_does(han_client, han_checkpoint, documents):
    r = post(han_client, {"documents": documents, "beam": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"translations", "scores"}
    assert [len(d) for d in body["translations"]] == [len(d) for d in body["scores"]] == [3, 1, 2]  # the request's nesting
    flat = [s for doc in documents for s in doc]
    ids = [f"doc{n}" for n, doc in enumerate(documents) for _ in doc]
    expected = Translator.from_checkpoint(han_checkpoint, device="cpu").translate(flat, beam=2, docs=ids)
    assert [t for doc in body["translations"] for t in doc] == [t.text for t in expected]
    assert [s for doc in body["scores"] for s in doc] == pytest.approx([t.score for t in expected], abs=1e-5)
    # The context reached the model: a sentence with previous sentences scores differently alone.
    alone = post(han_client, {"sentences": flat, "beam": 2}).json()
    firsts = {0, 3, 4}
    assert all(alone["scores"][i] == pytest.approx(s, abs=1e-5) for i, s in enumerate(x for d in body["scores"] for x in d) if i in firsts)
    assert any(alone["scores"][i] != pytest.approx(s, abs=1e-5) for i, s in enumerate(x for d in body["scores"] for x in d) if i not in firsts)


def test_documents_batched_together_keep_their_own_context(han_client, documents):
    served = han_client.app.state.translator
    together = served.documents(documents, 2)
    alone = [served.documents([doc], 2)[0] for doc in documents]
    # Same translations; the scores to float rounding (the batch's shape changes the products'
    # blocking: on an AVX2 EPYC the last bits differ, 1e-7).
    assert [[a.text for a in d] for d in together] == [[a.text for a in d] for d in alone]
    assert [a.score for d in together for a in d] == pytest.approx([a.score for d in alone for a in d], abs=1e-5)


def test_a_sentence_level_model_answers_documents_as_flat_sentences(sentence_client, documents):
    body = post(sentence_client, {"documents": documents, "beam": 2}).json()
    flat = post(sentence_client, {"sentences": [s for doc in documents for s in doc], "beam": 2}).json()
    assert [t for doc in body["translations"] for t in doc] == flat["translations"]
    assert [s for doc in body["scores"] for s in doc] == flat["scores"]


def test_document_attention_holds_hans_weights(han_client, documents):
    doc = documents[0][:2] + [""]
    body = post(han_client, {"documents": [doc], "beam": 2, "attention": True}).json()
    plain = post(han_client, {"documents": [doc], "beam": 2}).json()
    assert body["translations"] == plain["translations"] and body["scores"] == plain["scores"]
    first, second, empty = body["attention"][0]
    assert empty is None
    assert first["context"]["sources"] == [] and np.abs(first["context"]["han_gate"]).max() == 0
    assert second["context"]["sources"] == [doc[0]]
    weights = np.asarray(second["context"]["han_sentence"])  # (H, S, k): all on the one previous sentence
    assert weights.shape[1:] == (len(second["source"]["pieces"]), 2)
    np.testing.assert_allclose(weights[..., 0], 1.0, atol=1e-4)
    assert np.abs(weights[..., 1]).max() == 0


def test_documents_count_every_sentence_against_the_limits(han_client, documents):
    r = post(han_client, {"documents": [documents[0]] * 3, "beam": 1})  # 9 sentences, at most 8
    assert r.status_code == 413 and r.json()["error"] == "too many sentences: 9 (at most 8 per request)"
    r = post(han_client, {"documents": [["a"], ["b " * 150]]})
    assert r.status_code == 413 and r.json()["error"] == "sentence 0 of document 1 is too long: 300 characters (at most 200)"
    work = sum(han_client.app.state.translator.work([s for doc in documents for s in doc], 6))
    assert work > LIMITS.max_work
    r = post(han_client, {"documents": documents, "beam": 6})
    assert r.status_code == 413 and r.json()["work"] == work  # the work of every document together
    r = post(han_client, {"documents": documents[:2], "beam": 1, "attention": True})
    assert r.status_code == 200, r.text
    r = post(han_client, {"documents": [documents[0], documents[2]], "beam": 1, "attention": True})  # 5 sentences, at most 4
    assert r.status_code == 413 and "too many sentences for attention: 5" in r.json()["error"]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"sentences": ["a"], "documents": [["a"]]}, "give either sentences or documents, not both"),
        ({}, "give sentences (a list of strings) or documents"),
        ({"documents": []}, "documents: List should have at least 1 item"),
        ({"documents": [["a"], []]}, "documents: Value error, document 1 is empty: give every document at least one sentence"),
        ({"documents": ["a b"]}, "documents.0: Input should be a valid list"),
        ({"documents": [["a", 3]]}, "documents.0.1: Input should be a valid string"),
        ({"documents": [["\ud800"]]}, "sentence 0 of document 0 is not valid Unicode"),
        ({"documents": None}, "documents: Value error, give a list of documents (lists of strings), not null"),
        ({"sentences": None}, "sentences: Value error, give a list of strings, not null"),
    ],
)
def test_malformed_document_requests_are_422(han_client, body, message):
    r = post(han_client, body)  # json.dumps escapes the lone surrogate as \ud800
    assert r.status_code == 422, r.text
    assert message in r.json()["error"], r.json()["error"]


def test_a_target_side_han_model_translates_documents_in_order_from_its_own_translations(han_both_checkpoint, documents):
    """The same call as translate --docs: each sentence reads the model's translations of the
    previous ones (the first sentence of a document reads nothing and is as when sent alone)."""
    with TestClient(create_app(han_both_checkpoint, device="cpu", parser="none", limits=LIMITS)) as client:
        body = post(client, {"documents": documents, "beam": 2}).json()
        flat = [s for doc in documents for s in doc]
        ids = [f"doc{n}" for n, doc in enumerate(documents) for _ in doc]
        expected = Translator.from_checkpoint(han_both_checkpoint, device="cpu").translate(flat, beam=2, docs=ids)
        scores = [s for doc in body["scores"] for s in doc]
        assert [t for doc in body["translations"] for t in doc] == [t.text for t in expected]
        assert scores == pytest.approx([t.score for t in expected], abs=1e-5)
        alone = post(client, {"sentences": flat, "beam": 2}).json()["scores"]
        assert all(alone[i] == pytest.approx(scores[i], abs=1e-5) for i in (0, 3, 4))
        assert any(alone[i] != pytest.approx(scores[i], abs=1e-5) for i in (1, 2, 5))
        served = client.app.state.translator
        together, apart = served.documents(documents, 2), [served.documents([doc], 2)[0] for doc in documents]
        assert [[a.text for a in doc] for doc in together] == [[a.text for a in doc] for doc in apart]
        assert [a.score for doc in together for a in doc] == pytest.approx([a.score for doc in apart for a in doc], abs=1e-5)  # padding: float noise
        # Its weights are read with its own previous translations, those of the answer.
        r = post(client, {"documents": documents[:1], "beam": 2, "attention": True})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["translations"] == body["translations"][:1]
        for j, att in enumerate(answer["attention"][0]):
            context = att["context"]
            assert context["targets"] == answer["translations"][0][max(0, j - 2) : j][::-1]  # nearest first
            weights, gate = np.asarray(context["han_target_sentence"]), np.asarray(context["han_target_gate"])  # (H, T, k), (T,)
            assert weights.shape[1:] == (len(att["target"]["pieces"]), 2) and gate.shape == (len(att["target"]["pieces"]),)
            np.testing.assert_allclose(weights[..., :j].sum(-1), 1.0 if j else 0.0, atol=1e-3)
            assert np.abs(weights[..., j:]).max(initial=0) == 0 and (np.abs(gate).max() == 0) == (j == 0)


@pytest.mark.parametrize("flags", [{"alignments": True}, {"markup": True}, {"alignments": True, "markup": True}])
def test_documents_with_alignments_or_markup_are_refused_as_the_python_api_refuses_them(han_client, han_checkpoint, documents, flags):
    from syntaxnmt.errors import UserError

    with pytest.raises(UserError) as refused:
        Translator.from_checkpoint(han_checkpoint, device="cpu").translate(documents[0], docs=["d"] * len(documents[0]), alignments=True)
    r = post(han_client, {"documents": documents, "beam": 1, **flags})
    assert r.status_code == 422, r.text
    expected = str(refused.value) if "alignments" in flags else f"markup is put back through the alignments: {refused.value}"
    assert r.json()["error"] == expected


def test_documents_searched_in_forked_processes_give_the_threads_translations(han_both_checkpoint, documents, monkeypatch):
    """``decode.processes`` on a document model: each wave (the documents' first sentences, then
    their second ones, ...) is searched in processes forked after the previous wave's translations
    and states were stored, and gives what the threads give."""
    import torch

    import syntaxnmt.cpu.pools as pools

    forks = []
    real = pools._forked_pool
    monkeypatch.setattr(pools, "_forked_pool", lambda work, n: forks.append(n) or real(work, n))
    flat = [s for doc in documents for s in doc]
    ids = [f"doc{n}" for n, doc in enumerate(documents) for _ in doc]
    translator = Translator.from_checkpoint(han_both_checkpoint, device="cpu")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads = translator.translate(flat, beam=2, docs=ids, batch_size=1)
        assert not forks
        processes = translator.translate(flat, beam=2, docs=ids, batch_size=1, processes=True)
    finally:
        torch.set_num_threads(before)
    assert forks and set(forks) == {2}  # the waves of two or three sentences: two processes each
    assert [t.text for t in processes] == [t.text for t in threads]
    assert [t.score for t in processes] == pytest.approx([t.score for t in threads], abs=1e-6)
