"""syntaxnmt: attention-based NMT with linguistic structure as a first-class input of attention."""

__version__ = "0.1.0"
