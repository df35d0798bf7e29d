"""Stage 6, serving: ``syntaxnmt serve`` (``server``), the inference thread (``worker``) and the web
page (``web/``)."""
