"""Tests for syntaxnmt.config: defaults, YAML files, command-line overrides, errors, ${VAR} expansion."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from syntaxnmt.config import Config, config_from_dict, expand_env, load_config, parse_overrides
from syntaxnmt.errors import UserError


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ---------------------------------------------------------------- defaults and files


def test_defaults_load():
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.model.d_model == 256 and cfg.model.heads == 4
    assert cfg.train.lr == pytest.approx(7e-4)
    assert cfg.train.adam_betas == (0.9, 0.98)
    assert cfg.decode.beam_size == 5
    assert cfg.prepared_dir == Path(cfg.work_dir) / "data"


def test_yaml_file_loads(tmp_path):
    path = write_yaml(
        tmp_path / "exp.yaml",
        """\
        name: small
        work_dir: runs/small
        seed: 7
        data:
          train_src: corpus/train.en
          vocab_size: 500
          joint_vocab: false
          spm_model_type: unigram
        model:
          d_model: 64
          heads: 2
          norm: post
          tie_embeddings: none
        train:
          lr: 1e-3
          adam_betas: [0.8, 0.99]
          max_minutes: 2
        decode:
          beam_size: 4
          length_penalty: 0.6
        """,
    )
    cfg = load_config(path)
    assert cfg.name == "small" and cfg.seed == 7 and cfg.work_dir == "runs/small"
    assert cfg.data.train_src == "corpus/train.en"
    assert cfg.data.vocab_size == 500 and cfg.data.joint_vocab is False and cfg.data.spm_model_type == "unigram"
    assert (cfg.model.d_model, cfg.model.heads, cfg.model.norm, cfg.model.tie_embeddings) == (64, 2, "post", "none")
    # ``1e-3`` is a float here (plain YAML 1.1 would read it as a string), lists become tuples.
    assert isinstance(cfg.train.lr, float) and cfg.train.lr == 1e-3
    assert cfg.train.adam_betas == (0.8, 0.99)
    assert cfg.train.max_minutes == 2.0
    assert cfg.decode.beam_size == 4 and cfg.decode.length_penalty == 0.6
    # Keys not in the file keep their defaults.
    assert cfg.model.ffn_dim == Config().model.ffn_dim
    assert cfg.train.warmup_steps == Config().train.warmup_steps


def test_empty_yaml_file_gives_defaults(tmp_path):
    assert load_config(write_yaml(tmp_path / "empty.yaml", "")) == Config()


def test_missing_config_file_is_user_error(tmp_path):
    with pytest.raises(UserError, match="nope.yaml"):
        load_config(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- overrides


def test_parse_overrides_values_are_yaml():
    tree = parse_overrides(
        [
            "--train.lr=1e-3",
            "--train.adam_betas=[0.9, 0.98]",
            "--model.heads",
            "8",
            "--model.tie_embeddings=all",
            "--data.lowercase=true",
            "--name=my run",
        ]
    )
    betas = tree["train"].pop("adam_betas")
    assert list(betas) == [0.9, 0.98]  # a YAML sequence (list or tuple)
    assert tree == {
        "train": {"lr": 1e-3},
        "model": {"heads": 8, "tie_embeddings": "all"},
        "data": {"lowercase": True},
        "name": "my run",
    }
    assert isinstance(tree["train"]["lr"], float)


def test_overrides_apply_on_top_of_the_file(tmp_path):
    path = write_yaml(
        tmp_path / "exp.yaml",
        """\
        model:
          d_model: 64
          heads: 2
        train:
          lr: 5.0e-4
          warmup_steps: 100
        """,
    )
    cfg = load_config(path, ["--train.lr=1e-3", "--train.adam_betas=[0.9, 0.999]", "--model.heads", "4", "--train.adam_eps=1e-8"])
    assert cfg.train.lr == 1e-3
    assert cfg.train.adam_eps == 1e-8
    assert cfg.train.adam_betas == (0.9, 0.999)
    assert cfg.model.heads == 4
    assert cfg.model.d_model == 64  # from the file
    assert cfg.train.warmup_steps == 100  # from the file


def test_on_and_off_are_words_for_row_packing_in_yaml_and_on_the_command_line(tmp_path):
    """PyYAML reads a bare ``on``/``off`` as a boolean; ``train.row_packing`` takes them back as the words."""
    assert load_config(None, ["--train.row_packing=on"]).train.row_packing == "on"
    assert load_config(write_yaml(tmp_path / "c.yaml", "train:\n  row_packing: off\n")).train.row_packing == "off"
    with pytest.raises(UserError, match="row_packing"):
        load_config(None, ["--train.row_packing=sometimes"])


def test_int_is_accepted_for_a_float_key():
    cfg = load_config(None, ["--train.lr=1"])
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)


def test_dict_overrides():
    cfg = load_config(None, {"model": {"d_model": 32, "heads": 4}, "train": {"adam_betas": [0.5, 0.6]}})
    assert cfg.model.d_model == 32
    assert cfg.train.adam_betas == (0.5, 0.6)


@pytest.mark.parametrize("args", [["--train.lr"], ["train.lr=1"], ["--"], ["--train.lr=1", "stray"]])
def test_malformed_override_arguments(args):
    with pytest.raises(UserError):
        load_config(None, args)


# ---------------------------------------------------------------- errors name the key and the file


def test_unknown_key_in_file(tmp_path):
    path = write_yaml(tmp_path / "bad_key.yaml", "train:\n  lr: 1.0e-3\n  learning_rate: 0.1\n")
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "train.learning_rate" in msg and str(path) in msg and "unknown key" in msg


def test_unknown_section_in_file(tmp_path):
    path = write_yaml(tmp_path / "bad_section.yaml", "trian:\n  lr: 1.0e-3\n")
    with pytest.raises(UserError) as exc:
        load_config(path)
    assert "trian" in str(exc.value) and str(path) in str(exc.value)


def test_unknown_key_in_override(tmp_path):
    path = write_yaml(tmp_path / "ok.yaml", "seed: 3\n")
    with pytest.raises(UserError) as exc:
        load_config(path, ["--model.nrom=pre"])
    msg = str(exc.value)
    assert "model.nrom" in msg and str(path) in msg


def test_a_retired_key_is_dropped_so_old_configs_and_checkpoints_still_load(tmp_path):
    """``decode.cpu_softmax`` (its kernel deleted in issue 48) is in every config stored before
    then -- checkpoints, runs' config.yaml: such a config loads, without the key; a key that never
    was stays an error."""
    stored = Config().model_dump(mode="json")
    stored["decode"]["cpu_softmax"] = "torch"  # what a checkpoint of an earlier version holds
    assert "cpu_softmax" not in Config.model_fields["decode"].annotation.model_fields
    assert config_from_dict(stored, "old.pt (stored config)") == Config()
    assert stored["decode"]["cpu_softmax"] == "torch"  # the caller's tree is not changed
    path = write_yaml(tmp_path / "old.yaml", "decode:\n  beam_size: 3\n  cpu_softmax: auto\n")
    assert load_config(path).decode.beam_size == 3
    assert load_config(path, ["--decode.cpu_softmax=torch"]).decode == load_config(path).decode
    with pytest.raises(UserError, match="unknown key 'decode.cpu_softmaxx'"):
        load_config(path, ["--decode.cpu_softmaxx=torch"])


def test_wrong_type_in_file(tmp_path):
    path = write_yaml(tmp_path / "bad_type.yaml", "train:\n  lr: fast\nmodel:\n  d_model: 12.5\n")
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert "train.lr" in msg and "fast" in msg
    assert "model.d_model" in msg


def test_wrong_type_in_override():
    with pytest.raises(UserError, match=r"train\.max_steps"):
        load_config(None, ["--train.max_steps=many"])


def test_invalid_literal(tmp_path):
    path = write_yaml(tmp_path / "bad_literal.yaml", "model:\n  norm: middle\n")
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "model.norm" in msg and str(path) in msg and "middle" in msg
    assert "'pre'" in msg and "'post'" in msg  # the allowed values


def test_invalid_literal_in_override():
    with pytest.raises(UserError, match=r"data\.spm_model_type"):
        load_config(None, ["--data.spm_model_type=word"])


def test_bad_yaml(tmp_path):
    path = write_yaml(tmp_path / "broken.yaml", "model:\n  d_model: 64\n  heads: [2, 4\ntrain:\n  lr: 1\n")
    with pytest.raises(UserError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert str(path) in msg and "invalid YAML" in msg
    assert f"{path}:" in msg  # with a line number


def test_top_level_must_be_a_mapping(tmp_path):
    path = write_yaml(tmp_path / "list.yaml", "- a\n- b\n")
    with pytest.raises(UserError, match="list.yaml"):
        load_config(path)


def test_invalid_utf8_config(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match="latin1.yaml"):
        load_config(path)


BILLION_LAUGHS = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_billion_laughs_is_refused_naming_the_alias(tmp_path):
    """A few hundred bytes of nested aliases expand to 9^9 strings: the loader refuses the first alias."""
    path = write_yaml(tmp_path / "lol.yaml", BILLION_LAUGHS)
    with pytest.raises(UserError) as exc:
        load_config(path)
    assert str(exc.value).startswith(f"{path}:2: invalid YAML (alias *a: anchors and aliases")


def test_experiment_sets_use_the_same_loader(tmp_path):
    from syntaxnmt.experiments.sets import load_set

    path = write_yaml(tmp_path / "lol.set.yaml", BILLION_LAUGHS)
    with pytest.raises(UserError, match=re.escape(f"{path}:2: invalid YAML (alias *a")):
        load_set(path)
    path = write_yaml(tmp_path / "dup.set.yaml", "baseline: a\nconfigs: {a: a.yaml}\nbaseline: b\n")
    with pytest.raises(UserError, match=re.escape(f"{path}:3: invalid YAML (duplicate key 'baseline' (first given on line 1))")):
        load_set(path)


def test_even_one_alias_is_refused(tmp_path):
    path = write_yaml(tmp_path / "alias.yaml", "train:\n  lr: &rate 0.001\n  warmup_lr: *rate\n")
    with pytest.raises(UserError, match=re.escape(f"{path}:3: invalid YAML (alias *rate")):
        load_config(path)


@pytest.mark.parametrize(
    "text, line, key, first",
    [
        ("name: a\ntrain:\n  lr: 0.1\nmodel: {}\ntrain:\n  lr: 0.2\n", 5, "train", 2),  # a section twice
        ("train:\n  lr: 0.1\n  warmup_steps: 5\n  lr: 0.2\n", 4, "lr", 2),  # a key twice in a section
        ("train: {lr: 0.1, lr: 0.2}\n", 1, "lr", 1),  # a flow mapping
    ],
)
def test_duplicate_key_is_refused_naming_line_and_key(tmp_path, text, line, key, first):
    path = write_yaml(tmp_path / "dup.yaml", text)
    with pytest.raises(UserError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}:{line}: invalid YAML (duplicate key '{key}' (first given on line {first}))"


def test_d_model_must_be_divisible_by_heads():
    with pytest.raises(UserError, match="divisible"):
        load_config(None, {"model": {"d_model": 30, "heads": 4}})


def test_config_from_dict_names_source():
    with pytest.raises(UserError, match="my-source"):
        config_from_dict({"decode": {"beam": 3}}, source="my-source")


# ---------------------------------------------------------------- ${VAR} expansion


def test_env_expansion_with_default(tmp_path, monkeypatch):
    monkeypatch.delenv("SNMT_TEST_DATA", raising=False)
    monkeypatch.delenv("SNMT_TEST_RUNS", raising=False)
    path = write_yaml(
        tmp_path / "env.yaml",
        """\
        work_dir: ${SNMT_TEST_RUNS:-runs}/exp
        data:
          train_src: ${SNMT_TEST_DATA:-../shared/data}/train.de
          prepared_dir: ${SNMT_TEST_DATA:-/tmp/d}/prep
        """,
    )
    cfg = load_config(path)
    assert cfg.data.train_src == "../shared/data/train.de"
    assert cfg.data.prepared_dir == "/tmp/d/prep"
    assert cfg.work_dir == "runs/exp"

    monkeypatch.setenv("SNMT_TEST_DATA", "/corpora")
    monkeypatch.setenv("SNMT_TEST_RUNS", "/scratch")
    cfg = load_config(path)
    assert cfg.data.train_src == "/corpora/train.de"
    assert cfg.data.prepared_dir == "/corpora/prep"
    assert cfg.work_dir == "/scratch/exp"


def test_env_expansion_without_default(monkeypatch):
    monkeypatch.setenv("SNMT_TEST_SET", "/x")
    assert expand_env("${SNMT_TEST_SET}/a") == "/x/a"
    assert expand_env("no variables") == "no variables"
    monkeypatch.delenv("SNMT_TEST_UNSET", raising=False)
    assert expand_env("${SNMT_TEST_UNSET:-}/a") == "/a"
    with pytest.raises(UserError, match="SNMT_TEST_UNSET"):
        load_config(None, {"data": {"train_src": "${SNMT_TEST_UNSET}/train.en"}})


# ---------------------------------------------------------------- save and reload


def test_saved_config_reloads_equal(tmp_path):
    cfg = load_config(
        None,
        [
            "--name=round trip",
            "--train.lr=3e-4",
            "--train.adam_betas=[0.85, 0.995]",
            "--train.adam_eps=1e-9",
            "--model.norm=post",
            "--model.positions=learned",
            "--data.max_len_ratio=2.5",
            "--decode.length_penalty=0",
        ],
    )
    path = tmp_path / "saved.yaml"
    cfg.save(path)
    again = load_config(path)
    assert again == cfg
    assert again.train.adam_betas == (0.85, 0.995)
    assert again.decode.length_penalty == 0.0


@pytest.mark.parametrize(
    "key",
    ["model.heads", "model.d_model", "train.accum_steps", "train.valid_every", "train.log_every", "decode.beam_size", "decode.batch_size",
     "train.max_tokens", "train.max_steps", "model.enc_layers", "data.max_len", "model.syntax.tag_dim"],
)
def test_counts_must_be_positive(key):
    # Zero divides by zero (heads, d_model, valid_every, log_every) or crashes later in training
    # (accum_steps) or decoding (beam_size, batch_size): a config mistake, to be reported as one.
    with pytest.raises(UserError, match=re.escape(key)):
        load_config(None, [f"--{key}=0"])


@pytest.mark.parametrize("value", ["0", "-4096"])
def test_max_tokens_must_be_positive(value):
    # 0 or a negative budget used to give one sentence per batch, silently.
    with pytest.raises(UserError, match=r"train\.max_tokens.*greater than 0"):
        load_config(None, [f"--train.max_tokens={value}"])


@pytest.mark.parametrize("override", ["--model.dropout=1.5", "--train.label_smoothing=-0.1", "--train.lr=-1", "--data.max_len_ratio=0.5", "--train.max_minutes=-1"])
def test_out_of_range_values_name_their_key(override):
    key = override[2:].split("=")[0]
    with pytest.raises(UserError, match=re.escape(key)):
        load_config(None, [override])


def test_max_len_must_fit_the_position_table():
    with pytest.raises(UserError, match=r"data\.max_len 128 must be below model\.max_positions 64"):
        load_config(None, ["--model.max_positions=64"])
    assert load_config(None, ["--model.max_positions=64", "--data.max_len=63"]).data.max_len == 63
    assert load_config(None, ["--model.max_positions=64", "--model.positions=none"]).model.positions == "none"  # no table


def test_shared_embedding_needs_a_joint_vocabulary():
    with pytest.raises(UserError, match=r"model\.tie_embeddings=all.*data\.joint_vocab"):
        load_config(None, ["--model.tie_embeddings=all", "--data.joint_vocab=false"])


# ---------------------------------------------------------------- non-finite numbers, seeds (issue 25)


@pytest.mark.parametrize(
    "override, key",
    [
        ("--train.lr=1e400", "train.lr"),  # beyond a float: reads as inf (it trained 60 updates at loss nan)
        ("--model.dropout=.nan", "model.dropout"),
        ("--train.adam_betas=[0.9, .inf]", "train.adam_betas.1"),
        ("--decode.length_penalty=-.inf", "decode.length_penalty"),
        ("--train.alignment.guided_weight=.inf", "train.alignment.guided_weight"),
    ],
)
def test_non_finite_numbers_are_refused_naming_their_key(override, key):
    with pytest.raises(UserError, match=rf"'{re.escape(key)}': must be a finite number \(got -?(inf|nan)"):
        load_config(None, [override])


def test_non_finite_number_in_a_file_names_the_file_and_key(tmp_path):
    path = write_yaml(tmp_path / "exp.yaml", "train:\n  lr: 1.0e+400\n")
    with pytest.raises(UserError, match=r"exp\.yaml: 'train\.lr': must be a finite number \(got inf"):
        load_config(path)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_seed_must_be_one_numpy_takes(seed):
    with pytest.raises(UserError, match=r"'seed'"):
        load_config(None, [f"--seed={seed}"])
    assert load_config(None, ["--seed=0"]).seed == 0 and load_config(None, [f"--seed={2**32 - 1}"]).seed == 2**32 - 1


def test_max_nonfinite_is_a_count():
    assert load_config(None).train.max_nonfinite == 0
    with pytest.raises(UserError, match=r"train\.max_nonfinite"):
        load_config(None, ["--train.max_nonfinite=-1"])


def test_two_to_two_context_needs_a_joint_vocabulary():
    """docs/documents.md: 2-to-2 (concat, side both) needs a joint vocabulary -- refused at load,
    not when training starts after prepare."""
    docs = ["--data.train_docs=t.docs", "--data.dev_docs=d.docs", "--model.context.kind=concat"]
    with pytest.raises(UserError, match=r"model.context concat with side both \(2-to-2\) .*needs data.joint_vocab true") as e:
        load_config(None, [*docs, "--model.context.side=both", "--data.joint_vocab=false"])
    assert "\n" not in str(e.value)
    assert load_config(None, [*docs, "--model.context.side=both"]).data.joint_vocab
    assert load_config(None, [*docs, "--data.joint_vocab=false"]).model.context.side == "source"  # 2-to-1 is fine


def test_decode_workers_are_capped_by_the_cores_wherever_they_come_from(monkeypatch):
    """A checkpoint's stored ``decode: {workers: 16, processes: true}`` on a 2-core machine
    searches (or forks) 2 at once, not 16 (issue 49): the cap applies where the count is resolved."""
    import torch

    from syntaxnmt.config import at_most_cores, load_config
    from syntaxnmt.cpu.pools import decode_workers

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert [at_most_cores(n) for n in (0, 1, 2, 16)] == [1, 1, 2, 2]
    decode = load_config(None, {"decode": {"workers": 16, "processes": True}}).decode
    assert decode.workers == 16  # the config keeps what was asked (a larger machine gets it)
    assert decode_workers(decode.workers, 40, torch.device("cpu"), threads=2) == (2, 1)
