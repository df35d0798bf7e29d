"""Scoring given translations and contrastive accuracy."""

from __future__ import annotations

import math

import pytest
import torch

from syntaxnmt.decoding.loading import load_model
from syntaxnmt.decoding.scoring import ScoredPair, contrastive_result, swap_contexts, target_nll


def test_contrastive_accuracy_on_four_hand_made_items():
    result = contrastive_result(
        candidates=[2, 2, 3, 2],
        correct=[0, 1, 2, 0],
        scores=[[1.0, 2.0], [1.0, 2.0], [5.0, 4.0, 3.0], [7.0, 7.0]],  # right, wrong, right, a tie (wrong)
        cells=["pronoun/1", "pronoun/1", "tense/2", "tense/2"],
    )
    assert (result.correct, result.items, result.ties) == (2, 4, 1)
    assert result.accuracy == 0.5
    assert result.chance == pytest.approx((0.5 + 0.5 + 1 / 3 + 0.5) / 4)
    assert result.cells["pronoun/1"] == {"accuracy": 0.5, "items": 2, "chance": 0.5}
    assert result.cells["tense/2"]["accuracy"] == 0.5
    assert result.as_json()["tie_rate"] == 0.25
    assert result.as_json()["outcomes"] == [1, 0, 1, 0]  # per item, in order: the tie fails
    assert "accuracy 50.0% (2/4)" in result.table()


def test_the_other_document_control_borrows_from_another_document():
    docs = ["a", "a", "b", "c", "c"]
    swapped = swap_contexts(docs, seed=3)
    assert all(docs[j] != docs[i] for i, j in enumerate(swapped))
    assert swapped == swap_contexts(docs, seed=3)


def test_target_nll_is_the_sum_of_the_token_log_probabilities(trained_run):
    model, cfg, toks = load_model(f"{trained_run.work_dir}/best.pt", torch.device("cpu"))
    pairs = [ScoredPair("the dog sees a cat .", "a b c"), ScoredPair("a man sleeps .", "x")]
    nll = target_nll(model, toks, pairs, torch.device("cpu"))
    # By hand: teacher forcing one step at a time with the incremental decoder.
    from syntaxnmt.data.batches import make_batch
    from syntaxnmt.inputs import BOS, EOS

    for pair, value in zip(pairs, nll):
        src, tgt = toks.src.encode(pair.src), toks.tgt.encode(pair.tgt)
        batch = make_batch([src], None, [0])
        with torch.no_grad():
            state = model.init_state(model.encode(batch))
            total, prev = 0.0, BOS
            for token in tgt + [EOS]:
                logp, state = model.step(torch.tensor([prev]), state)
                total -= float(logp[0, token])
                prev = token
        assert value == pytest.approx(total, rel=1e-4)
        assert math.isfinite(value) and value > 0


def test_several_draws_count_every_item_and_donor_as_a_trial():
    result = contrastive_result(candidates=[2, 2, 2, 2], correct=[0, 0, 0, 0], scores=[[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [1.0, 2.0]], cells=["p", "p", "p", "p"], draws=2)
    assert (result.items, result.trials, result.correct, result.accuracy) == (2, 4, 3, 0.75)
    assert result.cells["p"]["items"] == 2 and result.as_json()["draws"] == 2
    assert result.outcomes == [2, 1]  # trials draw by draw: item 0 passed both draws, item 1 one
    assert "3/4: 2 items x 2 other documents" in result.table()


def test_the_other_document_control_draws_independent_donors(monkeypatch):
    """--draws R: every item is scored R times, each time with the context of an item of another
    document, drawn with seeds 0..R-1 (seed 0 is the one-draw control)."""
    from syntaxnmt.data.contrastive import ContrastiveItem
    from syntaxnmt.decoding import scoring

    items = [ContrastiveItem(f"s{i}", ("a", "b"), 0, (f"ctx{i}",), (f"t{i}",), phenomenon="p", distance=1, doc=f"d{i // 2}") for i in range(8)]
    seen = []
    monkeypatch.setattr(scoring, "target_nll", lambda model, toks, pairs, device, batch_size: seen.extend(pairs) or [float(p.tgt == "b") for p in pairs])
    result = scoring.score_contrastive(None, None, items, torch.device("cpu"), context="other-document", draws=3)
    assert (result.items, result.draws, result.accuracy) == (8, 3, 1.0)
    for i, item in enumerate(items):
        donors = [p.context_src[0] for p in seen if p.src == item.src and p.tgt == "a"]
        assert len(donors) == 3 and all(int(d[3:]) // 2 != i // 2 for d in donors)
    first = [p.context_src[0] for p in seen[: 2 * len(items)] if p.tgt == "a"]
    assert first == [f"ctx{j}" for j in swap_contexts([it.doc for it in items], 0)]
    with pytest.raises(Exception, match="--draws"):
        scoring.score_contrastive(None, None, items, torch.device("cpu"), context="true", draws=2)


def test_a_sentence_model_scores_the_same_with_any_context(trained_run):
    """The controls only change what a context model reads: a sentence-level model's accuracy and
    scores are the same with the true context, another document's, or none."""
    from syntaxnmt.data.contrastive import ContrastiveItem
    from syntaxnmt.decoding.scoring import score_contrastive

    model, cfg, toks = load_model(f"{trained_run.work_dir}/best.pt", torch.device("cpu"))
    items = [
        ContrastiveItem("the dog sees a cat .", ("a b", "a c"), i % 2, (f"context {i}",), (f"ctx {i}",), phenomenon="p", distance=1 + i % 2, doc=f"d{i // 2}")
        for i in range(6)
    ]
    results = {mode: score_contrastive(model, toks, items, torch.device("cpu"), context=mode) for mode in ("true", "other-document", "none")}
    assert len({r.correct for r in results.values()}) == 1
    assert results["true"].items == 6 and results["true"].chance == 0.5
    assert set(results["true"].cells) == {"p / distance 1", "p / distance 2"}
    with pytest.raises(Exception, match="--context"):
        score_contrastive(model, toks, items, torch.device("cpu"), context="bogus")


def test_score_command_prints_accuracy_and_writes_json(tmp_path, capsys):
    """`syntaxnmt score` on the synthetic discourse set: a context-free model is at chance in every
    cell by construction (balanced twins), with any context control; the JSON has the figures."""
    import json

    from conftest import deep_merge, quiet, tiny_tree
    from test_cli import assert_one_line_error, run_cli

    from syntaxnmt.config import load_config
    from syntaxnmt.data.discourse import write_documents
    from syntaxnmt.training.train import train

    files = write_documents(tmp_path / "corpus", n_train_docs=40, n_dev_docs=4, n_test_docs=24, seed=1)
    corpus = {s: {"src": files[s]["src"], "tgt": files[s]["tgt"]} for s in ("train", "dev")}
    cfg = load_config(None, deep_merge(tiny_tree(corpus, tmp_path / "run", tmp_path / "prepared"), {"train": {"max_steps": 4}}))
    train(cfg, log=quiet)
    results = {}
    for mode in ("true", "none", "other-document"):
        out = tmp_path / f"{mode}.json"
        draws = ("--draws", "2") if mode == "other-document" else ()
        code, stdout, err = run_cli(capsys, "score", "--checkpoint", f"{cfg.work_dir}/best.pt", "--contrastive", files["test"]["contrastive"], "--context", mode, *draws, "-o", out)
        assert code == 0, err
        assert "accuracy" in stdout and "chance 50.0%" in stdout
        results[mode] = json.loads(out.read_text())
    r = results["true"]
    assert r["chance"] == 0.5 and r["items"] == len(json.loads(files["test"]["contrastive"].read_text())["items"])
    for cell in r["cells"].values():  # a context-free scorer gets exactly chance in every cell
        assert cell["accuracy"] == pytest.approx(0.5)
    assert results["none"]["accuracy"] == results["other-document"]["accuracy"] == r["accuracy"]
    assert results["other-document"]["draws"] == 2 and results["other-document"]["items"] == r["items"]
    for mode, res in results.items():  # the per-item outcomes the file keeps add up to its accuracy
        assert len(res["outcomes"]) == res["items"] and sum(res["outcomes"]) == res["correct"], mode
        assert max(res["outcomes"]) <= res["draws"]
    # -o is written before the table is printed: a closed stdout (`| head -2`) does not lose the file
    import syntaxnmt.cli as cli

    def closed(*_a, **_k):
        raise BrokenPipeError

    out = tmp_path / "piped.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "print", closed, raising=False)
        with pytest.raises(SystemExit):  # the CLI's quiet exit for a reader that went away
            cli.main(["score", "--checkpoint", f"{cfg.work_dir}/best.pt", "--contrastive", str(files["test"]["contrastive"]), "-o", str(out)])
    assert json.loads(out.read_text())["outcomes"] == results["true"]["outcomes"]
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    code, _, err = run_cli(capsys, "score", "--checkpoint", f"{cfg.work_dir}/best.pt", "--contrastive", bad)
    assert_one_line_error(code, err, "bad.json")
