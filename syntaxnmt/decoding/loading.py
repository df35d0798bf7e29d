"""Loading a trained model for translation: its checkpoint (a file or a run folder), the config
it was trained with and its tokenizers, and the options that may change after training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from syntaxnmt.checkpoint import load_model_checkpoint, load_weights
from syntaxnmt.config import Config, config_from_dict, merge_trees
from syntaxnmt.cpu import install as install_cpu
from syntaxnmt.cpu.calibration import note
from syntaxnmt.cpu.calibration import prepare as prepare_cpu_kernels
from syntaxnmt.cpu.threads import describe_threads
from syntaxnmt.data.documents import document_context
from syntaxnmt.data.prepare import Tokenizers, load_tokenizers, tokenizers_from_assets
from syntaxnmt.decoding.calibration import decoding_step
from syntaxnmt.errors import UserError
from syntaxnmt.model import build_model, set_hard_attention


def checkpoint_path(cfg: Config, which: str) -> Path:
    """``best``/``last`` name a checkpoint of the run in ``cfg.work_dir``; anything else is a path."""
    return Path(cfg.work_dir) / f"{which}.pt" if which in ("best", "last") else Path(which)


def checkpoint_file(path: str | Path) -> Path:
    """A checkpoint file, or a run folder (a ``work_dir``): its ``best.pt``, else its ``last.pt``."""
    path = Path(path)
    if path.is_dir():
        for name in ("best.pt", "last.pt"):
            if (path / name).is_file():
                return path / name
        raise UserError(f"{path}: a folder without best.pt or last.pt (give a checkpoint file, or a run's work_dir)")
    return path


# ---------------------------------------------------------------- options at translation time

TRANSLATE_TIME_KEYS = ("decode", "model.hard_attention", "data.spacy_pipeline")
"""What may change after training: the search (every ``decode.*`` key), one-hot cross-attention at
decoding (``model.hard_attention``: ``none`` or ``decode``) and the name of the installed spaCy
pipeline that reads raw input (``data.spacy_pipeline``). ``model.attention_normalizer`` is not
among them: the scores were learned for the normalizer the model was trained with, and sparsemax
or entmax of softmax-trained scores is another model (train it with that normalizer)."""


def _leaves(tree: dict, prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of a nested dict."""
    out = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        out += _leaves(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def _at(tree: Any, dotted: str) -> Any:
    for k in dotted.split("."):
        tree = tree.get(k) if isinstance(tree, dict) else None
    return tree


def translation_config(cfg: Config, overrides: dict, *, source: str = "translate options") -> Config:
    """``cfg`` (a model's stored config) with the translation-time ``overrides`` (a nested dict, as
    :func:`syntaxnmt.config.parse_overrides` makes) applied and validated like a config file: an
    unknown key or a wrong value is a :class:`UserError` naming it. A key outside
    :data:`TRANSLATE_TIME_KEYS` is refused unless its value is the one the model was trained with
    (it changes nothing); ``model.hard_attention: train`` is refused on a model trained soft."""
    if not overrides:
        return cfg
    stored = cfg.model_dump(mode="json")
    new = config_from_dict(merge_trees(stored, overrides), source=source)
    dumped = new.model_dump(mode="json")
    for key in _leaves(overrides):
        if any(key == a or key.startswith(a + ".") for a in TRANSLATE_TIME_KEYS) or _at(dumped, key) == _at(stored, key):
            continue
        raise UserError(
            f"{source}: --{key} cannot change after training (the model has {_at(stored, key)!r}); "
            f"at translation time give --decode.*, --model.hard_attention=decode|none or --data.spacy_pipeline"
        )
    if new.model.hard_attention == "train" and cfg.model.hard_attention != "train":
        raise UserError(f"{source}: --model.hard_attention=train is a training choice (this model was trained with {cfg.model.hard_attention!r}): give decode (one-hot at decoding) or none")
    return new


def apply_translation_config(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """Make a loaded model (or ensemble) follow the decode-time model options of ``cfg``
    (:func:`translation_config`): ``model.hard_attention``."""
    if model.cfg.hard_attention != cfg.model.hard_attention:
        set_hard_attention(model, cfg.model.hard_attention)
    return model


def load_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, Config, Tokenizers]:
    """A model ready for inference, with the config it was trained with and its tokenizers (stored
    in the checkpoint; one written before they were is read with its run's prepared corpus); on
    CPU with its linear layers' kernels chosen (:func:`syntaxnmt.cpu.calibration.prepare`, the
    process's ``--cpu-kernels``)."""
    state = load_model_checkpoint(path, lazy=True)  # a training checkpoint's optimizer state is never read
    cfg = config_from_dict(state["config"], source=f"{path} (stored config)")
    if "assets" in state:
        toks = tokenizers_from_assets(cfg, state["assets"])
    else:
        try:
            toks = load_tokenizers(cfg)
        except UserError as e:
            raise UserError(f"{path} holds no tokenizers (an older checkpoint): it needs its prepared corpus, run from the folder it was trained in ({e})") from None
    model = build_model(cfg, **toks.vocab_sizes())
    model.document_context = document_context(cfg, toks.src, toks.tgt)
    load_weights(model, state["model"], path, "the model of its own stored config: a damaged checkpoint, or weights put beside another model's config")
    if device.type == "cpu":
        install_cpu(model)  # the CPU's execution (syntaxnmt.cpu)
        note(f"device cpu, {describe_threads()}")  # as training logs it; the thread policy's later changes are logged too
        prepare_cpu_kernels(model, None, timing=lambda: decoding_step(model), log=note)
    return model.to(device).eval(), cfg, toks
