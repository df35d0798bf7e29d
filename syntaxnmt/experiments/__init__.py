"""Stage 6, experiments: set files of configs x seeds (``sets``), decoding and alignment sets,
the worker pool (``runner``) and ``syntaxnmt demo``."""
