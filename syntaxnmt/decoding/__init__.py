"""Stage 3, decoding: search, translate, ensembles, checkpoint averaging, unknown-word replacement
and CTranslate2 export and engine. Imports data, model and the leaves; never training code."""
