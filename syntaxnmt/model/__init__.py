"""Model families (nn.Modules only: the model never imports data or training code).

:func:`build_model` (:mod:`.factory`) builds everything a checkpoint holds; ``transformer`` and
``rnn`` are the encoder-decoders, ``attention`` the one multi-head attention module that the
extensions of ``syntax_attention`` plug into, ``rnn_scores`` and ``normalizers`` the classical
score functions and the attention normalizers, ``heads`` the auxiliary modules on the encoder,
``outputs`` what a model returns.
"""

from syntaxnmt.model.factory import build_model, set_hard_attention
from syntaxnmt.model.outputs import average_heads, layer_head

__all__ = ["build_model", "set_hard_attention", "average_heads", "layer_head"]
