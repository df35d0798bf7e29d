"""Stage 5, alignment: ``symmetrize`` (combining two directions), ``external`` (eflomal),
``lexicon`` (P(e|f) tables from links) and ``extract`` (links read off a trained model's
cross-attention). Pharaoh files, AER and word/subword projection are data
(:mod:`syntaxnmt.data.links`); the training terms are :mod:`syntaxnmt.training.alignment`; the
``align-experiment`` driver is :mod:`syntaxnmt.experiments.alignment`.

Conventions used throughout
---------------------------
A *link* is a pair ``(i, j)``: ``i`` is a **source** position, ``j`` a **target** position,
both 0-indexed. An alignment is a ``set`` of links.

Attention as alignment: the cross-attention of a Transformer is (B, H, T, S) per decoder layer;
row ``t`` is the decoder position that *predicts* target token ``tgt_out[t]``, so a link from
row ``t`` to column ``s`` is the link ``(s, t)`` between source token ``src[s]`` and target
token ``tgt_out[t]``. The last non-padding source position is EOS and ``tgt_out`` ends with EOS;
:func:`~syntaxnmt.alignment.extract.extract_alignments` drops both (and padding) before choosing
links, so every link joins two real subwords. Shift-Att (Chen et al. 2020) reads target token
``tgt_out[t]`` from row ``t + 1`` instead, the step where it is the decoder's input
(``tgt_in[t + 1]``).
"""
