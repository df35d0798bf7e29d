"""Model families. ``build_model`` picks one by ``ModelConfig.arch``."""

from __future__ import annotations

from torch import nn

from syntaxnmt.config import ModelConfig


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int, **vocabs: int) -> nn.Module:
    """The model named by ``cfg.arch``. ``vocabs`` gives extra vocabulary sizes (tag sets) when used."""
    if cfg.arch == "transformer":
        from syntaxnmt.model.transformer import Transformer

        return Transformer(cfg, src_vocab, tgt_vocab, **vocabs)
    if cfg.arch == "rnn":
        from syntaxnmt.model.rnn import RNNModel

        return RNNModel(cfg, src_vocab, tgt_vocab)
    raise ValueError(f"unknown architecture {cfg.arch}")
