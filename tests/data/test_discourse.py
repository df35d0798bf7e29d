"""The synthetic document corpus: files, agreement, and a contrastive set at exactly chance for
every scorer that reads only the current sentence (or a window that misses the cue)."""

from __future__ import annotations

import json
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from syntaxnmt.data.annotations import check_against_text, check_parse, read_conllu
from syntaxnmt.data.contrastive import chance, read_contrastive
from syntaxnmt.data.discourse import (
    ADVERB_TRANSLATIONS,
    AMBIGUOUS,
    ANTECEDENT_DETERMINER,
    CUE_TRANSLATIONS,
    CUES,
    DETERMINER_FORMS,
    MAX_DISTANCE,
    NOUN_GENDERS,
    PHENOMENA,
    PRONOUN,
    PRONOUN_FORMS,
    TENSE_ADVERBS,
    TENSE_MARKERS,
    write_documents,
)
from syntaxnmt.data.synthetic import LEXICON, NOUNS
from syntaxnmt.errors import UserError

SIZES = {"train": 90, "dev": 9, "test": 96}  # 48 twin pairs: every (phenomenon, distance) cell 4 times
CELLS = [(p, d) for p in PHENOMENA for d in range(1, MAX_DISTANCE + 1)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, dict[str, Path]]:
    return write_documents(tmp_path_factory.mktemp("documents"), SIZES["train"], SIZES["dev"], SIZES["test"], seed=3)


@pytest.fixture(scope="module")
def items(corpus) -> list[dict]:
    data = json.loads(corpus["test"]["contrastive"].read_text("utf-8"))
    return data["items"]


def lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def by_cell(items: list[dict]) -> dict[tuple[str, int], list[dict]]:
    cells = defaultdict(list)
    for item in items:
        cells[item["phenomenon"], item["distance"]].append(item)
    return cells


def accuracy_by_cell(items: list[dict], rule) -> dict[tuple[str, int], float]:
    return {cell: sum(rule(i) == i["correct"] for i in group) / len(group) for cell, group in by_cell(items).items()}


def gender_of_source_noun(word: str) -> int:
    return NOUN_GENDERS[AMBIGUOUS[word][0] if word in AMBIGUOUS else NOUNS[word]]


# ---- files ----------------------------------------------------------------------------------


def test_files_are_line_aligned_and_documents_contiguous(corpus):
    for split, paths in corpus.items():
        src, tgt, docs, align = (lines(paths[k]) for k in ("src", "tgt", "docs", "align"))
        assert len(src) == len(tgt) == len(docs) == len(align) > 0
        runs = [doc for k, doc in enumerate(docs) if k == 0 or docs[k - 1] != doc]
        assert len(runs) == len(set(runs)) == SIZES[split], "every document is one contiguous block"
        assert {3, 6} <= set(Counter(docs).values()) <= {3, 4, 5, 6}
        for s, t, a in zip(src, tgt, align):
            links = [tuple(map(int, link.split("-"))) for link in a.split()]
            assert all(0 <= i < len(s.split()) and 0 <= j < len(t.split()) for i, j in links)
            assert {j for _, j in links} == set(range(len(t.split()))), "every target word is aligned"
        parses = read_conllu(paths["conllu"])
        check_against_text(parses, src, str(paths["conllu"]), str(paths["src"]))
        for k, parse in enumerate(parses):
            check_parse(parse, f"{split} sentence {k + 1}")
        newdocs = [line.split(" = ")[1] for line in lines(paths["conllu"]) if line.startswith("# newdoc id = ")]
        assert newdocs == runs


def test_same_seed_same_bytes_other_seed_other_corpus(tmp_path):
    def contents(out, seed):
        paths = write_documents(out, 12, 3, 24, seed=seed)
        return {(s, k): p.read_bytes() for s, files in paths.items() for k, p in files.items()}

    first = contents(tmp_path / "a", 5)
    assert first == contents(tmp_path / "b", 5)
    other = contents(tmp_path / "c", 6)
    assert set(other) == set(first) and all(other[k] != first[k] for k in first)


@pytest.mark.parametrize("sizes, fragment", [((-1, 2, 24), "train documents"), ((4, 2, 25), "must be even"), ((4, 2.5, 24), "dev documents")])
def test_bad_sizes_are_one_line_errors(tmp_path, sizes, fragment):
    with pytest.raises(UserError, match=fragment) as e:
        write_documents(tmp_path, *sizes)
    assert "\n" not in str(e.value)


# ---- the document language ------------------------------------------------------------------


def test_the_new_words_are_new_and_genders_balanced():
    new_targets = [*PRONOUN_FORMS, *TENSE_MARKERS, *ADVERB_TRANSLATIONS.values(), *CUE_TRANSLATIONS.values(),
                   *(t for senses in AMBIGUOUS.values() for t in senses), *(f for forms in DETERMINER_FORMS.values() for f in forms[1:]), DETERMINER_FORMS["this"][0]]
    assert len(set(new_targets)) == len(new_targets) and not set(new_targets) & set(LEXICON.values())
    new_sources = [PRONOUN, ANTECEDENT_DETERMINER, *TENSE_ADVERBS, *AMBIGUOUS, *CUE_TRANSLATIONS]
    assert len(set(new_sources)) == len(new_sources) and not set(new_sources) & set(LEXICON)
    assert Counter(NOUN_GENDERS[t] for t in NOUNS.values()) == {0: 15, 1: 15}
    assert {NOUN_GENDERS[a] == NOUN_GENDERS[b] for a, b in AMBIGUOUS.values()} == {True}
    assert {DETERMINER_FORMS[d][0] for d in ("the", "a", "every")} == {LEXICON[d] for d in ("the", "a", "every")}


def test_determiners_agree_with_their_noun_inside_sentences(corpus):
    """The only place a noun's gender shows: the agreeing determiner (learnable sentence by sentence)."""
    paths = corpus["train"]
    seen = Counter()
    for parse, t, a in zip(read_conllu(paths["conllu"]), lines(paths["tgt"]), lines(paths["align"])):
        tgt = t.split()
        first = {}
        for i, j in sorted(tuple(map(int, link.split("-"))) for link in a.split()):
            first.setdefault(i, j)
        for i, (word, upos, head) in enumerate(zip(parse.words, parse.upos, parse.heads)):
            if upos == "DET":
                gender = NOUN_GENDERS[tgt[first[head - 1]]]
                assert tgt[first[i]] == DETERMINER_FORMS[word][gender], (parse.words, tgt)
                seen[gender] += 1
    assert seen[0] > 100 and seen[1] > 100


def test_every_document_has_one_tense_adverb_and_every_verb_its_marker(corpus):
    paths = corpus["dev"]
    docs = lines(paths["docs"])
    tgt = lines(paths["tgt"])
    for k, parse in enumerate(read_conllu(paths["conllu"])):
        start = k == 0 or docs[k - 1] != docs[k]
        if start:
            assert parse.words[0] in TENSE_ADVERBS and parse.upos[0] == "ADV"
            marker = TENSE_MARKERS[TENSE_ADVERBS.index(parse.words[0])]
        else:
            assert not set(parse.words) & set(TENSE_ADVERBS)
        words = tgt[k].split()
        assert words.count(marker) == parse.upos.count("VERB") and not set(words) & (set(TENSE_MARKERS) - {marker})


# ---- the contrastive set --------------------------------------------------------------------


def test_items_point_into_the_test_files(corpus, items):
    src, tgt, docs = (lines(corpus["test"][k]) for k in ("src", "tgt", "docs"))
    for item in items:
        line = item["line"]
        assert item["src"] == src[line] and item["candidates"][item["correct"]] == tgt[line] and item["doc"] == docs[line]
        n = len(item["context_src"])
        assert docs[line - n: line + 1] == [item["doc"]] * (n + 1) and (line - n == 0 or docs[line - n - 1] != item["doc"])
        assert item["context_src"] == src[line - n: line] and item["context_tgt"] == tgt[line - n: line]
        cue = item["context_src"][n - item["distance"]].split()
        words = item["src"].split()
        if item["phenomenon"] == "pronoun":  # the antecedent "this NOUN" is `distance` back, the pronoun here
            assert ANTECEDENT_DETERMINER in cue and PRONOUN in words
            assert all(ANTECEDENT_DETERMINER not in s.split() for s in item["context_src"][n - item["distance"] + 1:])
        elif item["phenomenon"] == "cohesion":  # the cue is `distance` back, the same noun here without it
            (word,) = set(words) & set(AMBIGUOUS)
            assert set(CUES[word]) & set(cue) and not set(CUE_TRANSLATIONS) & set(words)
        else:
            assert n == item["distance"] and cue[0] in TENSE_ADVERBS


def test_every_cell_is_present_and_balanced(items):
    cells = by_cell(items)
    assert sorted(cells) == sorted(CELLS)
    for cell, group in cells.items():
        assert Counter(i["correct"] for i in group) == {0: len(group) // 2, 1: len(group) // 2}, cell


def test_the_current_sentence_never_decides(items):
    """Same current source and same candidates, in the same order, with the other one correct: so
    every function of (source sentence, candidates) is right on exactly half of each cell."""
    for cell, group in by_cell(items).items():
        answers = defaultdict(list)
        for item in group:
            answers[item["src"], tuple(item["candidates"])].append(item["correct"])
        assert all(sorted(a) == [0, 1] * (len(a) // 2) for a in answers.values()), cell
        assert len({i["pair"] for i in group}) * 2 == len(group)
    pair_of = {item["doc"]: item["pair"] for item in items}
    order = sorted(pair_of, key=lambda d: int(d.split("doc")[1]))
    assert all(pair_of[a] != pair_of[b] for a, b in zip(order, order[1:])), "twins are never neighbours"


def test_context_free_rules_score_exactly_chance(corpus, items):
    train_counts = Counter(w for line in lines(corpus["train"]["tgt"]) for w in line.split())

    def first(item):
        return 0

    def last_noun_in_the_sentence(item):  # its gender picks the pronoun form (or the candidate index)
        nouns = [w for w in item["src"].split() if w in NOUNS or w in AMBIGUOUS]
        gender = gender_of_source_noun(nouns[-1]) if nouns else 0
        forms = [set(c.split()) for c in item["candidates"]]
        return next((k for k, f in enumerate(forms) if PRONOUN_FORMS[gender] in f), gender)

    def majority_form(item):  # the candidate whose own words are the most frequent in training
        forms = [set(c.split()) for c in item["candidates"]]
        own = [f - set.intersection(*forms) for f in forms]
        return max(range(len(forms)), key=lambda k: sum(train_counts[w] for w in own[k]))

    def checksum(item):  # an arbitrary function of the sentence
        return zlib.crc32(item["src"].encode()) % 2

    for rule in (first, last_noun_in_the_sentence, majority_form, checksum):
        assert accuracy_by_cell(items, rule) == {cell: 0.5 for cell in CELLS}, rule.__name__
    assert chance(read_contrastive(corpus["test"]["contrastive"])) == 0.5


def test_copying_the_gender_of_the_last_noun_in_the_context_scores_chance(items):
    """Issue 21: distractors of both genders sit between antecedent and pronoun, and the last noun
    before the pronoun is never the antecedent."""
    pronouns = [i for i in items if i["phenomenon"] == "pronoun"]

    def last_context_noun(item):
        nouns = [w for w in item["context_src"][-1].split() if w in NOUNS]
        form = PRONOUN_FORMS[gender_of_source_noun(nouns[-1])]
        return next(k for k, c in enumerate(item["candidates"]) if form in c.split())

    assert accuracy_by_cell(pronouns, last_context_noun) == {("pronoun", d): 0.5 for d in range(1, MAX_DISTANCE + 1)}
    for item in pronouns:
        n, d = len(item["context_src"]), item["distance"]
        words = item["context_src"][n - d].split()
        after = words[words.index(ANTECEDENT_DETERMINER) + 1:] + " ".join(item["context_src"][n - d + 1:]).split()
        nouns = [w for w in after if w in NOUNS]
        assert {gender_of_source_noun(w) for w in nouns[1:]} == {0, 1}, "distractors of both genders"


def oracle(item: dict, window: int | None = None) -> int:
    """Reads the source context (the last ``window`` sentences) for the cue; falls back to 0."""
    context = " ".join(item["context_src"][-window:] if window else item["context_src"]).split()
    want = None
    if item["phenomenon"] == "pronoun" and ANTECEDENT_DETERMINER in context:
        noun = next(w for w in context[context.index(ANTECEDENT_DETERMINER):] if w in NOUNS)
        want = PRONOUN_FORMS[gender_of_source_noun(noun)]
    elif item["phenomenon"] == "cohesion":
        (word,) = set(item["src"].split()) & set(AMBIGUOUS)
        cues = [CUES[word].index(w) for w in context if w in CUES[word]]
        want = AMBIGUOUS[word][cues[-1]] if cues else None
    elif item["phenomenon"] == "tense":
        adverbs = [w for w in context if w in TENSE_ADVERBS]
        want = TENSE_MARKERS[TENSE_ADVERBS.index(adverbs[-1])] if adverbs else None
    if want is None:
        return 0
    return next(k for k, c in enumerate(item["candidates"]) if want in c.split())


def test_a_rule_that_reads_the_context_scores_100_and_a_window_of_3_misses_distance_4(items):
    assert accuracy_by_cell(items, oracle) == {cell: 1.0 for cell in CELLS}
    window = accuracy_by_cell(items, lambda item: oracle(item, window=3))
    assert window == {(p, d): 1.0 if d <= 3 else 0.5 for p, d in CELLS}


def test_the_controls_bring_a_rule_that_reads_the_context_back_to_chance(items):
    """Issue 21: the `other-document` and `none` controls of `syntaxnmt score` must not leak. The
    oracle above (100 % with the true context) is at chance when the context is another document's
    (every item with 20 donors, as `score --draws 20` draws them) or none."""
    from syntaxnmt.decoding.scoring import swap_contexts

    docs = [item["doc"] for item in items]
    for phenomenon in PHENOMENA:
        right = trials = 0
        for r in range(20):
            for item, donor in zip(items, swap_contexts(docs, seed=r)):
                if item["phenomenon"] == phenomenon:
                    assert items[donor]["doc"] != item["doc"]
                    right += oracle(dict(item, context_src=items[donor]["context_src"])) == item["correct"]
                    trials += 1
        assert abs(right / trials - 0.5) < 0.1, (phenomenon, right / trials)  # a leak scores near 1.0
        group = [i for i in items if i["phenomenon"] == phenomenon]
        assert sum(oracle(dict(i, context_src=[])) == i["correct"] for i in group) / len(group) == 0.5


def test_twins_at_distance_4_look_the_same_through_a_window_of_3(items):
    """Any scorer with 3 previous sentences gets exactly 50 % at distance 4 for pronouns and
    cohesion, on both sides; for tense the target context shows the earlier verbs' markers."""
    twins = defaultdict(list)
    for item in items:
        twins[item["pair"], item["distance"]].append(item)
    seen = set()
    for (pair, distance), (a, b) in twins.items():
        view = lambda i, side: (i["src"], i["candidates"], i[side][-3:])  # noqa: E731
        seen.add((a["phenomenon"], distance))
        assert (view(a, "context_src") == view(b, "context_src")) == (distance == 4)
        if a["phenomenon"] == "tense":
            assert view(a, "context_tgt") != view(b, "context_tgt"), "tense markers of earlier verbs"
        else:
            assert (view(a, "context_tgt") == view(b, "context_tgt")) == (distance == 4)
    assert seen == set(CELLS)


def test_the_synthetic_command_writes_the_discourse_corpus(tmp_path, capsys):
    from test_cli import assert_one_line_error, run_cli

    code, _, err = run_cli(capsys, "synthetic", "--documents", "-o", tmp_path / "d", "--train", 6, "--dev", 2, "--test", 4, "--seed", 3)
    assert code == 0, err
    for split in ("train", "dev", "test"):
        assert len((tmp_path / "d" / f"{split}.src").read_text().splitlines()) == len((tmp_path / "d" / f"{split}.docs").read_text().splitlines()) > 0
    assert (tmp_path / "d" / "contrastive.json").is_file()
    code, _, err = run_cli(capsys, "synthetic", "--documents", "-o", tmp_path / "e", "--test", 3)
    assert_one_line_error(code, err, "--test 3", "even number")
    assert not (tmp_path / "e").exists()  # refused before the folder is made
