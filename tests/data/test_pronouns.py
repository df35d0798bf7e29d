"""syntaxnmt.data.pronouns on a hand-made chapter (issue 53): which pronouns become items, the
distance to the antecedent, the swapped candidate, and the JSON that read_contrastive reads."""

from __future__ import annotations

import json

from syntaxnmt.data.contrastive import read_contrastive
from syntaxnmt.data.pronouns import enclitic_split, mine, pronoun_links, to_json_items, tokenize


def diagonal(n: int) -> set[tuple[int, int]]:
    return {(k, k) for k in range(n)}


# (English, Spanish, links (English token, Spanish token)) of one chapter, in order.
CHAPTER = [
    ("The city was great .", "La ciudad era grande .", diagonal(5)),  # 0: la ciudad (f, sg)
    ("The men came .", "Los hombres vinieron .", diagonal(4)),  # 1: los hombres (m, pl)
    ("He burned it .", "Él la quemó .", {(0, 0), (1, 2), (2, 1), (3, 3)}),  # 2: it -> la, ciudad 2 back
    ("They went .", "Ellos fueron .", diagonal(3)),  # 3: they -> ellos, hombres 2 back
    ("Then they took it .", "Entonces ellos la tomaron .", {(0, 0), (1, 1), (2, 3), (3, 2), (4, 4)}),  # 4: they -> ellos: hombres 3 back
    ("She kept it .", "Ella la guardó .", {(0, 0), (1, 2), (3, 3)}),  # 5: it unlinked: the clitic before kept's word; ciudad 5 back
    ("The house stood .", "La casa estaba .", diagonal(4)),  # 6: la casa (f, sg)
    ("He kept it .", "Él guardóla .", {(0, 0), (1, 1), (3, 2)}),  # 7: enclitic of kept's word, casa 1 back
    ("He saw them there .", "Él los vió allí .", {(0, 0), (1, 2), (2, 1), (3, 3), (4, 4)}),  # 8: them -> los, hombres 7 back
]


def chapter_items(max_distance: int = 3):
    en = [c[0] for c in CHAPTER]
    es = [c[1] for c in CHAPTER]
    return en, es, mine(en, es, ["Gen.1"] * len(CHAPTER), [c[2] for c in CHAPTER], max_distance=max_distance)


def test_items_found_with_their_distance_and_swapped_candidate():
    _, _, items = chapter_items()
    by_line = {item.line: item for item in items}
    assert sorted(by_line) == [2, 3, 4, 7]  # 5: antecedent 5 back; 8: 7 back
    assert by_line[4].distance == 3 and by_line[4].es_word == "ellos"  # the first pronoun of the sentence
    it = by_line[2]
    assert (it.en_word, it.es_word, it.gender, it.distance, it.phenomenon) == ("it", "la", "f", 2, "it:lo/la")
    assert it.contrastive == "Él lo quemó ."
    assert it.antecedent.startswith("La ciudad")
    they = by_line[3]
    assert (they.gender, they.distance, they.phenomenon, they.contrastive) == ("m", 2, "they:ellos/ellas", "Ellas fueron .")
    enclitic = by_line[7]
    assert (enclitic.distance, enclitic.phenomenon, enclitic.contrastive) == (1, "it:lo/la-enclitic", "Él guardólo .")


def test_max_distance_decides_what_is_far_enough():
    _, _, items = chapter_items(max_distance=5)
    assert sorted(item.line for item in items) == [2, 3, 4, 5, 7]
    assert {item.line: item.distance for item in items}[5] == 5
    _, _, items = chapter_items(max_distance=1)
    assert [item.line for item in items] == [7]


def test_a_noun_of_the_same_gender_in_the_sentence_blocks_the_item():
    en, es = ["The city fell .", "The wall was high and it fell ."], ["La ciudad cayó .", "La muralla era alta y ella cayó ."]
    links = [diagonal(4), diagonal(8)]
    assert mine(en, es, ["d", "d"], links) == []
    es[1] = "El muro era alto y ella cayó ."  # a masculine noun only: the city decides
    assert [item.distance for item in mine(en, es, ["d", "d"], links)] == [1]


def test_a_plural_noun_after_a_possessive_blocks_a_plural_pronoun():
    en = ["The men came .", "He saw his servants and he called them ."]
    es = ["Los hombres vinieron .", "Vió á sus siervos y los llamó ."]
    long = {(1, 0), (2, 2), (3, 3), (4, 4), (6, 6), (7, 5), (8, 7)}  # them -> los
    assert mine(en, es, ["d", "d"], [diagonal(4), long]) == []
    es[1] = "Vió á aquellos siervos y los llamó ."  # no possessive: the determiner shows the masculine noun
    assert mine(en, es, ["d", "d"], [diagonal(4), long]) == []
    es[1] = "Vió á Pedro y los llamó ."  # nothing before the pronoun: the men decide
    short = {(1, 0), (3, 2), (4, 3), (6, 5), (7, 4), (8, 6)}
    assert [(item.es_word, item.distance) for item in mine(en, es, ["d", "d"], [diagonal(4), short])] == [("los", 1)]


def test_documents_do_not_share_antecedents():
    en, es = ["The city fell .", "They burned it ."], ["La ciudad cayó .", "Ellos la quemaron ."]
    links = [diagonal(4), {(0, 0), (1, 2), (2, 1), (3, 3)}]
    assert len(mine(en, es, ["a", "a"], links)) == 1
    assert mine(en, es, ["a", "b"], links) == []


def test_via_verb_clitic_needs_an_unlinked_clitic_before_a_content_verb():
    en, es = tokenize("She kept it ."), tokenize("Ella la guardó .")
    assert pronoun_links(en, es, {(0, 0), (1, 2), (3, 3)}) == [(2, 1)]
    assert pronoun_links(en, es, {(0, 0), (1, 2), (0, 1), (3, 3)}) == []  # the clitic is linked elsewhere
    en = tokenize("Darkness seize on it .")
    assert pronoun_links(en, tokenize("Ocupe la oscuridad ."), {(1, 0), (2, 2), (4, 3)}) == []  # a preposition is no verb


def test_enclitics_and_neuter_lo():
    assert enclitic_split("guardarla") == ("guardar", "la")
    assert enclitic_split("tomólos") == ("tomó", "los")
    assert enclitic_split("escuela") is None and enclitic_split("sangre") is None
    assert enclitic_split("tabernáculo") is None and enclitic_split("título") is None  # nouns in -ulo
    en, es = ["The city fell .", "He heard it ."], ["La ciudad cayó .", "Él lo que oyó ."]
    assert mine(en, es, ["d", "d"], [diagonal(4), {(0, 0), (2, 1), (1, 3), (3, 4)}]) == []


def test_json_is_read_by_the_contrastive_reader(tmp_path):
    en, es, items = chapter_items()
    objs = to_json_items(items, en, es)
    path = tmp_path / "contrastive.json"
    path.write_text(json.dumps({"format": "syntaxnmt-contrastive", "version": 1, "items": objs}, ensure_ascii=False), encoding="utf-8")
    read = read_contrastive(path)
    assert len(read) == 4
    first = read[0]  # line 2, feminine: the masculine candidate comes first
    assert first.candidates == ("Él lo quemó .", "Él la quemó .") and first.correct == 1 and first.reference == "Él la quemó ."
    assert first.context_src == tuple(en[:2]) and first.context_tgt == tuple(es[:2])
    assert (first.distance, first.phenomenon, first.doc, first.line) == (2, "it:lo/la", "Gen.1", 2)
    assert read[1].correct == 0 and read[1].candidates == ("Ellos fueron .", "Ellas fueron .")
