"""``python -m syntaxnmt`` (also the entry point used by ``torchrun -m syntaxnmt``)."""

from syntaxnmt.cli import main

if __name__ == "__main__":
    main()
