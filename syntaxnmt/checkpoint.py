"""Checkpoints: written atomically (temp file, then rename), loaded safely with a clear error.

Every checkpoint is read by :func:`load_checkpoint` with ``torch.load(..., weights_only=True)``:
tensors, NumPy arrays, numbers, strings, bytes, lists, tuples and dicts load; any other Python object (a
pickled class or function, which could run code) is refused with a :class:`UserError`, unless
the user passed ``--trust-checkpoint`` (:func:`trusting_checkpoints`). Model weights that are
not finite are refused too, and so are a damaged stored tokenizer (:func:`check_tokenizer_assets`),
a zip archive that expands beyond :func:`uncompressed_limit` and a tensor that claims more elements
than its storage holds (a 1.5 MB file must not make the loader allocate a gigabyte).
"""

from __future__ import annotations

import io
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syntaxnmt.errors import UserError
from syntaxnmt.textio import atomic_write

_trust = False  # --trust-checkpoint: also load what the safe loader refuses (may run code)

_TORCH_FILE_STARTS = (b"PK", b"\x80")

# NumPy arrays are data too: checkpoints written before RNG states were stored as tensors hold
# NumPy's Mersenne Twister keys as an array. Their reconstruction is allowed; what the arrays
# hold goes through the same restricted unpickler, so no other object can load.
_NUMPY_ARRAYS = [np.dtype, np.ndarray, getattr(np, "_core", getattr(np, "core", None)).multiarray._reconstruct]
_NUMPY_ARRAYS += [type(np.dtype(t)) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")]  # numeric dtypes only  # torch.save: a zip archive, or (before torch 1.6) a pickle


_WORD_VOCABULARY = b"syntaxnmt word vocabulary\n"
"""How a word vocabulary stored in a checkpoint begins (``syntaxnmt.data.words.MAGIC``, a higher stage)."""

TOKENIZER_KEYS = {"spm_src": "source", "spm_tgt": "target"}
"""The tokenizers a checkpoint's ``assets`` hold (SentencePiece models or word vocabularies), by side."""


def uncompressed_limit(size: int) -> int:
    """The most bytes a checkpoint of ``size`` bytes on disk may expand to: twice its size plus
    1 MiB. ``torch.save`` stores tensors uncompressed, so a real checkpoint expands to about its
    own size; a zip of deflated zeros (a 1 MB file declaring a 1 GiB tensor) is refused unread."""
    return 2 * size + (1 << 20)


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Serialize ``state`` to memory, then write it atomically: a crash never leaves half a file."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(path, lambda f: f.write(buf.getbuffer()))


@contextmanager
def trusting_checkpoints(trust: bool = True) -> Iterator[None]:
    """Within the block, checkpoints that the safe loader refuses are unpickled in full
    (``--trust-checkpoint``): only for files of a trusted origin, as unpickling can run code."""
    global _trust
    old, _trust = _trust, trust
    try:
        yield
    finally:
        _trust = old


def _refused_globals(path: Path, error: Exception) -> list[str]:
    """The Python objects (``module.name``) that made the safe loader refuse ``path``; empty when
    it failed for another reason (a damaged or foreign file)."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)  # reads, never runs
    except Exception:  # not a zip checkpoint: read the names off torch's message
        names = []
    if not names and "Weights only load failed" in str(error):
        names = re.findall(r"GLOBAL ([\w.]+)", str(error))
    return list(dict.fromkeys(names))


def _reason(e: Exception) -> str:
    """``e`` in one short line: its first sentence (for the safe loader's long message, the
    unpickler's own error)."""
    text = str(e)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first.split(". ")[0].rstrip(".")[:200]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def nonfinite_weight(model: Mapping[str, Any]) -> str | None:
    """The name of the first floating tensor of ``model`` (a state dict) that holds NaN or an
    infinity, or None."""
    for name, value in model.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return name
    return None


def check_finite_weights(path: str | os.PathLike, model: Mapping[str, Any]) -> None:
    """A :class:`UserError` naming ``path`` and the first floating tensor of ``model`` (a state
    dict) that holds NaN or an infinity."""
    name = nonfinite_weight(model)
    if name is not None:
        raise UserError(f"{path}: the model weights are not finite ({name} holds NaN or inf): a diverged or damaged checkpoint")


def weights_mismatch(expected: Mapping[str, Any], weights: Mapping[str, Any], limit: int = 2) -> str | None:
    """How the state dict ``weights`` fails to fit a model whose own state dict is ``expected``
    (tensor shapes, missing and unexpected names; the first ``limit`` of each), or None when it fits."""
    shapes = []
    for name, value in expected.items():
        got = weights.get(name)
        if got is None or not isinstance(value, torch.Tensor):
            continue
        if not isinstance(got, torch.Tensor):
            shapes.append(f"{name} is a {type(got).__name__}, not a tensor")
        elif got.shape != value.shape:
            shapes.append(f"{name} is {list(got.shape)} in the checkpoint, {list(value.shape)} in the model")
        elif got.is_floating_point() != value.is_floating_point():  # int64 weights would load truncated
            shapes.append(f"{name} is {str(got.dtype).removeprefix('torch.')} in the checkpoint, {str(value.dtype).removeprefix('torch.')} in the model")
    missing = [name for name in expected if name not in weights]
    unexpected = [name for name in weights if name not in expected]
    problems = []
    for items, what in ((shapes, ""), (missing, "missing: "), (unexpected, "not in the model: ")):
        if items:
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            problems.append(f"{what}{', '.join(items[:limit])}{more}")
    return "; ".join(problems) or None


def load_weights(model: torch.nn.Module, weights: Mapping[str, Any], path: str | os.PathLike, expected: str) -> None:
    """Load the state dict ``weights`` (from the checkpoint ``path``) into ``model``; weights of
    another architecture (other shapes, missing or extra tensors) are a :class:`UserError` naming
    ``path``, what was ``expected`` of them and the first differences -- not PyTorch's traceback."""
    problem = weights_mismatch(model.state_dict(), weights)
    if problem is None:
        try:
            model.load_state_dict(weights)
            return
        except RuntimeError as e:  # anything the comparison above does not foresee
            problem = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e))[:300]
    raise UserError(f"{path}: its weights do not fit {expected} ({problem})")


def _check_archive(path: Path) -> None:
    """A :class:`UserError` when the zip archive ``path`` declares more uncompressed bytes than
    :func:`uncompressed_limit` allows (read from its directory: nothing is extracted)."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return  # a damaged archive: torch.load says what is wrong with it
    if declared > uncompressed_limit(size):
        raise UserError(f"{path}: its archive expands to {declared:,} bytes from {size:,} on disk (over the limit of {uncompressed_limit(size):,}): a damaged or crafted checkpoint")


def _check_tensor_sizes(path: str | os.PathLike, model: Mapping[str, Any]) -> None:
    """A :class:`UserError` naming the first tensor of ``model`` that claims more elements than its
    storage holds (a crafted stride-0 view: checking it would allocate its full size)."""
    for name, value in model.items():
        if isinstance(value, torch.Tensor) and value.numel() * value.element_size() > value.untyped_storage().nbytes():
            raise UserError(f"{path}: the model weight {name} claims {value.numel():,} elements over a storage of {value.untyped_storage().nbytes():,} bytes: a damaged or crafted checkpoint")


def check_tokenizer_assets(path: str | os.PathLike, assets: Any) -> None:
    """A :class:`UserError` naming ``path`` unless ``assets`` (the tokenizers a checkpoint stores)
    is a dict whose :data:`TOKENIZER_KEYS` are a readable SentencePiece model or a word vocabulary
    and whose ``tags`` are None or a dict -- not SentencePiece's traceback at the first use."""
    if not isinstance(assets, Mapping):
        raise UserError(f"{path}: its stored tokenizers ('assets') are a {type(assets).__name__}, not a dict: a damaged checkpoint")
    for key, side in TOKENIZER_KEYS.items():
        model = assets.get(key)
        if not isinstance(model, bytes):
            raise UserError(f"{path}: its stored {side} tokenizer ('assets' {key}) is a {type(model).__name__}, not the bytes of a model: a damaged checkpoint")
        if model.startswith(_WORD_VOCABULARY):
            continue  # read by syntaxnmt.data.words, which names what is wrong with it
        import sentencepiece as spm  # deferred: a checkpoint without tokenizers does not need it

        try:
            spm.SentencePieceProcessor(model_proto=model)
        except (RuntimeError, TypeError, ValueError) as e:
            raise UserError(f"{path}: its stored {side} tokenizer ('assets' {key}) is not a readable SentencePiece model ({_reason(e)}): a damaged checkpoint") from None
    if not isinstance(assets.get("tags"), (Mapping, type(None))):
        raise UserError(f"{path}: its stored tag vocabularies ('assets' tags) are a {type(assets['tags']).__name__}, not a dict: a damaged checkpoint")


def _torch_load(path: Path, weights_only: bool, lazy: bool) -> Any:
    """``torch.load`` onto the CPU; ``lazy``: the archive's tensors memory-mapped, so that those of
    keys nobody reads (a training checkpoint's optimizer state, for translation) are never read --
    an archive that cannot be mapped (deflated entries) is read in full, within :func:`uncompressed_limit`."""
    if lazy:
        try:
            return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
        except pickle.UnpicklingError:  # refused objects: the caller decides
            raise
        except Exception:  # not mappable; reading it in full says what is wrong, if anything
            pass
    return torch.load(path, map_location="cpu", weights_only=weights_only)


def load_checkpoint(path: str | os.PathLike, trust: bool | None = None, lazy: bool = False) -> dict[str, Any]:
    """The dict saved at ``path``, loaded with ``weights_only=True`` (no code runs). A file that
    holds other Python objects is a :class:`UserError` unless ``trust`` (default: the
    ``--trust-checkpoint`` switch, :func:`trusting_checkpoints`); so are a missing, damaged or
    foreign file, an object that is not a dict, and model weights with NaN or inf. ``lazy``: the
    tensors are memory-mapped, so that those of keys the caller does not use are never read (for
    inference: the optimizer state of a training checkpoint, or any key it does not know)."""
    path = Path(path)
    trust = _trust if trust is None else trust
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    with open(path, "rb") as f:
        start = f.read(2)
    if not start.startswith(_TORCH_FILE_STARTS):
        raise UserError(f"{path}: not a syntaxnmt checkpoint (not a file written by torch.save)")
    if start.startswith(b"PK"):
        _check_archive(path)
    try:
        with warnings.catch_warnings():  # one line on stderr: no note on a plain pickle's protocol
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            with torch.serialization.safe_globals(_NUMPY_ARRAYS):
                state = _torch_load(path, True, lazy=lazy and start.startswith(b"PK"))
    except pickle.UnpicklingError as e:
        refused = _refused_globals(path, e)
        if not refused:
            raise UserError(f"{path}: not a readable syntaxnmt checkpoint ({_reason(e)})") from None
        if not trust:
            raise UserError(
                f"{path}: holds Python objects that the safe checkpoint loader refuses ({', '.join(refused[:3])}), "
                "as unpickling them can run code; pass --trust-checkpoint to load it only if you trust its origin"
            ) from None
        try:
            state = _torch_load(path, False, lazy=lazy and start.startswith(b"PK"))
        except Exception as e2:
            raise UserError(f"{path}: not a readable syntaxnmt checkpoint ({_reason(e2)})") from None
    except Exception as e:  # a truncated or damaged file
        raise UserError(f"{path}: not a readable syntaxnmt checkpoint ({_reason(e)})") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a syntaxnmt checkpoint (it holds a {type(state).__name__}, not a dict)")
    if "model" in state:
        if not isinstance(state["model"], Mapping):
            raise UserError(f"{path}: not a syntaxnmt checkpoint (its 'model' is a {type(state['model']).__name__}, not a state dict)")
        _check_tensor_sizes(path, state["model"])
        check_finite_weights(path, state["model"])
    if "assets" in state:
        check_tokenizer_assets(path, state["assets"])
    return state


def load_model_checkpoint(path: str | os.PathLike, trust: bool | None = None, lazy: bool = False) -> dict[str, Any]:
    """:func:`load_checkpoint`, and a :class:`UserError` unless it holds a model: a ``config``
    dict and the ``model`` weights (a bare state dict, for one, does not)."""
    state = load_checkpoint(path, trust, lazy)
    missing = [k for k in ("config", "model") if not isinstance(state.get(k), Mapping)]
    if missing:
        keys = ", ".join(map(repr, list(state)[:3])) or "none"
        raise UserError(f"{path}: not a syntaxnmt checkpoint (no {' or '.join(map(repr, missing))}; its first keys: {keys})")
    return state
