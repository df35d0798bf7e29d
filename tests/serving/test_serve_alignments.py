"""Word alignments and markup over HTTP (``"alignments": true``, ``"markup": true``): what
``syntaxnmt translate --alignments`` and ``--markup`` give for the same checkpoint and input,
within the server's work budget and checkpoints; with ``"nbest": N`` per hypothesis, as the
command line and the Python API give them."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from test_cli import NBEST_LINE, run_cli, write_lines

import syntaxnmt
from syntaxnmt.alignment.extract import configured_reading
from syntaxnmt.alignment.markup import parse_markup
from syntaxnmt.serving.server import JobKey, Limits, create_app
from syntaxnmt.serving.worker import Cancelled

LIMITS = Limits(max_sentences=8, max_chars=300, max_beam=6, max_attention_sentences=2, max_work=1500, timeout=60)


@pytest.fixture(scope="module")
def checkpoint(corpus, shared_prepared_dir, tmp_path_factory) -> Path:
    """An untrained model whose translations run to the length limit in many words (the
    12-update ``trained_run`` and most seeds say one long word), so links and tags have
    target words to choose from."""
    from conftest import tiny_tree, untrained_checkpoint

    from syntaxnmt.config import load_config

    tmp = tmp_path_factory.mktemp("aligned_serve")
    return untrained_checkpoint(load_config(None, tiny_tree(corpus, tmp / "run", shared_prepared_dir)), tmp / "untrained.pt", seed=1)


@pytest.fixture(scope="module")
def app(checkpoint):
    return create_app(checkpoint, device="cpu", parser="none", limits=LIMITS)


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def test_sentences(corpus) -> list[str]:
    return corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:12]


def post(client, body: dict):
    return client.post("/translate", content=json.dumps(body), headers={"content-type": "application/json"})


def cli_translate(capsys, checkpoint, path: Path, *options) -> list[str]:
    code, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "-i", path, "--beam", "3", *options)
    assert code == 0, err
    return out.splitlines()


# ---------------------------------------------------------------- alignments


def test_alignments_are_those_of_translate_alignments(capsys, client, checkpoint, test_sentences, tmp_path):
    sentences = test_sentences[:3] + [""] + test_sentences[3:7]
    links_file = tmp_path / "out.align"
    translations = cli_translate(capsys, checkpoint, write_lines(tmp_path / "in.txt", sentences), "--alignments", links_file)
    expected = links_file.read_text(encoding="utf-8").split("\n")[: len(sentences)]

    r = post(client, {"sentences": sentences, "beam": 3, "alignments": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"translations", "scores", "alignments", "alignment_words"}
    assert body["translations"] == translations
    assert sum(len(t.split()) > 1 for t in translations) >= 4  # what makes the comparison worth making
    assert body["alignments"] == expected
    assert body["alignments"][3] == "" and all(body["alignments"][k] for k in (0, 1, 2, 4, 5, 6, 7))
    # the links index the words given beside them, every target word linked (each piece's argmax)
    for links, words, translation in zip(body["alignments"], body["alignment_words"], body["translations"]):
        assert words["target"] == translation.split()
        pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert {j for _, j in pairs} == set(range(len(words["target"])))
        assert all(0 <= i < len(words["source"]) for i, _ in pairs)
    assert body["alignment_words"][3] == {"source": [], "target": []}

    # asking for the attention too changes nothing (two force-decodings of the same output)
    both = post(client, {"sentences": sentences[:2], "beam": 3, "alignments": True, "attention": True}).json()
    assert both["alignments"] == expected[:2] and both["translations"] == translations[:2]
    assert len(both["attention"]) == 2 and both["attention"][0]["translation"] == translations[0]


def test_health_names_the_attention_that_is_read_as_alignment(app, client):
    label = client.get("/health").json()["alignment"]
    assert label == configured_reading(app.state.translator.cfg).label == "all layers, heads averaged"


def test_alignments_double_the_work_and_count_against_the_budget(app, client, test_sentences):
    translator = app.state.translator
    s = test_sentences[0]
    pieces = len(translator.toks.src.encode(s))
    assert translator.work([s], 4, aligned=True) == [8 * (pieces + 1)]
    assert translator.work([s], 4, attention=True, aligned=True) == [12 * (pieces + 1)]
    heavy = test_sentences[:8]
    plain, aligned = sum(translator.work(heavy, 6)), sum(translator.work(heavy, 6, aligned=True))
    assert plain <= LIMITS.max_work < aligned  # what this test is about
    before = dict(app.state.worker.stats)
    r = post(client, {"sentences": heavy, "beam": 6, "markup": True})
    assert r.status_code == 413 and r.json()["work"] == aligned
    assert f"too much work: {aligned} (beam 6 x {aligned // 12} subword tokens with each sentence's </s>, x2 with alignments)" in r.json()["error"]
    assert app.state.worker.stats == before  # refused before reaching the model
    assert post(client, {"sentences": heavy, "beam": 6}).status_code == 200


def test_the_alignment_pass_calls_the_checkpoint_and_stops_when_it_raises(app, test_sentences):
    translator, calls = app.state.translator, []
    sentences = test_sentences[:3]
    translator.handle(JobKey(2), sentences, lambda: calls.append(1))
    search = len(calls)
    calls.clear()
    results = translator.handle(JobKey(2, alignments=True), sentences, lambda: calls.append(1))
    assert len(calls) > search and all(r.alignment["links"] for r in results)

    def stop_after_the_search():
        calls.append(1)
        if len(calls) > search:
            raise Cancelled("stop")

    calls.clear()
    with pytest.raises(Cancelled):
        translator.handle(JobKey(2, alignments=True), sentences, stop_after_the_search)
    assert len(calls) == search + 1


def test_concurrent_requests_with_and_without_alignments_get_the_answers_of_sequential_ones(app, client, test_sentences):
    """Requests of different kinds at once: the worker batches those that share a kind."""
    marked = [f"<b>{s.split()[0]}</b> " + " ".join(s.split()[1:]) for s in test_sentences[:4]]
    bodies = [
        {"sentences": test_sentences[i : i + 1 + i % 2], "beam": 2, **({"alignments": True} if i % 3 == 0 else {})} for i in range(8)
    ] + [{"sentences": marked[i : i + 1], "beam": 2, "markup": True, "alignments": i % 2 == 0} for i in range(4)]
    sequential = [post(client, b).json() for b in bodies]

    async def all_at_once():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await asyncio.gather(*(c.post("/translate", json=b) for b in bodies))

    answers = [a.json() for a in asyncio.run(all_at_once())]
    for answer, alone in zip(answers, sequential):  # scores may differ in the last digits with another batch
        assert answer["scores"] == pytest.approx(alone.pop("scores"), abs=1e-5)
        assert {k: v for k, v in answer.items() if k != "scores"} == alone
    assert all("alignments" in s for s, b in zip(sequential, bodies) if b.get("alignments"))


# ---------------------------------------------------------------- markup


def hand_marked(sentences: list[str]) -> list[str]:
    """Inline tags around words of real sentences: a pair around the first word, a link with an
    attribute around the last, a self-closing tag, and nested pairs."""
    out = []
    for k, line in enumerate(sentences):
        w = line.split()
        out.append(
            [
                f"<b>{w[0]}</b> " + " ".join(w[1:]),
                " ".join(w[:-1]) + f' <a href="https://example.org/?q=1&amp;r=2">{w[-1]}</a>',
                f"{w[0]} <br/> " + " ".join(w[1:]),
                f"<i>{w[0]} <b>{w[1]}</b></i> " + " ".join(w[2:]),
            ][k % 4]
        )
    return out


def test_markup_is_that_of_translate_markup(capsys, client, checkpoint, test_sentences, tmp_path):
    plain = test_sentences[:8]
    marked = hand_marked(plain)
    expected = cli_translate(capsys, checkpoint, write_lines(tmp_path / "in.txt", marked), "--markup")
    body = post(client, {"sentences": marked, "beam": 3, "markup": True, "alignments": True}).json()
    assert set(body) == {"translations", "scores", "alignments", "alignment_words"}
    assert body["translations"] == expected
    untagged = post(client, {"sentences": plain, "beam": 3, "alignments": True}).json()
    assert body["alignments"] == untagged["alignments"]  # the links are those of the text without tags
    checked = []
    for source, output, translation, links in zip(marked, body["translations"], untagged["translations"], untagged["alignments"]):
        assert parse_markup(output).plain == translation  # the tags removed: the translation of the text
        assert sorted(re.findall(r"<[^>]+>", output)) == sorted(re.findall(r"<[^>]+>", source))
        for word, opening, closing in (("0", "<b>", "</b>"), (str(len(parse_markup(source).plain.split()) - 1), "<a href=", "</a>")):
            if opening not in source or source.count("<") != 2:
                continue  # a pair around one word: it goes around the target words aligned to that word
            targets = [int(link.split("-")[1]) for link in links.split() if link.split("-")[0] == word]
            assert translation.split() == translation.lower().split()  # the links index these words
            start = output.index(">", output.index(opening)) + 1
            inside = output[start : output.index(closing)].split()
            assert inside == (translation.split()[min(targets) : max(targets) + 1] if targets else [])
            checked.append(bool(targets))
    assert True in checked  # a pair went around target words


def test_malformed_markup_is_422_with_the_message_of_translate_markup(capsys, client, checkpoint, tmp_path):
    cases = [("a <b>b", "<b> is never closed"), ("a < b", "'<' at column 3 starts no tag"), ("a </i> b", "</i> at column 3 closes no open tag"), ("<b><i>a</b></i>", "</b> at column 8 closes <i> (tags must nest)")]
    for line, message in cases:
        code, _, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "-i", write_lines(tmp_path / "bad.txt", ["fine", line]), "--markup")
        assert code == 2 and message in err
        cli_message = err.strip().removeprefix(f"syntaxnmt: error: {tmp_path / 'bad.txt'}:2: ")
        r = post(client, {"sentences": ["fine", line], "markup": True})
        assert r.status_code == 422 and r.headers["content-type"] == "application/json"
        assert r.json() == {"error": f"sentence 1: {cli_message}"}
        assert post(client, {"sentences": ["fine", line]}).status_code == 200  # without markup: text


@pytest.mark.parametrize("key,value", [("markup", "yes"), ("alignments", 1), ("alignments", None)])
def test_the_flags_are_booleans(client, key, value):
    r = post(client, {"sentences": ["a"], key: value})
    assert r.status_code == 422 and r.json()["error"].startswith(f"{key}: Input should be a valid boolean")


# ---------------------------------------------------------------- n-best


@pytest.fixture(scope="module")
def batch2_checkpoint(corpus, shared_prepared_dir, tmp_path_factory) -> Path:
    """The untrained model of :func:`checkpoint`, its config translating in batches of 2 (so
    the command line, the Python API and the server all search and align in batches of 2)."""
    from conftest import deep_merge, tiny_tree, untrained_checkpoint

    from syntaxnmt.config import load_config

    tmp = tmp_path_factory.mktemp("nbest_serve")
    cfg = load_config(None, deep_merge(tiny_tree(corpus, tmp / "run", shared_prepared_dir), {"decode": {"batch_size": 2}}))
    return untrained_checkpoint(cfg, tmp / "untrained.pt", seed=1)


@pytest.fixture(scope="module")
def batch2_client(batch2_checkpoint):
    with TestClient(create_app(batch2_checkpoint, device="cpu", parser="none", limits=LIMITS)) as c:
        yield c


def _nbest_cli(capsys, checkpoint, path: Path, *options) -> list[list[str]]:
    """Per input line, the texts ``translate --beam 4 --nbest 3`` prints, best first."""
    code, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "-i", path, "--beam", "4", "--nbest", "3", *options)
    assert code == 0, err
    grouped: list[list[str]] = []
    for m in map(NBEST_LINE.match, out.splitlines()):
        n = int(m.group(1))
        grouped += [[] for _ in range(n + 1 - len(grouped))]
        grouped[n].append(m.group(2))
    return grouped


def test_nbest_links_of_every_hypothesis_are_those_of_align_in_cli_api_and_rest(capsys, batch2_client, batch2_checkpoint, test_sentences, tmp_path):
    """Beam 4, n-best 3, batches of 2, an empty line among them: the links of every hypothesis
    equal ``syntaxnmt align --normalize`` on that hypothesis's text, and the command line, the
    Python API and the server give the same ones."""
    ckpt = batch2_checkpoint
    sentences = test_sentences[:2] + [""] + test_sentences[2:5]
    links_file = tmp_path / "out.align"
    cli = _nbest_cli(capsys, ckpt, write_lines(tmp_path / "in.txt", sentences), "--alignments", links_file)
    written = links_file.read_text(encoding="utf-8").splitlines()
    assert [len(h) for h in cli] == [3, 3, 1, 3, 3, 3] and cli[2] == [""]
    assert len(written) == sum(map(len, cli))
    pairs = [(sentences[n], text) for n, hyps in enumerate(cli) for text in hyps]
    assert all(len(set(h)) == 3 for h in cli if len(h) == 3)  # three different hypotheses per sentence
    assert sum(len(t.split()) > 1 for _, t in pairs) >= 8  # what makes the comparison worth making
    kept = [k for k, (s, t) in enumerate(pairs) if s and t]
    src, tgt = write_lines(tmp_path / "a.src", [pairs[k][0] for k in kept]), write_lines(tmp_path / "a.tgt", [pairs[k][1] for k in kept])
    code, out, err = run_cli(capsys, "align", "--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--normalize")
    assert code == 0, err
    assert [written[k] for k in kept] == out.splitlines() and all(written[k] for k in kept)
    assert written[6] == "" and pairs[6] == ("", "")
    per_sentence, at = [], 0
    for hyps in cli:
        per_sentence.append(written[at : at + len(hyps)])
        at += len(hyps)

    # the Python API: every candidate carries its own links, the best's also on the result
    results = syntaxnmt.Translator.from_checkpoint(ckpt, device="cpu").translate(sentences, beam=4, nbest=3, alignments=True)
    assert [[c.text for c in r.nbest] for r in results] == cli
    assert [[" ".join(f"{i}-{j}" for i, j in c.alignment or []) for c in r.nbest] for r in results] == per_sentence
    for r in results:
        assert (r.alignment, r.alignment_words) == (r.nbest[0].alignment, r.nbest[0].alignment_words)
        for c in r.nbest if r.source else []:
            assert c.alignment_words == (r.source.split(), c.text.split())  # lowercase text without Moses: its own tokens
    assert results[2].nbest[0].alignment is None

    # the server: "nbest" holds every candidate in the shape of the answer, its links the same
    body = post(batch2_client, {"sentences": sentences, "beam": 4, "nbest": 3, "alignments": True}).json()
    assert set(body) == {"translations", "scores", "alignments", "alignment_words", "nbest"}
    assert [n["translations"] for n in body["nbest"]] == cli
    assert [n["alignments"] for n in body["nbest"]] == per_sentence
    assert body["translations"] == [h[0] for h in cli] and body["alignments"] == [p[0] for p in per_sentence]
    assert [n["scores"] for n in body["nbest"]] == [[pytest.approx(c.score, abs=1e-5) for c in r.nbest] for r in results]
    assert body["nbest"][2] == {"translations": [""], "scores": [0.0], "alignments": [""], "alignment_words": [{"source": [], "target": []}]}
    assert body["nbest"][0]["alignment_words"][1] == {"source": sentences[0].split(), "target": cli[0][1].split()}


def test_nbest_markup_is_that_of_translate_markup_per_hypothesis(capsys, batch2_client, batch2_checkpoint, test_sentences, tmp_path):
    marked = hand_marked(test_sentences[:4])
    cli = _nbest_cli(capsys, batch2_checkpoint, write_lines(tmp_path / "in.txt", marked), "--markup")
    body = post(batch2_client, {"sentences": marked, "beam": 4, "nbest": 3, "markup": True}).json()
    assert set(body) == {"translations", "scores", "nbest"}
    assert [n["translations"] for n in body["nbest"]] == cli and body["translations"] == [h[0] for h in cli]
    plain = post(batch2_client, {"sentences": [parse_markup(m).plain for m in marked], "beam": 4, "nbest": 3}).json()
    for tagged, untagged, source in zip(body["nbest"], plain["nbest"], marked):
        assert [parse_markup(t).plain.split() for t in tagged["translations"]] == [t.split() for t in untagged["translations"]]  # each hypothesis tagged
        assert all(sorted(re.findall(r"<[^>]+>", t)) == sorted(re.findall(r"<[^>]+>", source)) for t in tagged["translations"])


def test_nbest_without_alignments_and_with_documents(client, test_sentences):
    sentences = test_sentences[:3]
    flat = post(client, {"sentences": sentences, "beam": 3, "nbest": 2}).json()
    alone = post(client, {"sentences": sentences, "beam": 3}).json()
    assert set(flat) == {"translations", "scores", "nbest"} and set(alone) == {"translations", "scores"}
    assert flat["translations"] == alone["translations"] == [n["translations"][0] for n in flat["nbest"]]
    assert all(set(n) == {"translations", "scores"} and len(n["translations"]) == 2 for n in flat["nbest"])
    one = post(client, {"sentences": sentences, "beam": 3, "nbest": 1}).json()
    assert [n["translations"] for n in one["nbest"]] == [[t] for t in alone["translations"]]
    # a sentence-level model answers documents as the same sentences sent flat, nested alike
    docs = post(client, {"documents": [sentences[:2], sentences[2:]], "beam": 3, "nbest": 2}).json()
    assert docs["nbest"] == [flat["nbest"][:2], flat["nbest"][2:]]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"beam": 2, "nbest": 3}, "nbest: 3 is out of range (1 to the beam, 2)"),
        ({"nbest": 4}, "nbest: 4 is out of range (1 to the beam, 3)"),  # the model's beam_size
        ({"nbest": 0}, "nbest: Input should be greater than or equal to 1"),
        ({"nbest": "2"}, "nbest: Input should be a valid integer"),
    ],
)
def test_nbest_out_of_range_is_422(client, body, message):
    r = post(client, {"sentences": ["a"], **body})
    assert r.status_code == 422 and r.json()["error"].startswith(message)
