"""Gendered-pronoun contrastive items mined from real parallel documents (issue 53).

An item is a Spanish reference sentence that holds a gendered third-person pronoun or clitic
whose English source word does not mark the gender (*it*, *they*, *them*), and whose antecedent
sits in an earlier sentence of the same document: the gender is then decided by the context (in
the sense of ContraPro, Müller et al. 2018, mined here with word alignments instead of a parser).
The contrastive candidate is the reference with the pronoun's gender swapped.

Gendered Spanish forms (:data:`SWAPS`; ``le``/``les``, ``se``, ``su``, an article before
``que``/``cual``/``de`` (``lo que``, ``los de Jerusalem``) and the English *he*, *she*, *him*,
*her* are excluded: the first three have no gender, the neuter ``lo`` refers to a clause, and
English *him*/*her* give the gender away in the source):

* tonic/subject pronouns ``él``/``ella`` (for *it*) and ``ellos``/``ellas`` (*they*, *them*);
* direct-object clitics ``lo``/``la`` (*it*) and ``los``/``las`` (*them*);
* enclitics: the same clitics written onto a verb (``guardarla``, ``tomólos``, ``dárselo``), when the
  rest of the word ends like a verb form (:func:`enclitic_split`).

The Spanish token must be linked to the English pronoun by the word alignment, or (object *it*,
*them* linked to no gendered form) be the clitic of the verb the English word before the pronoun
is linked to (:func:`pronoun_links`); its number must agree with the English word's (*it*:
singular; *they*/*them*: plural), and *they* (a subject) counts only with a tonic pronoun.

Antecedent (no Spanish parser is used: a documented heuristic). A Spanish *noun* is a word right
after a determiner that marks its gender and number (``el``/``del``/``al``/``un``/``este``/... masculine,
``la``/``una``/``esta``/... feminine, their plurals; :data:`DETERMINERS`) whose aligned English
word is a content word (not in :data:`EN_FUNCTION_WORDS`) with an English determiner or possessive
(:data:`EN_DETERMINERS`) among the three words before it: so the clitic of ``la tomó`` (*took it*) is
not read as the article of a noun ``tomó``. The antecedent is the nearest such noun
of the pronoun's gender and number in the ``max_distance`` previous sentences of the document;
``distance`` = how many sentences back it is (1 = the previous one). Items are kept only when

* the current sentence has, before the pronoun, no word of the pronoun's gender and number after a
  determiner (:func:`determined_words`), and for a plural pronoun no word after ``sus``/``tus``/``mis``
  (which do not mark gender): else the antecedent could be in the sentence itself (nouns without a
  determiner or after ``su``/``tu``/``mi``, names, and collectives of the other number, ``el pueblo
  ... ellos``, are not seen: the reading in docs/documents.md counts how often that happens),
* a directly linked clitic is not followed by a word linked to the same English pronoun (then it
  is the article of ``la ciudad`` translating *it*), and
* the antecedent is 1..``max_distance`` sentences back.

Reading 30 random items of the Bible set (docs/documents.md) measures how often this is right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from syntaxnmt.data.links import Links

# Spanish gendered pronoun -> (gender, number, kind); the swap keeps number and kind.
SWAPS: dict[str, str] = {
    "él": "ella", "ella": "él", "ellos": "ellas", "ellas": "ellos",
    "lo": "la", "la": "lo", "los": "las", "las": "los",
}
GENDER = {"él": "m", "ella": "f", "ellos": "m", "ellas": "f", "lo": "m", "la": "f", "los": "m", "las": "f"}
PLURAL = {"ellos", "ellas", "los", "las"}
TONIC = {"él", "ella", "ellos", "ellas"}
# English source words that leave the gender open, and their number.
EN_PRONOUNS = {"it": False, "they": True, "them": True}
# Phenomenon label of an item: English word and the Spanish pair.
PAIRS = {"él": "él/ella", "ella": "él/ella", "ellos": "ellos/ellas", "ellas": "ellos/ellas",
         "lo": "lo/la", "la": "lo/la", "los": "los/las", "las": "los/las"}

# Spanish determiners that mark (gender, plural) of the noun after them.
DETERMINERS: dict[str, tuple[str, bool]] = {
    **{w: ("m", False) for w in ("el", "del", "al", "un", "este", "ese", "aquel", "nuestro", "vuestro", "otro", "mismo")},
    **{w: ("f", False) for w in ("la", "una", "esta", "esa", "aquella", "nuestra", "vuestra", "otra", "misma")},
    **{w: ("m", True) for w in ("los", "unos", "estos", "esos", "aquellos", "nuestros", "vuestros", "otros", "todos")},
    **{w: ("f", True) for w in ("las", "unas", "estas", "esas", "aquellas", "nuestras", "vuestras", "otras", "todas")},
}
# Plural possessives, which do not mark the gender of their noun.
PLURAL_POSSESSIVES = {"sus", "tus", "mis"}
# A word after a determiner that is not a noun (the determiner is then a pronoun, or the word an
# adjective or a relative): skipped, never an antecedent.
ES_NOT_NOUNS = {
    "que", "cual", "cuales", "de", "a", "en", "y", "o", "cual", "mismo", "misma", "mismos", "mismas",
    "otro", "otra", "otros", "otras", "todo", "toda", "todos", "todas", "un", "una", "uno", "primero",
    "primera", "segundo", "segunda", "tercero", "tercera", "gran", "grande", "buen", "buena", "mal",
    "mala", "santo", "santa", "dicho", "dicha", "se", "no", "le", "les", "me", "te", "nos", "os",
}
EN_FUNCTION_WORDS = {
    "the", "a", "an", "of", "to", "in", "on", "at", "by", "for", "from", "with", "and", "or", "but",
    "it", "its", "they", "them", "their", "he", "him", "his", "she", "her", "i", "me", "my", "you",
    "your", "we", "us", "our", "this", "that", "these", "those", "which", "who", "whom", "whose",
    "what", "is", "are", "was", "were", "be", "been", "shall", "will", "not", "all", "there", "as",
    "so", "then", "when", "into", "upon", "out", "up", "one", "also", "himself", "herself", "itself",
    "themselves", "yourselves", "had", "has", "have", "do", "did", "said", "made", "make",
}
# An English noun has one of these within the three words before it (no English tagger is used).
EN_DETERMINERS = {
    "the", "a", "an", "this", "that", "these", "those", "his", "her", "its", "their", "my", "your",
    "our", "thy", "thine", "every", "each", "another",
}
EN_PREPOSITIONS = {
    "about", "above", "after", "against", "among", "around", "before", "behind", "below", "beneath",
    "beside", "between", "beyond", "concerning", "down", "during", "except", "like", "near", "off",
    "over", "through", "throughout", "toward", "towards", "under", "unto", "until", "within", "without",
}
# The rest of an enclitic word must end like a Spanish verb form: an infinitive (-r), a gerund
# (-ndo), another clitic (dár-se-lo), or carry a written accent (tómala, hízolo, echólos); no verb
# form ends in -u (nouns in -culo, -tulo do: tabernáculo, título).
_VERB_END = re.compile(r"(?:[aeií]r|ndo|se|me|te|nos)$")
_ACCENT = re.compile(r"[áéíóú]")
_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Token:
    """A word of a sentence with its character span (for replacing it in the original text)."""

    text: str
    start: int
    end: int


def tokenize(sentence: str) -> list[Token]:
    """Words and single punctuation marks with their character spans (the alignment's tokens)."""
    return [Token(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(sentence)]


def enclitic_split(word: str) -> tuple[str, str] | None:
    """``(verb, clitic)`` when ``word`` is a verb with a gendered direct-object clitic written
    onto it (``guardarla`` -> ``("guardar", "la")``), else None (heuristic: see the module)."""
    low = word.lower()
    for clitic in ("los", "las", "lo", "la"):
        if low.endswith(clitic) and len(low) - len(clitic) >= 3:
            verb = low[: -len(clitic)]
            if not verb.endswith("u") and (_VERB_END.search(verb) or _ACCENT.search(verb)):  # tabernácu-lo is a noun
                return word[: -len(clitic)], word[-len(clitic):]
    return None


def _cased(form: str, like: str) -> str:
    """``form`` written with the capitalization of ``like`` (``Él`` -> ``Ella``)."""
    if like.isupper() and len(like) > 1:
        return form.upper()
    if like[:1].isupper():
        return form[:1].upper() + form[1:]
    return form


@dataclass(frozen=True)
class Noun:
    """A Spanish noun found by its determiner, with gender and number."""

    sentence: int  # index of the sentence in its document
    index: int  # token index of the noun
    word: str
    en: str  # the aligned English word(s)
    gender: str
    plural: bool


def nouns(es: Sequence[Token], en: Sequence[Token], links: Links, sentence: int) -> list[Noun]:
    """The Spanish nouns of a sentence that the heuristic recognizes (see the module docstring)."""
    by_tgt: dict[int, list[int]] = {}
    for s, t in links:
        by_tgt.setdefault(t, []).append(s)
    out = []
    for k in range(1, len(es)):
        det = es[k - 1].text.lower()
        word = es[k].text
        if det not in DETERMINERS or not word.isalpha() or word.lower() in ES_NOT_NOUNS or word.lower() in DETERMINERS:
            continue
        content = [
            en[s].text for s in sorted(by_tgt.get(k, ()))
            if s < len(en) and en[s].text.isalpha() and en[s].text.lower() not in EN_FUNCTION_WORDS
            and any(en[p].text.lower() in EN_DETERMINERS for p in range(max(0, s - 3), s))
        ]
        if not content:
            continue
        gender, plural = DETERMINERS[det]
        out.append(Noun(sentence, k, word, " ".join(content), gender, plural))
    return out


def determined_words(es: Sequence[Token]) -> list[tuple[str, bool]]:
    """(gender, plural) of every word after a gendered determiner, Spanish side only (looser than
    :func:`nouns`, which also asks for an aligned English noun): what could be an antecedent
    inside the current sentence."""
    return [
        DETERMINERS[es[k - 1].text.lower()] for k in range(1, len(es))
        if es[k - 1].text.lower() in DETERMINERS and es[k].text.isalpha()
        and es[k].text.lower() not in ES_NOT_NOUNS and es[k].text.lower() not in DETERMINERS
    ]


@dataclass(frozen=True)
class PronounItem:
    """One mined item: ``src`` (sentence ``line`` of document ``doc``), the reference and the swapped candidate."""

    doc: str
    line: int  # 0-based line of the current sentence in the corpus
    position: int  # its index in the document
    src: str
    reference: str
    contrastive: str
    en_word: str
    es_word: str  # the pronoun as written (the whole word for an enclitic)
    kind: str  # "tonic", "clitic" or "enclitic"
    gender: str
    distance: int
    antecedent: str  # the Spanish noun (with its determiner) and its English word
    antecedent_sentence: int  # its index in the document

    @property
    def phenomenon(self) -> str:
        base = self.es_word.lower() if self.kind != "enclitic" else enclitic_split(self.es_word)[1].lower()
        return f"{self.en_word}:{PAIRS[base]}" + ("-enclitic" if self.kind == "enclitic" else "")


def _pronoun(word: str) -> tuple[str, str] | None:
    """``(clitic or pronoun, kind)`` of a Spanish word, lowercased, or None."""
    low = word.lower()
    if low in TONIC:
        return low, "tonic"
    if low in SWAPS:
        return low, "clitic"
    split = enclitic_split(word)
    if split:
        return split[1].lower(), "enclitic"
    return None


def pronoun_links(en: Sequence[Token], es: Sequence[Token], links: Links) -> list[tuple[int, int]]:
    """``(English pronoun, Spanish pronoun)`` token pairs of a sentence, in Spanish order: the
    links between an English *it*/*they*/*them* and a Spanish gendered form; and for an object
    *it*/*them* linked to none, the clitic of the verb before it (aligners often link *it* to
    nothing and the verb *took* to ``tomó``, leaving the ``lo`` of ``lo tomó`` unlinked): the
    unlinked clitic right before a Spanish word linked to that English word (``lo tomó``,
    ``se lo dió``), or that word itself if it carries an enclitic (``tomólo``); the English word
    must be a content word, not a preposition (*seize on it*: ``la`` of ``la oscuridad`` is no clitic)."""
    by_src: dict[int, list[int]] = {}
    for s, t in links:
        if s < len(en) and t < len(es):
            by_src.setdefault(s, []).append(t)
    out = []
    for s, tok in enumerate(en):
        word = tok.text.lower()
        if word not in EN_PRONOUNS:
            continue
        linked = [t for t in sorted(by_src.get(s, ())) if _pronoun(es[t].text)]
        if linked:
            out.append((s, linked[0]))
            continue
        verb = en[s - 1].text.lower() if s > 0 else ""
        if word == "they" or not verb.isalpha() or verb in EN_FUNCTION_WORDS or verb in EN_PREPOSITIONS:
            continue
        linked_anywhere = {t for ts in by_src.values() for t in ts}
        for t in sorted(by_src.get(s - 1, ())):
            if (_pronoun(es[t].text) or ("", ""))[1] == "enclitic":
                out.append((s, t))
                break
            if t >= 1 and t - 1 not in linked_anywhere and (_pronoun(es[t - 1].text) or ("", ""))[1] == "clitic":
                out.append((s, t - 1))
                break
    return sorted(out, key=lambda st: st[1])


def mine_document(
    doc: str,
    first_line: int,
    en_sentences: Sequence[str],
    es_sentences: Sequence[str],
    links: Sequence[Links],
    max_distance: int = 3,
) -> list[PronounItem]:
    """The items of one document (sentences in order; ``links``: ``(en, es)`` token-index pairs
    per sentence over :func:`tokenize`'s tokens). At most one item per (sentence, pronoun)."""
    en_toks = [tokenize(s) for s in en_sentences]
    es_toks = [tokenize(s) for s in es_sentences]
    found = [nouns(es_toks[i], en_toks[i], links[i], i) for i in range(len(es_sentences))]
    items = []
    for i, (en, es, pair_links) in enumerate(zip(en_toks, es_toks, links)):
        for s, t in pronoun_links(en, es, pair_links):
            en_word = en[s].text.lower()
            word = es[t].text
            base, kind = _pronoun(word)
            if en_word == "they" and kind != "tonic":
                continue  # a subject: a clitic linked to it is a mis-link
            if (base in PLURAL) != EN_PRONOUNS[en_word]:
                continue  # number disagrees: not the English word's translation
            if kind == "clitic" and t + 1 < len(es) and es[t + 1].text.lower() in ("que", "cual", "cuales", "de"):
                continue  # an article made a pronoun ("lo que", "los de Jerusalem"): no antecedent noun
            if kind == "clitic" and any(n.index == t + 1 for n in found[i]):
                continue  # an article of a noun mis-linked to the pronoun
            gender, plural = GENDER[base], base in PLURAL
            before = determined_words(es[:t])
            if (gender, plural) in before:
                continue  # a word of the same gender and number earlier in the sentence: the antecedent may be there
            if plural and any(es[k - 1].text.lower() in PLURAL_POSSESSIVES and es[k].text.isalpha() for k in range(1, t)):
                continue  # a plural noun after "sus"/"tus"/"mis", whose gender is not marked ("sus siervos ... ellos")
            if kind == "clitic" and t + 1 < len(es) and (s, t + 1) in pair_links:
                continue  # the next word translates the pronoun too: an article and its noun ("la ciudad" for *it*)
            antecedent = None
            for back in range(1, max_distance + 1):
                if i - back < 0:
                    break
                same = [n for n in found[i - back] if n.gender == gender and n.plural == plural]
                if same:
                    antecedent = (back, same[-1])
                    break
            if antecedent is None:
                continue
            back, noun = antecedent
            if kind == "enclitic":
                verb, clitic = enclitic_split(word)
                swapped = verb + _cased(SWAPS[clitic.lower()], clitic)
            else:
                swapped = _cased(SWAPS[base], word)
            tok = es[t]
            sentence = es_sentences[i]
            contrastive = sentence[: tok.start] + swapped + sentence[tok.end:]
            det = es_toks[noun.sentence][noun.index - 1].text
            items.append(PronounItem(
                doc=doc, line=first_line + i, position=i, src=en_sentences[i], reference=sentence,
                contrastive=contrastive, en_word=en_word, es_word=word, kind=kind, gender=gender,
                distance=back, antecedent=f"{det} {noun.word} ({noun.en})", antecedent_sentence=noun.sentence,
            ))
            break  # one item per sentence: the first pronoun
    return items


def documents(doc_ids: Sequence[str]) -> Iterable[tuple[str, int, int]]:
    """``(doc id, first line, end line)`` of each run of equal ids, in order."""
    start = 0
    for k in range(1, len(doc_ids) + 1):
        if k == len(doc_ids) or doc_ids[k] != doc_ids[start]:
            yield doc_ids[start], start, k
            start = k


def mine(
    en_lines: Sequence[str],
    es_lines: Sequence[str],
    doc_ids: Sequence[str],
    links: Sequence[Links],
    max_distance: int = 3,
) -> list[PronounItem]:
    """Every item of a corpus whose lines are grouped into documents by ``doc_ids`` (one id per line)."""
    items = []
    for doc, start, end in documents(doc_ids):
        items += mine_document(doc, start, en_lines[start:end], es_lines[start:end], links[start:end], max_distance)
    return items


def to_json_items(items: Sequence[PronounItem], en_lines: Sequence[str], es_lines: Sequence[str]) -> list[dict]:
    """syntaxnmt contrastive JSON objects (:mod:`syntaxnmt.data.contrastive`): the document's
    previous sentences as context (nearest last), masculine candidate first."""
    out = []
    for item in items:
        first = item.line - item.position
        candidates = [item.reference, item.contrastive]
        correct = 0
        if item.gender == "f":
            candidates.reverse()
            correct = 1
        out.append({
            "context_src": list(en_lines[first:item.line]),
            "context_tgt": list(es_lines[first:item.line]),
            "src": item.src,
            "candidates": candidates,
            "correct": correct,
            "phenomenon": item.phenomenon,
            "distance": item.distance,
            "doc": item.doc,
            "line": item.line,
        })
    return out
