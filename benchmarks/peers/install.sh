#!/usr/bin/env bash
# Install the peer toolkits of benchmarks/side_by_side.py, each into its own virtual environment:
#
#     benchmarks/peers/install.sh [fairseq] [onmt] [joey]      (default: all three)
#
#   benchmarks/peers/venvs/fairseq   fairseq 0.12.2   (built from the source distribution)
#   benchmarks/peers/venvs/onmt      OpenNMT-py 3.5.1
#   benchmarks/peers/venvs/joey      Joey NMT 2.3.0
#
# In every environment torch==2.13.0 (CPU) is installed first and then held by a pip constraint,
# the toolkit goes in with --no-deps, then only the dependencies it imports, one by one, so that
# nothing replaces torch. The compatibility fixes are applied by benchmarks/peers/patches.py
# (see its docstring). Idempotent: an environment whose stamp matches this script and the patches is
# skipped; a failed or changed one is completed in place (every patch skips what is done).
# PYTHON selects the interpreter (default: python3, 3.11 here); PEERS_VENVS the folder.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENVS="${PEERS_VENVS:-$HERE/venvs}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
STAMP_SRC="$(cat "$HERE/install.sh" "$HERE/patches.py" | sha256sum | cut -c1-16)"

mkdir -p "$VENVS"
CONSTRAINTS="$VENVS/constraints.txt"
echo "$TORCH_PIN" > "$CONSTRAINTS"

log() { echo "[peers/install] $*" >&2; }

# make_venv NAME [PIP_SPEC]: create the environment (if missing), install torch first.
make_venv() {
    local dir="$VENVS/$1" pip_spec="${2:-pip}"
    if [[ ! -x "$dir/bin/python" ]]; then
        log "$1: creating $dir"
        "$PYTHON" -m venv "$dir"
    fi
    quiet "$dir/bin/python" -m pip install -q --upgrade "$pip_spec" "setuptools<81" wheel
    if ! "$dir/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
        log "$1: installing $TORCH_PIN"
        vpip "$1" "$TORCH_PIN"
    fi
}

# quiet CMD...: run CMD, show its output on stderr without pip's notes about the local indexes.
quiet() {
    local out rc=0
    out="$("$@" 2>&1)" || rc=$?
    printf '%s\n' "$out" | grep -v -e "is ignored: it is neither" -e '^$' >&2 || true
    return $rc
}

# vpip NAME ARGS...: pip install into environment NAME, torch held at its pin.
vpip() {
    local name="$1"; shift
    quiet "$VENVS/$name/bin/python" -m pip install -q -c "$CONSTRAINTS" "$@"
}

check_torch() {
    "$VENVS/$1/bin/python" -c "import torch; v = torch.__version__; assert v.startswith('2.13.0'), v; print('torch', v)"
}

done_already() { [[ -f "$VENVS/$1/.stamp" && "$(cat "$VENVS/$1/.stamp")" == "$STAMP_SRC" ]]; }
mark_done() { echo "$STAMP_SRC" > "$VENVS/$1/.stamp"; }

site_packages() { "$VENVS/$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

install_fairseq() {
    local name=fairseq
    # pip >= 24.1 refuses omegaconf 2.0.6, whose metadata has a requirement (PyYAML>=5.1.*) that
    # newer packaging rejects as invalid: this environment keeps pip 24.0.
    make_venv $name "pip<24.1"
    vpip $name numpy cython wheel
    if ! "$VENVS/$name/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('fairseq') != '0.12.2')" 2>/dev/null; then
        local src="$VENVS/src"
        mkdir -p "$src"
        if [[ ! -f "$src/fairseq-0.12.2/setup.py" ]]; then
            log "fairseq: downloading the source distribution"
            quiet "$VENVS/$name/bin/python" -m pip download -q --no-deps --no-build-isolation "fairseq==0.12.2" -d "$src"
            tar -xzf "$src/fairseq-0.12.2.tar.gz" -C "$src"
        fi
        # setup.py builds optional C++ extensions whose sources the sdist lacks; Python 3.11 rejects
        # the configs' mutable dataclass defaults: fix both in the source before building.
        "$VENVS/$name/bin/python" "$HERE/patches.py" fairseq-source "$src/fairseq-0.12.2"
        log "fairseq: building and installing from source (a few minutes)"
        vpip $name --no-deps --no-build-isolation "$src/fairseq-0.12.2"
    fi
    vpip $name --no-deps "omegaconf==2.0.6" "hydra-core==1.0.7"
    vpip $name pyyaml "antlr4-python3-runtime==4.8" bitarray sacrebleu regex cffi tqdm typing_extensions
    local sp; sp="$(site_packages $name)"
    # Idempotent: patches already applied to the source are found done in the installed copy.
    "$VENVS/$name/bin/python" "$HERE/patches.py" fairseq "$sp"
    "$VENVS/$name/bin/python" "$HERE/patches.py" hydra "$sp"
    check_torch $name
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 "$VENVS/$name/bin/python" -c "import fairseq, fairseq_cli.train, fairseq_cli.generate; from fairseq.dataclass.initialize import hydra_init; hydra_init(); print('fairseq', fairseq.__version__)"
}

install_onmt() {
    local name=onmt
    make_venv $name
    vpip $name --no-deps "opennmt-py==3.5.1"
    vpip $name numpy pyyaml configargparse pyonmttok spacy pyahocorasick rapidfuzz regex fasttext-wheel sacrebleu six
    check_torch $name
    "$VENVS/$name/bin/python" -c "import onmt, onmt.bin.train, onmt.bin.translate, onmt.bin.build_vocab; print('OpenNMT-py', onmt.__version__)"
}

install_joey() {
    local name=joey
    make_venv $name
    vpip $name --no-deps "joeynmt==2.3.0"
    vpip $name numpy pyyaml tensorboard importlib_metadata matplotlib sentencepiece subword_nmt sacrebleu
    "$VENVS/$name/bin/python" "$HERE/patches.py" joey "$(site_packages $name)"
    check_torch $name
    "$VENVS/$name/bin/python" -c "import joeynmt, joeynmt.training, joeynmt.prediction; print('joeynmt', joeynmt.__version__)"
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(fairseq onmt joey)
status=0
for t in "${targets[@]}"; do
    case "$t" in
        fairseq|onmt|joey) ;;
        *) echo "usage: $0 [fairseq] [onmt] [joey]" >&2; exit 2 ;;
    esac
    if done_already "$t"; then
        log "$t: already installed ($VENVS/$t)"
        continue
    fi
    log "$t: installing into $VENVS/$t"
    rm -f "$VENVS/$t/.stamp"   # complete again: the stamp is written only after a full success
    set +e
    ( set -e; "install_$t" )   # not inside `if`, where bash would ignore set -e
    rc=$?
    set -e
    if [[ $rc -eq 0 ]]; then
        mark_done "$t"
        log "$t: ok"
    else
        log "$t: FAILED (exit $rc); re-run to continue where it stopped"
        status=1
    fi
done
exit $status
