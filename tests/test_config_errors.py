"""A refused config names the field it is about (``ConfigError.field``), and each front end
names that field its own way: the command line by its flag, from one table (``SPEC_FLAGS``),
the app by its box."""

from __future__ import annotations

import argparse

import pytest

from workbench.app.state import Settings
from workbench.engine.config import CONFIG_FIELDS, ConfigError, SpecConfig
from workbench.engine.drafts.ngram import NgramSource
from workbench.errors import UserError
from workbench.flags import SPEC_FLAGS, add_model_args, add_spec_args, spec_from_args

CONFIG_CASES = [  # (from_knobs keywords, the field the error is about)
    (dict(method="beam"), "method"),
    (dict(chain_rule="greedy"), "chain_rule"),
    (dict(method="eagle2", chain_rule="leviathan"), "chain_rule"),
    (dict(method="vanilla", chain_rule="leviathan"), "chain_rule"),
    (dict(num_steps=0), "num_steps"),
    (dict(num_steps=17), "num_steps"),
    (dict(topk=0), "topk"),
    (dict(method="linear", topk=2), "topk"),
    (dict(num_draft_tokens=1), "num_draft_tokens"),
    (dict(num_steps=2, topk=2, num_draft_tokens=8), "num_draft_tokens"),
    (dict(method="linear", num_steps=3, num_draft_tokens=8), "num_draft_tokens"),
    (dict(method="static", num_draft_tokens=300), "num_draft_tokens"),
    (dict(method="static", tree="[[0],[1]]", num_draft_tokens=5), "num_draft_tokens"),
    (dict(method="static", num_steps=4), "num_steps"),
    (dict(method="static", topk=3), "topk"),
    (dict(method="static", tree="[[0],[1,0]]"), "tree"),
    (dict(method="static", tree="[[0"), "tree"),
    (dict(method="static", tree=[]), "tree"),
    (dict(method="eagle2", tree="[[0]]"), "tree"),
    (dict(method="vanilla", tree=[[0]]), "tree"),
    (dict(accept_threshold_single=1.5), "accept_threshold_single"),
    (dict(accept_threshold_acc=0.0), "accept_threshold_acc"),
    (dict(method="vanilla", accept_threshold_acc=0.5), "accept_threshold_acc"),
    (dict(method="linear", chain_rule="leviathan", accept_threshold_single=0.5), "accept_threshold_single"),
    (dict(method="static", draft="ngram"), "draft"),
    (dict(method="linear", chain_rule="leviathan", draft="ngram"), "draft"),
    (dict(draft="ngram:9-2"), "draft"),
]


@pytest.mark.parametrize("knobs, field", CONFIG_CASES, ids=str)
def test_each_refused_knob_names_its_field(knobs, field):
    with pytest.raises(ConfigError) as err:
        SpecConfig.from_knobs(**knobs)
    assert err.value.field == field and isinstance(err.value, ValueError)
    assert field in str(err.value) and "{" not in str(err.value)  # worded with the field's own name


@pytest.mark.parametrize("fields, field", [
    (dict(method="linear", num_steps=3, topk=2, num_draft_tokens=4), "topk"),
    (dict(method="static"), "tree"),
    (dict(method="static", num_steps=1, topk=1, num_draft_tokens=3, tree=((0,), (0,))), "tree"),
    (dict(method="static", num_steps=2, topk=2, num_draft_tokens=4, tree=((1,), (0,), (0, 0))), "tree"),
    (dict(draft="ngram"), "draft"),
], ids=str)
def test_the_constructor_is_the_one_that_checks(fields, field):
    """from_knobs only fills in: building the dataclass directly meets the same rules."""
    with pytest.raises(ConfigError) as err:
        SpecConfig(**fields)
    assert err.value.field == field


def test_greedy_refuses_a_lossy_threshold_by_its_field():
    with pytest.raises(ConfigError) as err:
        SpecConfig.from_knobs(accept_threshold_acc=0.5).check_sampling(greedy=True)
    assert err.value.field == "accept_threshold_acc" and "set a temperature above 0" in str(err.value)


def test_every_field_the_config_can_name_has_a_flag():
    """A new SpecConfig field fails here until the command line's table names its flag."""
    parser = argparse.ArgumentParser()
    add_model_args(parser)
    add_spec_args(parser)
    flags = {option for action in parser._actions for option in action.option_strings}
    assert set(CONFIG_FIELDS) <= set(SPEC_FLAGS), set(CONFIG_FIELDS) - set(SPEC_FLAGS)
    assert set(SPEC_FLAGS.values()) <= flags, set(SPEC_FLAGS.values()) - flags


CLI_CASES = [  # (argv, the field whose flag the error must name)
    (["--num-steps", "99"], "num_steps"),
    (["--topk", "17"], "topk"),
    (["--num-draft-tokens", "1000"], "num_draft_tokens"),
    (["--method", "linear", "--topk", "3"], "topk"),
    (["--method", "linear", "--num-steps", "3", "--num-draft-tokens", "8"], "num_draft_tokens"),
    (["--method", "static", "--num-steps", "3"], "num_steps"),
    (["--method", "static", "--tree", "[[0],[1,0]]"], "tree"),
    (["--method", "static", "--tree", "[[0],[1]]", "--num-draft-tokens", "5"], "num_draft_tokens"),
    (["--method", "eagle2", "--tree", "[[0]]"], "tree"),
    (["--method", "static", "--chain-rule", "leviathan"], "chain_rule"),
    (["--speculative-accept-threshold-single", "1.5"], "accept_threshold_single"),
    (["--speculative-accept-threshold-acc", "0.5"], "accept_threshold_acc"),  # greedy
    (["--method", "vanilla", "--temperature", "1", "--speculative-accept-threshold-acc", "0.5"],
     "accept_threshold_acc"),
    (["--method", "static", "--draft", "ngram"], "draft"),
]


def cli_error(argv: list[str], method: str | None = None) -> str:
    parser = argparse.ArgumentParser()
    add_model_args(parser)
    add_spec_args(parser)
    args = parser.parse_args(argv)
    if method is not None:  # past argparse's choices, as a caller building the namespace itself
        args.method = method
    with pytest.raises(UserError) as err:
        spec_from_args(args)
    return str(err.value)


@pytest.mark.parametrize("argv, field", CLI_CASES, ids=str)
def test_the_command_line_names_the_flag_from_its_table(argv, field):
    message = cli_error(argv)
    assert SPEC_FLAGS[field] in message, message
    assert not any(name in message for name in CONFIG_FIELDS if "_" in name), message  # flags, not fields
    assert "{" not in message


def test_the_command_line_names_method_for_an_unknown_one():
    assert cli_error([], method="beam").startswith("--method 'beam' is unknown")


def test_a_sampling_bound_names_its_flag():
    assert cli_error(["--temperature", "500"]).startswith("--temperature: ")


@pytest.mark.parametrize("settings, field", [
    (Settings(method="linear", num_steps=0), "num_steps"),
    (Settings(num_draft_tokens=800), "num_draft_tokens"),
    (Settings(method="beam"), "method"),
    (Settings(method="static", tree="[[0],[1,0]]", num_draft_tokens=3), "tree"),
], ids=str)
def test_the_app_reads_the_field_a_config_names(settings, field):
    with pytest.raises(ConfigError) as err:
        settings.spec()
    assert err.value.field == field


def test_the_app_reads_only_the_boxes_of_its_method():
    """The page keeps eagle2's topk and num_draft_tokens while linear or vanilla is picked."""
    assert Settings(method="linear", num_steps=3, topk=4, num_draft_tokens=8).spec() == SpecConfig.linear(3)
    assert Settings(method="vanilla", num_steps=3).spec() == SpecConfig("vanilla")
    assert Settings(method="eagle2", num_steps=3, topk=2, num_draft_tokens=6).spec(NgramSource()) == \
        SpecConfig("eagle2", num_steps=3, topk=2, num_draft_tokens=6, draft=NgramSource())
