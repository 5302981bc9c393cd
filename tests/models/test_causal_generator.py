"""CausalLMGenerator: prompts, left padding, cached prefill, teacher forcing and step-wise decoding.

Everything runs on a tiny random Llama and a word-level tokenizer built here (no downloads).
"""

from __future__ import annotations

import inspect
import json
import os

import pytest
import torch

from openbook.models.causal import CausalLMGenerator
from tiny_causal import PASSAGES, QUESTIONS, P, make_generator, make_model, make_tokenizer
from tolerance import model_tolerance, tolerance


def reference_logprobs(model, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    """``(len(continuation) + 1, V)``: the next-token distributions after the prompt and after every
    continuation token, from one plain unpadded forward of ``prompt + continuation``."""
    ids = torch.tensor([prompt + continuation])
    logits = model(input_ids=ids, use_cache=False).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1 :], dim=-1)


def lp_tolerance(reference: torch.Tensor, gen, ctx) -> dict[str, float]:
    """Log-probabilities of the same model from a padded batch with a cache and from a plain forward:
    equal up to float32 rounding over the model's reductions and the prompt (tests/helpers/tolerance.py)."""
    return model_tolerance(reference, gen.model.config, ctx.input_ids.shape[1] + 16)  # <= 16 tokens follow


def prompt_ids(ctx, row: int) -> list[int]:
    return ctx.input_ids[row][ctx.attention_mask[row].bool()].tolist()


# ---------------------------------------------------------------------------------------------- prompts


def test_chat_and_plain_prompt_paths():
    chat = make_generator(chat=True)
    tok = chat.tokenizer
    assert not chat.is_seq2seq and chat.use_chat_template
    assert chat.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert chat.pad_token_id == tok.pad_token_id
    ctx = chat.contexts(QUESTIONS, PASSAGES)
    assert ctx.input_ids.shape[0] == 4 and ctx.n_docs == 2 and ctx.truncated == 0
    text = tok.decode(prompt_ids(ctx, 1))
    # an empty system turn by default (it replaces a template's built-in default system message)
    assert text.startswith("<|im_start|> system <|im_end|> <|im_start|> user")
    # the passage text first, its title after it (quotes stripped from titles)
    assert "user berlin is the capital city of germany , the river flows through ( Title : Berlin )" in text
    assert "Question : what is the capital of france ?" in text
    assert text.endswith("<|im_end|> <|im_start|> assistant")
    # system_prompt=None leaves it to the template (this one writes none)
    assert tok.decode(prompt_ids(make_generator(chat=True, system_prompt=None).contexts(QUESTIONS, PASSAGES),
                                 0)).startswith("<|im_start|> user")
    # rows are input-major (b*K + k)
    assert "who wrote the play" in tok.decode(prompt_ids(ctx, 2)) and "short play" in tok.decode(prompt_ids(ctx, 3))

    system = make_generator(chat=True, system_prompt="you are helpful")
    assert tok.decode(prompt_ids(system.contexts(QUESTIONS, PASSAGES), 0)).startswith(
        "<|im_start|> system you are helpful <|im_end|> <|im_start|> user"
    )

    # the same tokenizer, chat template switched off, and a tokenizer without one: the plain template
    for plain in (make_generator(chat=True, use_chat_template=False), make_generator(chat=False)):
        assert not plain.use_chat_template
        assert plain.eos_token_id == tok.eos_token_id
        ctx = plain.contexts(QUESTIONS, PASSAGES)
        ids = prompt_ids(ctx, 0)
        assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1  # the tokenizer's BOS, once
        assert tok.decode(ids, skip_special_tokens=True) == (
            "Title : France Passage : paris is the capital of france . "
            "Question : what is the capital of france ? Answer :"
        )

    custom = make_generator(chat=False, prompt_template="{question} ? {title} : {text} . Answer :")
    assert tok.decode(prompt_ids(custom.contexts(QUESTIONS, PASSAGES), 3), skip_special_tokens=True) == (
        "who wrote the play ? ? Play : a short play . Answer :"
    )
    with pytest.raises(ValueError):
        make_generator(prompt_template="{question} only")
    assert make_generator(eos_token_id=7).eos_token_id == 7


def test_pad_never_equals_the_answer_eos():
    tok = make_tokenizer(chat=True)
    tok.pad_token = "<|im_end|>"  # as chat models often ship
    gen = CausalLMGenerator(make_model(len(tok)), tok)
    assert gen.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert gen.pad_token_id == tok.eos_token_id != gen.eos_token_id
    assert gen.bos_token_id is None  # no first-token exclusion when rescoring causal answers
    assert CausalLMGenerator(gen.model, tok, pad_token_id=3).pad_token_id == 3
    targets, mask = gen.encode_targets(["paris"])
    assert torch.equal(targets.ne(gen.pad_token_id), mask)


def test_left_padding_layout():
    gen = make_generator()
    ctx = gen.contexts(QUESTIONS, PASSAGES)
    lengths = ctx.attention_mask.sum(-1)
    assert len(set(lengths.tolist())) > 1, "the fixture should have prompts of different lengths"
    assert bool((ctx.attention_mask[:, -1] == 1).all())  # every prompt ends at the right edge
    for row in range(4):
        n = int(lengths[row])
        assert ctx.attention_mask[row, : ctx.input_ids.shape[1] - n].sum() == 0
        assert bool((ctx.input_ids[row, : ctx.input_ids.shape[1] - n] == gen.pad_token_id).all())


QUESTION_LAST = "Answer briefly.\n\nTitle: {title}\nPassage: {text}\n\nQuestion: {question}"


def test_truncation_cuts_only_the_passage():
    gen = make_generator(chat=True, max_context_length=48, prompt_template=QUESTION_LAST)
    tok = gen.tokenizer
    long_text = " ".join(["filler"] * 80) + " paris"
    passages = [[P("France", "paris is the capital of france ."), P("Long", long_text)],
                [P("Long", "the river " + long_text), P("Play", "a short play")]]
    ctx = gen.contexts(QUESTIONS, passages)
    assert ctx.truncated == 2
    assert ctx.input_ids.shape[1] <= 48
    full = make_generator(chat=True, max_context_length=10_000, prompt_template=QUESTION_LAST)
    untruncated = full.contexts(QUESTIONS, passages)
    assert untruncated.truncated == 0
    for row, question in zip(range(4), [QUESTIONS[0]] * 2 + [QUESTIONS[1]] * 2):
        ids = prompt_ids(ctx, row)
        text = tok.decode(ids)
        assert len(ids) <= 48
        # the question and the end of the template survive intact
        assert text.endswith(f"Question : {question} <|im_end|> <|im_start|> assistant")
        if row in (1, 2):
            assert len(ids) >= 46  # cut as little as needed
            assert "filler" in text and " paris <|im_end|>" not in text  # end of the passage is what goes
            assert "Title : Long Passage :" in text
        else:
            assert ids == prompt_ids(untruncated, row)  # short rows are untouched

    # a question longer than its budget (half the context) is cut, with a warning; a template that does
    # not fit even without its passage is kept whole
    tiny = make_generator(chat=False, max_context_length=8)
    with pytest.warns(UserWarning, match="4-token question budget"):
        ctx = tiny.contexts(["what is the capital of france ?"], [[P("France", "paris")]])
    assert ctx.truncated == 1
    assert tok.decode(prompt_ids(ctx, 0), skip_special_tokens=True) == (
        "Title : Passage : Question : what is the capital Answer :"
    )


def test_encode_targets_and_decode_tokens():
    for chat in (True, False):
        gen = make_generator(chat=chat)
        tok = gen.tokenizer
        targets, mask = gen.encode_targets(["paris", "the river seine"])
        assert targets.shape == (2, 4)
        assert targets[0, :2].tolist() == [tok.convert_tokens_to_ids("paris"), gen.eos_token_id]
        assert mask.tolist() == [[True, True, False, False], [True] * 4]
        assert targets[0, 2:].tolist() == [gen.pad_token_id] * 2
        assert gen.decode_tokens(targets) == ["paris", "the river seine"]
        cut, _ = gen.encode_targets(["the river seine"], max_length=2)
        assert cut[0].tolist() == [tok.convert_tokens_to_ids("the"), gen.eos_token_id]


# ---------------------------------------------------------------------------------------------- model passes


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("chat", [True, False])
def test_target_logprobs_match_unpadded_forward(attn, chat):
    gen = make_generator(chat=chat, attn=attn)
    ctx = gen.contexts(QUESTIONS, PASSAGES)
    targets, _ = gen.encode_targets(["paris", "the river seine flows", "rome", "the play"])
    with torch.no_grad():
        memory = gen.encode(ctx)
        cache_before = [layer.keys.clone() for layer in memory.extra["cache"].layers]
        rows = torch.tensor([0, 1, 2, 3])
        lp = gen.target_logprobs(memory, rows, targets)
        assert lp.shape == (4, targets.shape[1], gen.vocab_size) and lp.dtype == torch.float32
        for n in range(4):
            ref = reference_logprobs(gen.model, prompt_ids(ctx, n), targets[n, :-1].tolist())
            torch.testing.assert_close(lp[n], ref, **lp_tolerance(ref, gen, ctx))
        # other rows (repeated, permuted) against the same memory: its cache must be unchanged
        rows = torch.tensor([3, 0, 0, 2])
        lp = gen.target_logprobs(memory, rows, targets)
        for n, r in enumerate(rows.tolist()):
            ref = reference_logprobs(gen.model, prompt_ids(ctx, r), targets[n, :-1].tolist())
            torch.testing.assert_close(lp[n], ref, **lp_tolerance(ref, gen, ctx))
        for layer, before in zip(memory.extra["cache"].layers, cache_before):
            assert torch.equal(layer.keys, before)
        # a single target position comes straight from the prefill
        one = gen.target_logprobs(memory, torch.tensor([1]), targets[:1, :1])
        # (the same logits either way: only the log-softmax over the vocabulary may round differently)
        want = torch.log_softmax(memory.extra["last_logits"][1].float(), -1)
        torch.testing.assert_close(one[0, 0], want, **tolerance(want, terms=gen.vocab_size))
        raw = gen.target_logits(memory, torch.tensor([1]), targets[:1])
        want = gen.target_logprobs(memory, torch.tensor([1]), targets[:1])
        torch.testing.assert_close(torch.log_softmax(raw.float(), -1), want, **tolerance(want, terms=gen.vocab_size))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_stepwise_decoding_with_reorder_and_select(attn):
    gen = make_generator(chat=True, attn=attn)
    ctx = gen.contexts(QUESTIONS, PASSAGES)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        memory = gen.encode(ctx)
        state = gen.begin(memory, torch.tensor([0, 1, 2, 3]))
        rows = [0, 1, 2, 3]  # memory row of every state row
        fed: list[list[int]] = [[] for _ in rows]  # tokens appended to every state row so far

        def check(logits):
            assert logits.dtype == torch.float32 and logits.shape == (len(rows), gen.vocab_size)
            for n, (r, toks) in enumerate(zip(rows, fed)):
                ref = reference_logprobs(gen.model, prompt_ids(ctx, r), toks)[-1]
                torch.testing.assert_close(torch.log_softmax(logits[n], -1), ref, **lp_tolerance(ref, gen, ctx))

        # the first step ignores its input and returns the prefill's last logits
        check(state.step(torch.full((4,), gen.start_token_id)))
        # select before anything was appended: expand and reorder rows (the stored first logits move too)
        state2 = gen.begin(memory, torch.tensor([0, 1]))
        state2.select(torch.tensor([1, 1, 0]))
        torch.testing.assert_close(  # copied, not recomputed: exact
            state2.step(torch.zeros(3, dtype=torch.long)), memory.extra["last_logits"][[1, 1, 0]].float(), rtol=0, atol=0
        )

        for step in range(4):
            tokens = torch.randint(6, gen.vocab_size, (len(rows),), generator=g)
            for n, t in enumerate(tokens.tolist()):
                fed[n] = fed[n] + [t]
            check(state.step(tokens))
            if step == 0:
                index = torch.tensor([2, 2, 0, 3, 1, 1])  # select: expand (beam search start)
                state.select(index)
            elif step == 1:
                index = torch.tensor([1, 0, 3, 2, 5, 4])  # reorder: beams swap places
                state.reorder(index)
            else:
                index = torch.tensor([5, 4, 0, 0, 1, 2])
                state.reorder(index)
            rows = [rows[i] for i in index.tolist()]
            fed = [fed[i] for i in index.tolist()]

        # the memory is reusable after decoding: teacher forcing still matches
        targets = torch.tensor([fed[0]])
        lp = gen.target_logprobs(memory, torch.tensor([rows[0]]), targets)
        ref = reference_logprobs(gen.model, prompt_ids(ctx, rows[0]), fed[0][:-1])
        torch.testing.assert_close(lp[0], ref, **lp_tolerance(ref, gen, ctx))


def test_gradient_flows_through_the_prefill():
    gen = make_generator(chat=False)
    gen.model.train()
    tok = gen.tokenizer
    ctx = gen.contexts(QUESTIONS, PASSAGES)
    targets, mask = gen.encode_targets(["paris", "the river seine flows", "rome", "the play"])
    memory = gen.encode(ctx)
    lp = gen.target_logprobs(memory, torch.arange(4), targets)
    ll = lp.gather(-1, targets[..., None]).squeeze(-1) * mask
    # only positions >= 1: these reach the prompt exclusively through the copied prompt cache
    (-ll[:, 1:].sum()).backward()
    emb = gen.model.get_input_embeddings().weight.grad
    assert emb is not None and torch.isfinite(emb).all()
    prompt_only = tok.convert_tokens_to_ids("berlin")  # appears in a passage, never in the targets
    assert prompt_only not in targets.tolist()
    assert emb[prompt_only].abs().sum() > 0
    for name, param in gen.model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    assert gen.model.model.layers[0].self_attn.k_proj.weight.grad.abs().sum() > 0

    # position 0 alone: the gradient comes from the stored last-prompt logits
    gen.model.zero_grad()
    memory = gen.encode(ctx)
    gen.target_logprobs(memory, torch.arange(4), targets[:, :1]).sum().backward()
    assert gen.model.get_input_embeddings().weight.grad[prompt_only].abs().sum() > 0


# ---------------------------------------------------------------------------------------------- real model


@pytest.mark.slow  # loads SmolLM2-135M-Instruct (skipped where the Hugging Face cache lacks it)
def test_smollm2_end_to_end():
    """The real default generator (from OPENBOOK_GENERATOR_PATH, or the local HF cache only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = os.environ.get("OPENBOOK_GENERATOR_PATH", "HuggingFaceTB/SmolLM2-135M-Instruct")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True, dtype=torch.float32).eval()
    except OSError as exc:
        pytest.skip(f"SmolLM2 not available locally: {exc}")
    gen = CausalLMGenerator(model, tokenizer)
    assert gen.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    questions = ["What is the capital of France?"]
    passages = [[P("France", "France is a country in Europe. Its capital is Paris."),
                 P("Germany", "Berlin is the capital and largest city of Germany.")]]
    ctx = gen.contexts(questions, passages)
    targets, mask = gen.encode_targets(["Paris", "Paris"])
    with torch.no_grad():
        memory = gen.encode(ctx)
        lp = gen.target_logprobs(memory, torch.arange(2), targets)
        for n in range(2):
            ref = reference_logprobs(model, prompt_ids(ctx, n), targets[n, :-1].tolist())
            torch.testing.assert_close(lp[n], ref, **lp_tolerance(ref, gen, ctx))
        # greedy step-wise decoding equals transformers' generate on the unpadded prompt
        state = gen.begin(memory, torch.tensor([0]))
        token, out = torch.tensor([gen.start_token_id]), []
        for _ in range(8):
            token = state.step(token).argmax(-1)
            out.append(int(token))
            if out[-1] == gen.eos_token_id:
                break
        ids = torch.tensor([prompt_ids(ctx, 0)])
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(out), do_sample=False,
                             eos_token_id=gen.eos_token_id, pad_token_id=gen.pad_token_id)[0, ids.shape[1]:]
        assert out == ref.tolist()[: len(out)]
        assert "paris" in gen.decode_tokens(torch.tensor([out]))[0].lower()


# ---------------------------------------------------------------------------------------------- trained runs


def test_a_run_records_its_prompt_and_is_prompted_that_way_again(tmp_path):
    """`openbook train` writes the prompt into run.json and load_run sets it again, so changing openbook's default
    prompt later does not change what a trained run is shown; a bad recorded prompt is a one-line input error."""
    from openbook.errors import InputError
    from openbook.models.causal import DEFAULT_CHAT_PROMPT, DEFAULT_SYSTEM_PROMPT
    from openbook.rag.assemble import load_run
    from tiny_runs import save_tiny_models, train_run

    _, enc_dir, kb_dir = save_tiny_models(tmp_path)
    gen = make_generator(chat=True)
    gen_dir = tmp_path / "causal"
    gen.model.save_pretrained(gen_dir)
    gen.tokenizer.save_pretrained(gen_dir)
    run = train_run(tmp_path, "run", "rag-sequence", gen_dir, enc_dir, kb_dir, "--freeze-retriever")
    spec_path = run / "run.json"
    spec = json.loads(spec_path.read_text())
    assert spec["prompt"] == {"template": DEFAULT_CHAT_PROMPT, "system": DEFAULT_SYSTEM_PROMPT}

    custom = "Question: {question}\n{title}: {text}"
    spec["prompt"] = {"template": custom, "system": None}
    spec_path.write_text(json.dumps(spec))
    loaded = load_run(run).generator
    assert (loaded.prompt_template, loaded.system_prompt) == (custom, None)
    assert loaded.render("q", "T", "x") == gen.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Question: q\nT: x"}], add_generation_prompt=True, tokenize=False)

    spec["prompt"] = {"template": "no fields", "system": None}
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(InputError, match="run.json.*must contain the field"):
        load_run(run)


def test_the_cache_goes_by_the_name_the_model_takes_it_under():
    """transformers 5 renamed ``past_key_values`` to ``cache`` and warns at every call that uses the old name;
    openbook passes whichever name the model's forward has, so answering warns nothing."""
    import warnings

    from openbook.models.generators import Seq2SeqGenerator, cache_argument
    from tiny import bart_tokenizer, tiny_bart

    causal = make_generator()
    tok = bart_tokenizer()
    seq2seq = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
    for generator in (causal, seq2seq):
        assert cache_argument(generator.model) in inspect.signature(generator.model.forward).parameters
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            memory = generator.encode(generator.contexts(QUESTIONS, PASSAGES))
            state = generator.begin(memory, torch.arange(4))
            for _ in range(3):
                state.step(torch.full((4,), generator.start_token_id))
            generator.target_token_logprobs(memory, torch.arange(4), torch.full((4, 3), 5), torch.full((4,), 3))
        assert not [w for w in caught if "past_key_values" in str(w.message)]
