"""Constrained decoding over HTTP (``"constraints"``, ``"terminology": true``): the translations
``syntaxnmt translate --constraints FILE --terminology DICT`` and ``Translator.translate`` give
for the same input, constraints travelling with their sentences through the worker's batches,
and every malformed or oversized list answered 422 before any search."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_cli import run_cli

from syntaxnmt.api import Translator
from syntaxnmt.data.links import format_links
from syntaxnmt.serving.server import Limits, TranslateRequest, create_app, request_job

LIMITS = Limits(max_sentences=8, max_chars=200, max_beam=6, max_attention_sentences=2, max_work=4000, timeout=60, max_constraints=3, max_constraint_chars=20)
# target phrases of the synthetic corpus's language (in its vocabulary), some sentences with none
PHRASES = [["mado"], [], ["kawa", "onna"], ["isha wo"], [], ["sono mado", "mado"], ["tomo"]]
TERMS = "# synthetic terms\nwindow\tmado\nthe river\tsono kawa\nfriend\ttomo\n"


def _contains(text: str, phrase: str) -> int:
    """How often ``phrase`` starts a word of ``text`` (as in tests/decoding/test_output.py)."""
    return len(re.findall(rf"(?:^| )(?={re.escape(phrase)})", text))


@pytest.fixture(scope="module")
def checkpoint(trained_run) -> Path:
    return Path(trained_run.work_dir) / "best.pt"


@pytest.fixture(scope="module")
def terms(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("terms") / "terms.tsv"
    path.write_text(TERMS, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def client(checkpoint, terms):
    with TestClient(create_app(checkpoint, device="cpu", parser="none", limits=LIMITS, terminology=terms)) as c:
        yield c


@pytest.fixture(scope="module")
def lines(corpus) -> list[str]:
    return corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[: len(PHRASES)]


def post(client, body):
    return client.post("/translate", content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize("terminology", [False, True], ids=["constraints", "constraints+terminology"])
def test_rest_gives_the_command_lines_and_the_apis_output(client, checkpoint, terms, lines, tmp_path, capsys, terminology):
    """REST = CLI = API on the same sentences and constraints (and dictionary), every phrase written."""
    src, cfile = tmp_path / "in.txt", tmp_path / "cons.txt"
    src.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    cfile.write_text("".join("\t".join(c) + "\n" for c in PHRASES), encoding="utf-8")
    flags = ["--terminology", terms] if terminology else []
    code, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "-i", src, "--beam", 4, "--constraints", cfile, *flags)
    assert code == 0, err
    cli = out.split("\n")[:-1]
    api = Translator.from_checkpoint(checkpoint, device="cpu").translate(lines, beam=4, constraints=PHRASES, terminology=terms if terminology else None)
    r = post(client, {"sentences": lines, "beam": 4, "constraints": PHRASES, **({"terminology": True} if terminology else {})})
    assert r.status_code == 200, r.text
    rest = r.json()["translations"]
    assert rest == cli == [t.text for t in api]
    assert r.json()["scores"] == pytest.approx([t.score for t in api], abs=1e-5)
    for text, phrases in zip(rest, PHRASES):
        for p in set(phrases):
            assert _contains(text, p) >= phrases.count(p), (text, phrases)
    plain = post(client, {"sentences": lines, "beam": 4}).json()["translations"]
    assert plain != rest  # the constraints made a difference
    if terminology:  # the dictionary's terms are required where their source terms occur, as the command requires them
        assert rest != post(client, {"sentences": lines, "beam": 4, "constraints": PHRASES}).json()["translations"]


def test_empty_constraints_and_an_unmatched_dictionary_leave_the_output_unchanged(client, lines):
    plain = post(client, {"sentences": lines, "beam": 3})
    empty = post(client, {"sentences": lines, "beam": 3, "constraints": [[] for _ in lines]})
    assert plain.status_code == empty.status_code == 200
    assert empty.json() == plain.json()
    unmatched = ["a zebra"]  # no source term of the dictionary
    assert post(client, {"sentences": unmatched, "beam": 3, "terminology": True}).json() == post(client, {"sentences": unmatched, "beam": 3}).json()


def test_constraints_travel_with_their_sentences_through_concurrent_batches(client, lines):
    """Requests with different constraints (and without) sent at once -- the worker batches those of a
    key together -- get the answers they get alone."""
    bodies = [{"sentences": [line], "beam": 3, "constraints": [p]} for line, p in zip(lines, PHRASES)] + [{"sentences": lines[:3], "beam": 3}]
    alone = [post(client, b).json() for b in bodies]
    together: list = [None] * len(bodies)

    def send(k: int) -> None:
        together[k] = post(client, bodies[k]).json()

    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [a["translations"] for a in together] == [a["translations"] for a in alone]
    for a, b in zip(together, alone):  # batched with others: the same search, sums in another order
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-5)
    for body, answer in zip(bodies[:-1], together):
        for p in body["constraints"][0]:
            assert _contains(answer["translations"][0], p) >= 1


def test_nbest_alignments_and_attention_with_constraints(client, checkpoint, lines):
    """Every candidate meets the constraints; the links are those the API gives for them."""
    r = post(client, {"sentences": lines[1:3], "beam": 4, "nbest": 2, "alignments": True, "attention": True, "constraints": PHRASES[1:3]})
    assert r.status_code == 200, r.text
    body = r.json()
    api = Translator.from_checkpoint(checkpoint, device="cpu").translate(lines[1:3], beam=4, nbest=2, alignments=True, constraints=PHRASES[1:3])
    for nb, t, phrases in zip(body["nbest"], api, PHRASES[1:3]):
        assert nb["translations"] == [c.text for c in t.nbest]
        assert nb["alignments"] == [format_links(c.alignment or ()) for c in t.nbest]
        for text in nb["translations"]:
            assert all(_contains(text, p) >= 1 for p in phrases)
    assert body["attention"][0]["translation"] == body["translations"][0]


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"constraints": "mado"}, "constraints: Input should be a valid list"),
        ({"constraints": ["mado"]}, "constraints.0: Input should be a valid list"),
        ({"constraints": [[1]]}, "constraints.0.0: Input should be a valid string"),
        ({"constraints": [[["mado"]]]}, "constraints.0.0: Input should be a valid string"),
        ({"constraints": [["mado"], []]}, "constraints: 2 lists for 1 sentences"),
        ({"constraints": [["mado", "kawa", "onna", "tomo"]]}, "constraints.0: 4 phrases, at most 3 per sentence"),
        ({"constraints": [["mado " * 5]]}, "constraints.0.0: a phrase of 25 characters, at most 20"),
        ({"constraints": [[" "]]}, "constraints.0: empty constraint"),
        ({"constraints": [["mado", "\u2603"]]}, "constraints.0: constraint '\u2603' has a piece outside the model's target vocabulary"),
        ({"constraints": [["sono mado kawa", "sono onna kawa", "isha wo mado"]]}, "more than the sentence's output length limit"),
        ({"terminology": "yes"}, "terminology: Input should be a valid boolean"),
    ],
)
def test_malformed_or_oversized_constraints_answer_422(client, extra, message):
    sentence = "a" if "output length limit" in message else "the river sees a window ."
    r = post(client, {"sentences": [sentence], "beam": 2, **extra})
    assert r.status_code == 422, r.text
    assert message in r.json()["error"], r.json()["error"]


def test_constraints_on_an_empty_sentence_or_with_documents_answer_422(client):
    r = post(client, {"sentences": ["a window .", " "], "constraints": [[], ["mado"]]})
    assert r.status_code == 422 and r.json()["error"].startswith("constraints.1: constraints for an empty sentence")
    r = post(client, {"documents": [["a window ."]], "constraints": [["mado"]]})
    assert r.status_code == 422 and "constraints and terminology go with sentences" in r.json()["error"]


def test_terminology_needs_a_server_started_with_a_dictionary(checkpoint, client, terms):
    with TestClient(create_app(checkpoint, device="cpu", parser="none", limits=LIMITS)) as bare:
        r = post(bare, {"sentences": ["a window ."], "terminology": True})
        assert r.status_code == 422 and "start it with syntaxnmt serve --terminology DICT.tsv" in r.json()["error"]
        assert bare.get("/health").json()["terminology"] is None
    health = client.get("/health").json()
    assert health["terminology"] == {"file": terms.name, "terms": 3}
    assert health["limits"]["max_constraints"] == 3 and health["limits"]["max_constraint_chars"] == 20


def test_serve_flags_bound_the_constraints_and_read_the_dictionary(capsys, checkpoint, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("window\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "serve", "--checkpoint", checkpoint, "--port", "0", "--terminology", bad)
    assert code == 2 and err.startswith(f"syntaxnmt: error: {bad}:1: expected 'source term<TAB>target term'"), err
    code, _, err = run_cli(capsys, "serve", "--checkpoint", checkpoint, "--max-constraints", "0")
    assert code == 2 and err == "syntaxnmt: error: --max-constraints must be at least 1, got 0\n"


class _CountingPieces:
    """The source tokenizer's SentencePiece model, recording every text it encodes."""

    def __init__(self, sp):
        self.sp, self.texts = sp, []

    def encode(self, text, *args, **kwargs):
        self.texts += [text] if isinstance(text, str) else list(text)
        return self.sp.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.sp, name)


def test_a_constrained_request_encodes_its_sentences_once(client, lines, monkeypatch):
    """The work bound and the constraints' length limits read one encoding of each sentence
    (they used to encode every constrained sentence twice before the search)."""
    model = client.app.state.translator
    counting = _CountingPieces(model.toks.src.sp)
    monkeypatch.setattr(model.toks.src, "sp", counting)
    sentences = lines[:3]
    job = request_job(TranslateRequest(sentences=sentences, constraints=PHRASES[:3], terminology=True, beam=2), model, LIMITS)
    assert job.key.constrained and [p for _, p in job.items][0][0] == "mado"
    assert sorted(counting.texts) == sorted(model.toks.src.normalize(s) for s in sentences)

