"""Compatibility patches for the peer toolkits (run by benchmarks/peers/install.sh).

    python benchmarks/peers/patches.py fairseq-source SRC_DIR   # unpacked fairseq-0.12.2 sdist
    python benchmarks/peers/patches.py fairseq SITE_PACKAGES
    python benchmarks/peers/patches.py hydra SITE_PACKAGES
    python benchmarks/peers/patches.py joey SITE_PACKAGES

Every patch is idempotent: it looks for its own result first, prints what it did or that it was
already done, and fails loudly if the code it expects is not there (a different version).

- fairseq 0.12.2 ``setup.py`` adds optional C++ extensions (``fairseq.libbase``, ``fairseq.libnat``,
  ``alignment_train_cpu_binding``, CUDA ones) whose sources the source distribution does not ship:
  they are dropped from the build (the translation code never imports them).
- Python 3.11 rejects unhashable dataclass defaults (``x: Cfg = Cfg()`` raises "mutable default
  ... use default_factory"): fairseq's and hydra-core 1.0.7's are rewritten as
  ``field(default_factory=Cfg)``; ``fairseq/dataclass/initialize.py`` then calls the factory where
  it read ``.default``.
- Joey NMT 2.3.0 parses ``testing.min_output_length`` but never passes it to the search: one
  keyword is added to the ``search(...)`` call of ``joeynmt/prediction.py`` so that decoding can be
  forced to a fixed output length.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "side-by-side patch"

# ``    name: Type = SomeConfig()`` and ``    name: Type = field(default=SomeConfig())``
_INSTANCE_DEFAULT = re.compile(r"^(?P<head>[ \t]+\w+[ \t]*:[^=\n]+?)=[ \t]*(?P<cls>[A-Z]\w*)\(\)[ \t]*$", re.M)
_FIELD_DEFAULT = re.compile(r"field\(default=(?P<cls>[A-Z]\w*)\(\)\)")
_FIELD_IMPORTED = re.compile(r"^from dataclasses import [^\n]*\bfield\b", re.M)


def _dataclass_names(text: str) -> set[str]:
    """Names of the classes decorated with @dataclass in ``text`` (a rough but sufficient scan)."""
    return set(re.findall(r"@dataclass[^\n]*\n(?:[ \t]*[@#][^\n]*\n)*[ \t]*class (\w+)", text))


def rewrite_dataclass_defaults(path: Path, known: set[str]) -> int:
    """Rewrite instance defaults of dataclass types as default_factory in one file; returns the count."""
    text = path.read_text(encoding="utf-8")
    count = 0

    def inst(m: re.Match) -> str:
        nonlocal count
        if m.group("cls") not in known:
            return m.group(0)
        count += 1
        return f"{m.group('head').rstrip()} = field(default_factory={m.group('cls')})  # {MARK}"

    def fld(m: re.Match) -> str:
        nonlocal count
        if m.group("cls") not in known:
            return m.group(0)
        count += 1
        return f"field(default_factory={m.group('cls')})"

    new = _INSTANCE_DEFAULT.sub(inst, text)
    new = _FIELD_DEFAULT.sub(fld, new)
    if count:
        if not _FIELD_IMPORTED.search(new):
            # After the module docstring and __future__ imports: before the first other import.
            m = re.search(r"^(?:import|from) (?!__future__)", new, re.M)
            assert m, f"{path}: no import statement to put `from dataclasses import field` before"
            new = new[: m.start()] + f"from dataclasses import field  # {MARK}\n" + new[m.start() :]
        path.write_text(new, encoding="utf-8")
    return count


def patch_dataclasses(root: Path, label: str) -> None:
    files = sorted(p for p in root.rglob("*.py") if "dataclass" in p.read_text(encoding="utf-8", errors="replace"))
    known: set[str] = set()
    for p in files:
        known |= _dataclass_names(p.read_text(encoding="utf-8", errors="replace"))
    total = 0
    for p in files:
        n = rewrite_dataclass_defaults(p, known)
        if n:
            print(f"{label}: {n} dataclass default(s) -> default_factory in {p.relative_to(root.parent)}")
        total += n
    print(f"{label}: {total} dataclass default(s) rewritten" + (" (already done)" if total == 0 else ""))


def patch_fairseq_initialize(pkg: Path) -> None:
    path = pkg / "dataclass" / "initialize.py"
    text = path.read_text(encoding="utf-8")
    old = "        v = FairseqConfig.__dataclass_fields__[k].default\n"
    new = (
        f"        _f = FairseqConfig.__dataclass_fields__[k]  # {MARK}: call the default_factory\n"
        "        v = _f.default_factory() if _f.default is __import__('dataclasses').MISSING else _f.default\n"
    )
    if MARK in text:
        print(f"fairseq: {path.name} already patched")
        return
    assert old in text, f"{path}: expected line not found (not fairseq 0.12.2?)"
    path.write_text(text.replace(old, new), encoding="utf-8")
    print(f"fairseq: {path.name} calls the default_factory")


def _insert_after(path: Path, old: str, added: str, who: str, expected: str, done: str) -> None:
    """Insert ``added`` after the single occurrence of the line ``old`` in ``path`` (once: the
    MARK in the text means it is done); fail loudly when ``old`` is not found exactly once."""
    text = path.read_text(encoding="utf-8")
    if MARK in text:
        print(f"{who}: {path.name} already patched")
        return
    assert text.count(old) == 1, f"{path}: expected line not found (not {expected}?)"
    path.write_text(text.replace(old, old + added), encoding="utf-8")
    print(f"{who}: {done}")


def patch_fairseq_setup(src: Path) -> None:
    # Raising ImportError right after the import takes setup.py's own "no torch" path: the optional
    # torch C++ extensions (sources missing from the sdist) are skipped; libbleu and the Cython
    # helpers are still built.
    _insert_after(
        src / "setup.py",
        "    from torch.utils import cpp_extension\n",
        f"    raise ImportError('{MARK}: optional C++ extensions are not in the source distribution')\n",
        "fairseq", "fairseq 0.12.2", "setup.py no longer builds the missing optional C++ extensions",
    )


def patch_joey(site: Path) -> None:
    _insert_after(
        site / "joeynmt" / "prediction.py",
        "                    max_output_length=args.max_output_length,\n",
        f"                    min_output_length=args.min_output_length,  # {MARK}\n",
        "joey", "joeynmt 2.3.0", "prediction.py passes min_output_length to the search",
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("fairseq-source", "fairseq", "hydra", "joey"):
        print(__doc__, file=sys.stderr)
        return 2
    what, where = argv[0], Path(argv[1])
    if what == "fairseq-source":
        patch_fairseq_setup(where)
        patch_dataclasses(where / "fairseq", "fairseq")
        patch_fairseq_initialize(where / "fairseq")
    elif what == "fairseq":
        patch_dataclasses(where / "fairseq", "fairseq")
        patch_fairseq_initialize(where / "fairseq")
    elif what == "hydra":
        patch_dataclasses(where / "hydra", "hydra")
    elif what == "joey":
        patch_joey(where)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
