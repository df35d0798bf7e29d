"""Stage 1, data: raw text, parses and alignments to cached arrays and padded batches.

``corpus`` (line-aligned parallel text), ``subwords`` / ``words`` (vocabularies), ``annotations``
(spaCy / CoNLL-U parses), ``links`` (Pharaoh alignments, AER, word<->subword projection, reference
alignment matrices), ``features`` (source features at the subword level), ``prepare`` (the cache),
``batches`` (token-count batches), ``synthetic`` (the built-in corpus), ``discourse`` (its documents
with discourse phenomena) and ``contrastive`` (contrastive test sets). Imports only the leaves."""
