"""`peagle-lab train`'s set-up (peagle_lab/train/setup.py) and its flags: the presets are README's recipe, explicit
flags and `--set` override them, a bad `--set` exits 2 before any model loads, and `train` stays small (issue 34)."""
import argparse
import re
import shlex
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from peagle_lab.cli import _train_settings, build_parser, main
from peagle_lab.train.config import PRESETS, TrainConfig
from peagle_lab.train.setup import RunSettings, parse_setting, settable, training_config

README = Path(__file__).resolve().parents[1] / "README.md"
MAX_TRAIN_OPTIONS = 22


def _sub(name: str) -> argparse.ArgumentParser:
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subs.choices[name]


def _resolved(argv: list[str]) -> tuple[TrainConfig, RunSettings]:
    """The (config, run settings) `peagle-lab train ARGV` would train with (nothing loads)."""
    return _train_settings(build_parser().parse_args(["train", "--data", "d", "--out", "o", *argv]))


def test_train_has_at_most_22_options():
    options = [a for a in _sub("train")._actions if any(o.startswith("--") for o in a.option_strings)
               and "--help" not in a.option_strings]
    assert len(options) <= MAX_TRAIN_OPTIONS, [a.option_strings[0] for a in options]


def _readme_text() -> str:
    return " ".join(README.read_text().split())              # prose lines joined: a code span may wrap


def test_the_readme_recipe_trains_with_the_presets():
    text = README.read_text().replace("\\\n", " ")             # continued lines joined
    commands = [shlex.split(line) for line in text.splitlines() if line.startswith("peagle-lab train")]
    assert len(commands) == 2 and {c[c.index("--preset") + 1] for c in commands} == {"peagle", "eagle"}
    assert all(len([w for w in c if w.startswith("--")]) <= 8 for c in commands), commands   # not thirteen flags


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_is_the_recipe_the_readme_spells_out(name):
    """README says what `--preset NAME` stands for, flag by flag; those flags give exactly the preset's config."""
    spelled = re.search(rf"`--preset {name}` is `([^`]*)`", _readme_text())
    assert spelled, f"README does not spell out --preset {name}"
    cfg, _ = _resolved(shlex.split(spelled.group(1)))
    assert cfg == TrainConfig.preset(name) == _resolved(["--preset", name])[0]
    assert {k: v for k, v in asdict(cfg).items() if v != getattr(TrainConfig(), k)} == \
        {k: v for k, v in PRESETS[name].items() if v != getattr(TrainConfig(), k)}


def test_explicit_flags_and_set_override_a_preset():
    cfg, run = _resolved(["--preset", "peagle", "--steps", "50", "--num-layers", "2", "--segments", "4",
                          "--set", "cod_ratio=0.5", "--set", "share_lm_head=true", "--set", "mask_token_id=none",
                          "--set", "val_tokens=64", "--set", "export-dtype=float32", "--val-prompts", "3"])
    assert cfg == TrainConfig.preset("peagle", steps=50, num_layers=2, num_segments=4, cod_ratio=0.5,
                                     share_lm_head=True)
    assert (run.val_tokens, run.export_dtype, run.val_prompts, run.data) == (64, "float32", 3, "d")
    assert _resolved([])[0] == TrainConfig()                              # no preset: TrainConfig's defaults
    assert _resolved(["--method", "eagle"])[0] == TrainConfig(method="eagle")
    assert _resolved(["--preset", "eagle", "--method", "peagle"])[0].num_layers == 1


def test_every_config_field_is_reachable_from_the_command_line():
    """Rare knobs left the flag list for --set, never the program: every TrainConfig field parses."""
    keys = settable()
    assert {f.name for f in fields(TrainConfig)} <= set(keys)
    for key, value in [("layout", "packed"), ("amp_bf16", "off"), ("intermediate_size", "384"), ("lr", "3e-4"),
                       ("val_set", "humaneval")]:
        assert parse_setting(f"{key}={value}")[0] == key
    assert training_config("eagle", seed=3).seed == 3


@pytest.fixture()
def no_model_loads(monkeypatch):
    from peagle_lab.target import Target

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad --set was refused")

    monkeypatch.setattr(Target, "load", classmethod(refuse))


@pytest.mark.parametrize("setting, named", [
    ("nope=1", ["unknown key 'nope'", "valid keys:", "cod_ratio", "val_tokens"]),
    ("cod_ratio", ["expected KEY=VALUE"]),
    ("=3", ["expected KEY=VALUE"]),
    ("max_depth=deep", ["max_depth=deep", "a whole number in [1, 128]"]),
    ("lr=0", ["lr=0", "a number > 0"]),
    ("group_by_length=2", ["true or false"]),
    ("method=medusa", ["peagle or eagle"]),
])
def test_a_bad_set_exits_2_with_one_line_naming_the_fix(no_model_loads, tmp_path, setting, named, capsys):
    with pytest.raises(SystemExit) as err:
        main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--set", setting])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "peagle-lab train: error: argument --set:" in lines[0]
    assert all(part in lines[0] for part in named), lines[0]
