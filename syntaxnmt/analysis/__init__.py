"""Stage 5, analysis -- looking inside attention: export the weights (:mod:`.export`), plot them (:mod:`.plot`) and
measure what each head attends to in the source dependency tree (:mod:`.heads`).
See docs/attention.md."""
