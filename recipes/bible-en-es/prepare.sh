#!/usr/bin/env bash
# The Bible as an English-Spanish document corpus (issue 21, item 5; optional, never needed by CI).
# Installs Debian's SWORD modules sword-text-web (World English Bible) and sword-text-sparv
# (Reina-Valera 1909) with apt-get -- this needs root and apt, i.e. a Debian/Ubuntu machine -- and
# the PyPI reader pysword if they are missing, then extracts the verse-aligned corpus, chapters as
# documents, into OUT (default runs/bible-en-es/data; never committed): see prepare.py.
#   bash recipes/bible-en-es/prepare.sh [OUT [--heldout N]]      (arguments after OUT go to prepare.py)
set -euo pipefail
OUT="${1:-runs/bible-en-es/data}"
shift || true
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ ! -f /usr/share/sword/mods.d/engWEB2015eb.conf ] || [ ! -f /usr/share/sword/mods.d/spaRV1909eb.conf ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sword-text-web sword-text-sparv
fi
python -c "import pysword" 2>/dev/null || python -m pip install pysword
python "$HERE/prepare.py" "$OUT" "$@"
