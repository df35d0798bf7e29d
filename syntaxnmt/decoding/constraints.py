"""Lexically constrained beam search: dynamic beam allocation over a constraint trie, vectorized.

A constraint is a target phrase (a sequence of target token ids) that every finished output of
its sentence must contain. :func:`syntaxnmt.decoding.search.beam_search` takes them per sentence
(``constraints[i]``: a list of phrases for batch row ``i``, None or ``[]`` for none) and calls
this module at two points of each step, everything else (scores, lengths, coverage penalty,
finished hypotheses frozen in their beams) staying the search's own:

1. **Candidates** (:meth:`StepRows.restrict`, :meth:`StepRows.extend`; Post & Vilar 2018,
   "Fast Lexically Constrained Decoding with Dynamic Beam Allocation", NAACL, Sec. 3, "the k
   best tokens of every hypothesis, the tokens that advance an unmet constraint and the
   single-best token"): each open hypothesis offers its k best next tokens *and* every token
   that advances one of its unmet constraints (Grid Beam Search's "constraint" moves, Hokamp & Liu
   2017), with its model log-probability. EOS is forbidden until all of a hypothesis's
   constraints are met, and a hypothesis that could no longer fit its unmet constraint tokens
   before its sentence's length limit may only advance them (so that every hypothesis alive can
   always end with all of its constraints: the guarantee Post & Vilar leave to the length limit).
2. **Selection** (:meth:`BeamConstraints.select`, :func:`allocate`; Post & Vilar Sec. 3, "bank
   allocation"): a candidate's *bank* is the number of constraint tokens it has met; the k slots
   of a sentence's beam are shared among the banks 0..C (C: the sentence's constraint tokens)
   round-robin: the best candidate of every bank, highest bank first, then the second best of
   every bank..., so a bank that lacks candidates leaves its slots to the others (Hu et al.
   2019, "Improved Lexically Constrained Decoding for Translation and Monolingual Rewriting",
   NAACL, Sec. 3.2: the allocation as one sort over the whole batch, no loop over hypotheses).
   Finished hypotheses that rank among the k best by score keep their slots first: they have met
   every constraint, and a sentence ends, as without constraints, once its k best candidates are
   all finished.

The constraints are a *trie* per sentence (Hu et al. 2019, Sec. 3.1: shared prefixes are one
path, so "New" and "New York" advance together), and a hypothesis's state is two tensors: its
trie node (the constraint tokens in progress; the root when none) and how many times it has met
each distinct constraint (a phrase given twice must appear twice). A token that does not continue
the phrase in progress drops it (its partial tokens no longer count: Post & Vilar's "unwinding")
and may start another from the root. All states of the batch are tensors indexed by node, so
one step of every hypothesis and candidate is a few gathers (:meth:`ConstraintTrie.advance`).

With no constraint in a batch nothing here runs and the search is exactly the unconstrained one.
With constraints the rows' rules apply to their log-probabilities before the top-k
(:meth:`StepRows.restrict`) and their constraint tokens follow the top-k (:meth:`StepRows.extend`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from syntaxnmt.errors import UserError
from syntaxnmt.inputs import BOS, EOS, PAD, UNK
from syntaxnmt.textio import read_lines

if TYPE_CHECKING:  # the search imports this module: it needs no SentencePiece
    from syntaxnmt.data.subwords import Tokenizer

SentenceConstraints = Sequence[Sequence[int]] | None
"""One sentence's constraints: target phrases as token-id sequences (None or [] for none)."""

_NEG = float("-inf")


class BatchConstraints(list):
    """Every sentence's constraints (a list, one entry per sentence) with ``continuing``: (V,)
    bool, the target pieces that go on with the word before them (SentencePiece pieces without
    the word boundary "▁" that hold a letter or digit; None: no rule, as for a word vocabulary).
    With it, a hypothesis whose last token completed a constraint may not continue that word with
    such a piece (only with the tokens that advance a constraint), so that a phrase's last word
    stays a word of the output ("Hund", not "Hunde"): what term accuracy counts. ``glue``: (V,)
    bool, the pieces without "▁" and without a letter or digit (punctuation such as "-"), through
    which the rule holds ("Texas-" may not go on to "Texas-BB")."""

    def __init__(self, constraints: Sequence[SentenceConstraints] = (), continuing: Tensor | None = None, glue: Tensor | None = None):
        super().__init__(constraints)
        self.continuing, self.glue = continuing, glue

    def subset(self, index: Sequence[int]) -> "BatchConstraints":
        """The constraints of the sentences ``index``, with the same rule."""
        return BatchConstraints([self[int(i)] for i in index], self.continuing, self.glue)


def _inner_pieces(tok: "Tokenizer", alnum: bool) -> Tensor | None:
    """(V,) bool: the ordinary pieces of ``tok``'s vocabulary without the word boundary "▁" that
    do (``alnum``) or do not hold a letter or digit; None for a word vocabulary."""
    sp = tok.sp
    if not hasattr(sp, "is_control"):  # syntaxnmt.data.words.WordProcessor
        return None
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    special = [sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or (p.startswith("<") and p.endswith(">")) for i, p in enumerate(pieces)]
    return torch.tensor([not sym and not p.startswith("\u2581") and any(c.isalnum() for c in p) == alnum for p, sym in zip(pieces, special)])


def continuing_pieces(tok: "Tokenizer") -> Tensor | None:
    """(V,) bool: the pieces of ``tok``'s vocabulary that continue a word (:class:`BatchConstraints`);
    None for a word vocabulary (every token is a word)."""
    return _inner_pieces(tok, alnum=True)


def glue_pieces(tok: "Tokenizer") -> Tensor | None:
    """(V,) bool: the pieces that join the word before them without a letter or digit ("-", "'"):
    the rule of :class:`BatchConstraints` holds through them."""
    return _inner_pieces(tok, alnum=False)


def _phrases(constraints: SentenceConstraints) -> Sequence[Sequence[int]]:
    """A sentence's phrases (lists, tuples, tensors or arrays of ids), none for None."""
    return () if constraints is None else constraints


def has_constraints(constraints: Sequence[SentenceConstraints] | None) -> bool:
    """Whether any sentence of a batch has a (non-empty) constraint."""
    return constraints is not None and any(len(c) for cons in constraints if cons is not None for c in cons)


@dataclass
class ConstraintTrie:
    """The constraints of a batch as one table of trie nodes (every sentence has its own root).

    Sentence ``i``'s distinct phrases are its *local* constraints ``u = 0..U-1`` (``length[i, u]``
    tokens, required ``need[i, u]`` times; padding: 0 and 0). Node ``v`` lies at ``depth[v]``
    (the root: 0); ``on_path[v, u]``: v is a prefix of u (u's end included; a
    root: all of its sentence's), ``through[v, u]``: a proper prefix (u goes on after v),
    ``ends[v]``: the local constraint v completes (-1: none); its children are ``child_tok[v]``
    and ``child_id[v]`` (-1 padding)."""

    root: Tensor  # (n,)
    length: Tensor  # (n, U)
    need: Tensor  # (n, U)
    depth: Tensor  # (N,)
    ends: Tensor  # (N,)
    on_path: Tensor  # (N, U)
    through: Tensor  # (N, U)
    child_tok: Tensor  # (N, B)
    child_id: Tensor  # (N, B)

    @classmethod
    def build(cls, constraints: Sequence[SentenceConstraints]) -> "ConstraintTrie":
        """The trie of every sentence's constraints (empty phrases are met by any output and dropped)."""
        distinct = [Counter(tuple(int(x) for x in c) for c in _phrases(cons) if len(c)) for cons in constraints]
        n, width = len(distinct), max([len(d) for d in distinct] + [1])
        length, need = torch.zeros(n, width, dtype=torch.long), torch.zeros(n, width, dtype=torch.long)
        depth: list[int] = []
        ends: list[int] = []
        paths: list[set[int]] = []  # the local constraints through each node
        children: list[dict[int, int]] = []
        roots: list[int] = []

        def new_node(at_depth: int, through: set[int]) -> int:
            depth.append(at_depth)
            ends.append(-1)
            paths.append(through)
            children.append({})
            return len(depth) - 1

        for i, phrases in enumerate(distinct):
            roots.append(new_node(0, set(range(len(phrases)))))
            for u, (phrase, count) in enumerate(phrases.items()):
                length[i, u], need[i, u] = len(phrase), count
                v = roots[-1]
                for tok in phrase:
                    if tok not in children[v]:
                        children[v][tok] = new_node(depth[v] + 1, set())
                    v = children[v][tok]
                    paths[v].add(u)
                ends[v] = u
        nodes, branch = len(depth), max(len(c) for c in children)
        on_path = torch.zeros(nodes, width, dtype=torch.bool)
        child_tok, child_id = torch.full((nodes, max(branch, 1)), -1, dtype=torch.long), torch.full((nodes, max(branch, 1)), -1, dtype=torch.long)
        for v in range(nodes):
            on_path[v, list(paths[v])] = True
            for b, (tok, c) in enumerate(children[v].items()):
                child_tok[v, b], child_id[v, b] = tok, c
        depth_t = torch.tensor(depth, dtype=torch.long)
        sentence = torch.repeat_interleave(torch.arange(n), torch.diff(torch.tensor(roots + [nodes])))
        through = on_path & (depth_t[:, None] < length[sentence])
        return cls(torch.tensor(roots), length, need, depth_t, torch.tensor(ends), on_path, through, child_tok, child_id)

    @property
    def width(self) -> int:
        """The most children of a node: how many constraint tokens a hypothesis can advance with."""
        return self.child_tok.size(1)

    def total(self, sent: Tensor) -> Tensor:
        """The constraint tokens of sentences ``sent``: the top bank."""
        return (self.length[sent] * self.need[sent]).sum(-1)

    def remaining(self, node: Tensor, count: Tensor, sent: Tensor) -> Tensor:
        """How many more tokens a hypothesis needs to meet all its constraints (``node``,
        ``sent`` (...), ``count`` (..., U)): the unmet phrases' tokens, less the progress of the
        one in progress (it may be finished by continuing). Its bank is :meth:`total` - this."""
        return self.unmet_tokens(count, sent) - self.depth[node] * (self.through[node] & (count < self.need[sent])).any(-1)

    def unmet_tokens(self, count: Tensor, sent: Tensor) -> Tensor:
        """The tokens of the phrases still needed (``count`` (..., U) met so far), none of them begun."""
        return ((self.need[sent] - count).clamp(min=0) * self.length[sent]).sum(-1)

    def forward_tokens(self, node: Tensor, count: Tensor, sent: Tensor) -> Tensor:
        """(..., B) the tokens that advance an unmet constraint from ``node`` (-1: none): the
        children of the node in progress, or of the root, on the path of a phrase still needed."""
        unmet = count < self.need[sent]
        ids = self.child_id[node]
        live = (ids >= 0) & (self.on_path[ids.clamp(min=0)] & unmet[..., None, :]).any(-1)
        return self.child_tok[node].masked_fill(~live, -1)

    def _child(self, of: Tensor, tok: Tensor, unmet: Tensor) -> Tensor:
        """The child of node ``of`` reached by ``tok`` on a path still needed (-1: none)."""
        ids = self.child_id[of]
        hit = (self.child_tok[of] == tok[..., None]) & (ids >= 0)
        hit &= (self.on_path[ids.clamp(min=0)] & unmet[..., None, :]).any(-1)
        return torch.where(hit.any(-1), (ids.clamp(min=0) * hit).sum(-1), -1)

    def advance(self, node: Tensor, count: Tensor, sent: Tensor, tok: Tensor) -> tuple[Tensor, Tensor]:
        """The states after emitting ``tok`` (all (...), ``count`` (..., U)), vectorized over any
        shape (Hu et al. 2019, Sec. 3.1): continue the phrase in progress, else drop it and try
        ``tok`` from the root, else stay at the root; a completed phrase still needed counts once;
        a node no unmet phrase goes on from returns to the root."""
        need = self.need[sent]
        unmet = count < need
        root = self.root[sent]
        nxt = self._child(node, tok, unmet)
        nxt = torch.where(nxt >= 0, nxt, self._child(root, tok, unmet))
        nxt = torch.where(nxt >= 0, nxt, root)
        ended = self.ends[nxt]
        met = (ended >= 0) & unmet.gather(-1, ended.clamp(min=0)[..., None]).squeeze(-1)
        count = count + torch.nn.functional.one_hot(ended.clamp(min=0), count.size(-1)) * met[..., None]
        going_on = (self.through[nxt] & (count < need)).any(-1)
        return torch.where(going_on, nxt, root), count


def allocate(score: Tensor, bank: Tensor, finished: Tensor, k: int) -> Tensor:
    """Dynamic beam allocation (Post & Vilar 2018, Sec. 3) of every sentence's candidates at once
    (Hu et al. 2019, Sec. 3.2): ``score``, ``bank`` and ``finished`` (m, K) -> the k chosen
    candidates (m, k), best score first.

    Finished candidates among the k best by score keep their slots; the others go to the open
    candidates with a finite score round-robin over the banks: the i-th best of each bank before
    the (i+1)-th of any, higher banks first. Candidates left over (finished ones outside the k
    best, -inf scores) fill what remains, by score. With a single bank (no constraints) this is
    the top-k by score."""
    m, big_k = score.shape
    in_top = torch.zeros_like(finished).scatter_(1, score.topk(k, dim=-1).indices, True)
    is_open = ~finished & score.isfinite()
    order = score.argsort(dim=-1, descending=True, stable=True)
    position = torch.empty_like(order).scatter_(1, order, torch.arange(big_k).expand(m, big_k))
    ahead = (bank[:, :, None] == bank[:, None, :]) & is_open[:, None, :] & (position[:, None, :] < position[:, :, None])
    banks = int(bank.max()) + 1 if bank.numel() else 1
    key = ahead.sum(-1) * banks + (banks - 1 - bank)
    key = torch.where(is_open, key, (big_k + 1) * banks + position)
    key = key.masked_fill(in_top & finished, -1)
    chosen = key.argsort(dim=-1, stable=True)[:, :k]
    return chosen.gather(1, score.gather(1, chosen).argsort(dim=-1, descending=True, stable=True))


class StepRows:
    """The constraint states of the rows one search step computes (:meth:`BeamConstraints.rows`)."""

    def __init__(self, owner: "BeamConstraints", step: int, rows: Tensor):
        trie, k = owner.trie, owner.k
        self.node, self.count, self.sent = owner.node.view(-1)[rows], owner.count.view(-1, owner.count.size(-1))[rows], owner.sent.repeat_interleave(k)[rows]
        self.forward = trie.forward_tokens(self.node, self.count, self.sent)  # (R, B)
        unmet_tokens = trie.unmet_tokens(self.count, self.sent)
        self.unmet = unmet_tokens > 0
        # a token that drops the phrase in progress leaves at most all unmet tokens to write: only
        # where they still fit after it may it be chosen (else only the tokens that advance)
        self.tight = self.unmet & (step + 1 + unmet_tokens > owner.limits[self.sent])
        self.owner = owner
        # a row whose last token completed a constraint may not go on with that word (BatchConstraints),
        # unless it is at its length limit (then only EOS is left)
        self.closing = owner.closing.view(-1)[rows] & (step < owner.limits[self.sent]) if owner.continuing is not None else None

    def _not_continuing(self, rows: Tensor, device) -> Tensor:
        """(len(rows), V) bool: the tokens the closing ``rows`` may write after their completed
        constraint: every piece but those continuing a word, and the tokens that advance a constraint."""
        allowed = ~self.owner.continuing.to(device).expand(len(rows), -1).clone()
        fwd = self.forward[rows].to(device)
        allowed.scatter_(1, fwd.clamp(min=0), (fwd >= 0) | allowed.gather(1, fwd.clamp(min=0)))
        return allowed

    def restrict(self, log_probs: Tensor) -> None:
        """In place on the rows' log-probabilities (R, V): no EOS before all constraints are met;
        rows without room for a detour keep the constraint tokens only."""
        self.owner.check_vocabulary(log_probs.size(-1))
        device = log_probs.device
        if bool(self.unmet.any()):
            log_probs[self.unmet.to(device), EOS] = _NEG
        if bool(self.tight.any()):
            rows = self.tight.nonzero().view(-1)
            fwd, at = self.forward[rows].to(device), rows.to(device)
            kept = log_probs[at].gather(1, fwd.clamp(min=0)).masked_fill(fwd < 0, _NEG)
            log_probs[at] = log_probs.new_full((len(at), log_probs.size(-1)), _NEG).scatter_(1, fwd.clamp(min=0), kept)
        if self.closing is not None and bool(self.closing.any()):
            rows = self.closing.nonzero().view(-1)
            at = rows.to(device)
            log_probs[at] = log_probs[at].masked_fill(~self._not_continuing(rows, device), _NEG)

    def extend(self, log_probs: Tensor, values: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
        """The rows' top-k candidates (R, k) followed by their constraint tokens (R, B) that the
        top-k lacks (Post & Vilar's "constraint" candidates; -inf and PAD where none)."""
        fwd = self.forward.to(log_probs.device)
        extra = log_probs.gather(1, fwd.clamp(min=0))
        extra = extra.masked_fill((fwd < 0) | (fwd[:, :, None] == index[:, None, :]).any(-1), _NEG)
        return torch.cat([values, extra], dim=1), torch.cat([index, fwd.clamp(min=0).masked_fill(fwd < 0, PAD)], dim=1)


class BeamConstraints:
    """The constraint states of a beam search's hypotheses (m sentences alive, k beams each)."""

    def __init__(self, trie: ConstraintTrie, limits: Tensor, k: int, names: Sequence[str] = (), continuing: Tensor | None = None, glue: Tensor | None = None):
        self.trie, self.limits, self.k, self.names, self.continuing, self.glue = trie, limits, k, list(names), continuing, glue
        self._vocabulary: int | None = None
        n = len(trie.root)
        self.sent = torch.arange(n)  # the batch rows of the sentences alive
        self.node = trie.root[:, None].expand(n, k).clone()
        self.count = torch.zeros(n, k, trie.length.size(1), dtype=torch.long)
        self.closing = torch.zeros(n, k, dtype=torch.bool)  # the last token completed a constraint

    @classmethod
    def build(cls, constraints: Sequence[SentenceConstraints], limits: Tensor, k: int, ids: Sequence[int] | None = None) -> "BeamConstraints":
        """The states of a batch whose row ``i`` has ``constraints[i]`` and output length limit
        ``limits[i]`` (its length counts the tokens before EOS). A sentence whose constraint
        tokens exceed its limit, or a constraint with PAD, BOS or EOS, is a :class:`UserError`
        naming the sentence (``ids[i]``: its index in the input, counted from 0)."""
        if len(constraints) != len(limits):
            raise ValueError(f"constraints for {len(constraints)} sentences, the batch has {len(limits)}")
        names = [f"sentence {(int(ids[i]) if ids is not None else i) + 1}" for i in range(len(limits))]
        for name, cons in zip(names, constraints):
            for c in _phrases(cons):
                bad = [int(x) for x in c if int(x) in (PAD, BOS, EOS) or int(x) < 0]
                if bad:
                    raise UserError(f"{name}: constraint {[int(x) for x in c]} has token id {bad[0]}, not a word of the target vocabulary")
        trie = ConstraintTrie.build(constraints)
        need = trie.total(torch.arange(len(limits)))
        over = (need > limits).nonzero().view(-1)
        if len(over):
            i = int(over[0])
            raise UserError(f"{names[i]}: its constraints take {int(need[i])} target tokens, more than its output length limit of {int(limits[i])} (decode.max_len_a/max_len_b, model.max_positions): shorten or drop a constraint")
        return cls(trie, limits, k, names, getattr(constraints, "continuing", None), getattr(constraints, "glue", None))

    def check_vocabulary(self, size: int) -> None:
        """A constraint token id outside the model's target vocabulary of ``size`` is a :class:`UserError`."""
        if self._vocabulary == size:
            return
        trie = self.trie
        bad = (trie.child_tok >= size).any(-1).nonzero().view(-1)
        if len(bad):
            sentence = int((trie.root <= int(bad[0])).sum()) - 1
            tok = int(trie.child_tok[bad[0]].max())
            raise UserError(f"{self.names[sentence]}: constraint token id {tok} is outside the target vocabulary ({size} pieces)")
        self._vocabulary = size

    @property
    def width(self) -> int:
        """Candidates a row adds to its top-k (:meth:`StepRows.extend`)."""
        return self.trie.width

    def rows(self, step: int, rows: Tensor | None, first: bool) -> StepRows:
        """The states of the rows a step computes: ``rows`` (of the m * k; None: all), or at the
        ``first`` step one per sentence."""
        m, k = self.node.shape
        index = torch.arange(m) * k if first else (torch.arange(m * k) if rows is None else rows.cpu())
        return StepRows(self, step, index)

    def select(self, cand_score: Tensor, cand_tok: Tensor, done: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Choose the k candidates of each sentence by :func:`allocate` from ``cand_score`` and
        ``cand_tok`` (m, k, K') of the beams (m, k), ``done`` the finished ones (frozen: their
        candidates keep their state), and move the states to them. Returns their scores and
        indices into the m × (k·K') candidates, as ``topk`` would."""
        m, kb, width = cand_tok.shape
        sent = self.sent[:, None, None].expand(m, kb, width)
        node = self.node[:, :, None].expand(m, kb, width)
        count = self.count[:, :, None, :].expand(m, kb, width, self.count.size(-1))
        new_node, new_count = self.trie.advance(node, count, sent, cand_tok)
        new_node = torch.where(done[:, :, None], node, new_node)
        new_count = torch.where(done[:, :, None, None], count, new_count)
        bank = self.trie.total(sent) - self.trie.remaining(new_node, new_count, sent)
        finished = done[:, :, None] | cand_tok.eq(EOS)
        score = cand_score.reshape(m, -1)
        top_idx = allocate(score, bank.reshape(m, -1), finished.reshape(m, -1), k)
        self.node = new_node.reshape(m, -1).gather(1, top_idx)
        closing = new_count.sum(-1) > self.count.sum(-1)[:, :, None]
        if self.glue is not None:  # still inside the completed phrase's last word: "Texas-"
            closing |= self.closing[:, :, None].to(closing.device) & self.glue.to(cand_tok.device)[cand_tok]
        closing &= ~done[:, :, None]
        self.count = new_count.reshape(m, -1, new_count.size(-1)).gather(1, top_idx[:, :, None].expand(-1, -1, new_count.size(-1)))
        self.closing = closing.reshape(m, -1).gather(1, top_idx)
        return score.gather(1, top_idx), top_idx

    def keep(self, index: Tensor) -> None:
        """Only the sentences ``index`` (of the m alive) go on."""
        self.sent, self.node, self.count, self.closing = self.sent[index], self.node[index], self.count[index], self.closing[index]


def met_all(tokens: Sequence[int], constraints: SentenceConstraints) -> bool:
    """Whether ``tokens`` contain every constraint as a contiguous phrase, each as often as it is
    given (non-overlapping occurrences): what a finished constrained hypothesis guarantees."""
    for phrase, count in Counter(tuple(int(x) for x in c) for c in _phrases(constraints) if len(c)).items():
        found, i, n = 0, 0, len(phrase)
        while i + n <= len(tokens):
            if tuple(tokens[i : i + n]) == phrase:
                found, i = found + 1, i + n
            else:
                i += 1
        if found < count:
            return False
    return True


def phrase_ids(tok: "Tokenizer", phrases: Sequence[str], name: str = "constraint") -> list[list[int]]:
    """Target phrases (text) to the token ids the model writes: the target tokenizer's own
    pipeline (:meth:`~syntaxnmt.data.subwords.Tokenizer.encode`: lowercasing when the data was
    lowercased, Moses tokenization when configured, then SentencePiece, or the word vocabulary),
    as the training targets were segmented; a phrase is segmented on its own, so its first word
    starts with a word boundary, as a word inside a sentence does. An empty phrase or one with a
    piece outside the vocabulary (``<unk>``) is a :class:`UserError` naming ``name``."""
    out = []
    for phrase in phrases:
        ids = tok.encode(phrase)
        if not ids:
            raise UserError(f"{name}: empty constraint {phrase!r}")
        if UNK in ids:
            raise UserError(f"{name}: constraint {phrase!r} has a piece outside the model's target vocabulary (it would be written <unk>)")
        out.append([int(i) for i in ids])
    return out


def read_constraint_lines(path: str | Path, lines: int | None = None) -> list[list[str]]:
    """A constraints file: one line per input line, its target phrases separated by tabs (an
    empty line: none), as fairseq's ``examples/constrained_decoding`` writes them after the
    source. ``lines``: how many the input has; another count is a :class:`UserError` naming the file."""
    if not Path(path).is_file():
        raise UserError(f"{path}: constraints file not found")
    out = [[p.strip() for p in line.split("\t") if p.strip()] for line in read_lines(path)]
    if lines is not None and len(out) != lines:
        raise UserError(f"{path}: {len(out)} lines of constraints for {lines} input lines (one line per input line, empty for none)")
    return out
