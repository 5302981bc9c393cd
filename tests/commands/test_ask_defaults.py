"""``openbook ask`` decodes for quick short answers (the interactive preset: greedy, Lazy, 16 new tokens, bfloat16
where native); ``openbook eval`` keeps the paper's settings (the paper preset: 4 beams, Thorough, the task's length,
float32); ask's help names the flags that give the paper's settings, and each option is still declared once
(openbook/commands/options.py). That no other entry point keeps its own copy: tests/base/test_presets.py."""

from __future__ import annotations

import argparse
import sys
import types

from openbook import cli
from openbook.commands import options
from openbook.presets import INTERACTIVE, PAPER


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_ask_defaults_are_for_short_interactive_answers():
    args = parse("ask", "q?")
    assert (args.beams, args.decoding, args.max_new_tokens, args.dtype) == (1, "lazy", 16, "auto")


def test_eval_defaults_are_the_papers():
    args = parse("eval", "--task", "nq", "--data", "x.jsonl")
    assert (args.beams, args.decoding, args.max_new_tokens, args.dtype) == (4, "thorough", None, "float32")


def test_the_paper_flags_in_asks_help_give_the_papers_settings():
    args = parse("ask", "q?", *PAPER.flags().split())
    assert (args.beams, args.decoding, args.dtype) == (4, "thorough", "float32")
    assert args.max_new_tokens == INTERACTIVE.max_new_tokens  # the paper's is the task's; ask has no task
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["ask"].format_help()
    assert PAPER.flags() in help_text
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


def test_a_preset_sets_the_options_a_command_declares():
    parser = argparse.ArgumentParser()
    options.add_options(parser, "k", "decoding", "dtype", preset=INTERACTIVE)
    args = parser.parse_args([])
    assert (args.k, args.decoding, args.dtype) == (None, INTERACTIVE.decoding, INTERACTIVE.dtype)
    assert not hasattr(args, "beams")  # a preset adds no option the command did not ask for
    parser = argparse.ArgumentParser()
    options.add_options(parser, "beams", "max-new-tokens")  # the paper's unless a command says otherwise
    args = parser.parse_args([])
    assert (args.beams, args.max_new_tokens) == (PAPER.num_beams, PAPER.max_new_tokens)
