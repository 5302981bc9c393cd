"""``openbook ask`` decodes for quick short answers (greedy, Fast, 16 new tokens, bfloat16 where native);
``openbook eval`` keeps the paper's settings (4 beams, Thorough, float32); ask's help names the flags
that give the paper's settings, and each option is still declared once (openbook/commands/options.py)."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from openbook import cli
from openbook.commands import ask as ask_command
from openbook.commands import options


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_ask_defaults_are_for_short_interactive_answers():
    args = parse("ask", "q?")
    assert (args.beams, args.decoding, args.max_new_tokens, args.dtype) == (1, "lazy", 16, "auto")


def test_eval_defaults_are_the_papers():
    args = parse("eval", "--task", "nq", "--data", "x.jsonl")
    assert (args.beams, args.decoding, args.max_new_tokens, args.dtype) == (4, "thorough", None, "float32")


def test_the_paper_flags_in_asks_help_give_the_papers_settings():
    args = parse("ask", "q?", *ask_command.PAPER_FLAGS.split())
    assert (args.beams, args.decoding, args.max_new_tokens, args.dtype) == (4, "thorough", 32, "float32")
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["ask"].format_help()
    assert ask_command.PAPER_FLAGS in help_text
    assert "--dtype {auto,float32,bfloat16,int8}" in help_text


def test_dtype_reaches_the_loader(monkeypatch):
    seen = {}
    monkeypatch.setitem(sys.modules, "openbook.rag.assemble",
                        types.SimpleNamespace(load_model=lambda **kwargs: seen.update(kwargs)))
    monkeypatch.setattr(options, "quiet_libraries", lambda: None)
    options.model_from_args(parse("ask", "q?", "--dtype", "bfloat16"))
    assert seen["dtype"] == "bfloat16"
    options.model_from_args(parse("eval", "--task", "nq", "--data", "x"))
    assert seen["dtype"] == "float32"
    options.model_from_args(argparse.Namespace())  # a command without --dtype (train): float32
    assert seen["dtype"] == "float32"


def test_a_per_command_default_needs_a_declared_option():
    parser = argparse.ArgumentParser()
    with pytest.raises(ValueError, match="no per-command default for option.s. k"):
        options.add_options(parser, "k", defaults={"k": 3})
    with pytest.raises(ValueError, match="no per-command default for option.s. beams"):
        options.add_options(parser, "decoding", defaults={"beams": 2})
