#!/usr/bin/env python3
"""Create a tiny Qwen3-architecture chat model entirely locally (no hub access).

* tokenizer: byte-level BPE trained with `tokenizers` on the Python stdlib sources
  (Qwen2 pre-tokenizer regex, so llama.cpp's "qwen2" pre-tokenizer matches it),
  plus Qwen chat specials and <think>/</think> as *non-special* added tokens
  (so servers see them in the decoded text and can split reasoning).
* chat template: anvil's own ChatML template (chatml_template.jinja; thinking on by default,
  off with chat_template_kwargs {"enable_thinking": false}).
* weights: random, except that the residual stream is kept ~= token embedding
  (tiny o_proj/down_proj) and lm_head is wired so that the greedy/low-temperature
  next token is a fixed function of the current token. After the generation prompt
  ("<|im_start|>assistant\\n") the model therefore deterministically emits
      <think> r1 .. rK </think> c1 c2 .. cM c1 c2 ..   (never EOS)
  i.e. K reasoning words, then content words forever, until max_tokens.
  Attention/MLP are still computed over the whole context, so prefill cost is real.

Usage: python make_tiny_model.py OUT_DIR [--reasoning-tokens 16] [--content-cycle 48]
"""
import argparse
import glob
import json
import os
import sysconfig

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

# anvil's own ChatML template (thinking switch included); the reasoning parsers act on the
# <think> tokens the model generates, not on the template.
DEFAULT_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chatml_template.jinja")


def corpus_iter():
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    for f in files:
        with open(f, encoding="utf-8", errors="ignore") as fh:
            yield fh.read()


def build_tokenizer(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab-size", type=int, default=4096)
    # head_dim = hidden/4 = 32 (vLLM CPU needs >= 32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--max-pos", type=int, default=131072)
    ap.add_argument("--reasoning-tokens", type=int, default=16)
    ap.add_argument("--content-cycle", type=int, default=48)
    ap.add_argument("--template", default=DEFAULT_TEMPLATE, help="chat template file")
    args = ap.parse_args()

    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed(0)
    tok = build_tokenizer(args.vocab_size)
    template = open(args.template).read()

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=args.max_pos,
    )
    hf_tok.chat_template = template
    vocab = tok.get_vocab()
    V = len(vocab)
    V_pad = ((V + 63) // 64) * 64
    def tid(s):
        return tok.token_to_id(s)

    # ---- pick the deterministic output chain -----------------------------------------
    # generation prompt ends with "\n" (Qwen2 regex splits it off "assistant")
    gp_ids = tok.encode("<|im_start|>assistant\n", add_special_tokens=False).ids
    start = gp_ids[-1]
    words = sorted(
        (i for t, i in vocab.items()
         if t.startswith("\u0120") and len(t) >= 4 and t[1:].isalpha() and t[1:].isascii()
         and t[1:].islower()),
    )
    used = {start, tid("<think>"), tid("</think>")}
    words = [w for w in words if w not in used]
    K, M = args.reasoning_tokens, args.content_cycle
    assert len(words) >= K + M, (len(words), K, M)
    reasoning, content = words[:K], words[K:K + M]
    chain = [start, tid("<think>")] + reasoning + [tid("</think>")] + content
    nxt = {a: b for a, b in zip(chain, chain[1:], strict=False)}
    nxt[content[-1]] = content[0]  # content loops forever (no EOS): use max_tokens

    H, L = args.hidden, args.layers
    cfg = Qwen3Config(
        vocab_size=V_pad, hidden_size=H, intermediate_size=2 * H, num_hidden_layers=L,
        num_attention_heads=4, num_key_value_heads=2, head_dim=H // 4,
        max_position_embeddings=args.max_pos, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=tid("<|endoftext|>"),
        eos_token_id=tid("<|im_end|>"),
        pad_token_id=tid("<|endoftext|>"), use_cache=True, torch_dtype="float32",
    )
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        emb = torch.randn(V_pad, H)
        emb = emb / emb.norm(dim=1, keepdim=True) * (H ** 0.5)  # rms 1 -> final norm ~ identity
        model.model.embed_tokens.weight.copy_(emb)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(1e-3)
            layer.mlp.down_proj.weight.mul_(1e-3)
        # default: next token random-ish but weak; chain tokens: strong, deterministic
        lm = torch.randn(V_pad, H) * 0.02
        unit = emb / emb.norm(dim=1, keepdim=True)
        for a, b in nxt.items():
            lm[b] += 4.0 * unit[a]  # logit(b | a) ~ 4*sqrt(H) = 32, others ~ |N(0, 4)|
        # never predict padding / specials except through the chain
        model.lm_head.weight.copy_(lm)

    os.makedirs(args.out, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id,
        do_sample=False, max_new_tokens=256,
    )
    model.save_pretrained(args.out, safe_serialization=True)
    hf_tok.save_pretrained(args.out)
    # plain chat_template.jinja is written by transformers 5; also keep it in
    # tokenizer_config for older readers
    tc_path = os.path.join(args.out, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    tc.setdefault("chat_template", template)
    json.dump(tc, open(tc_path, "w"), indent=2)

    # ---- self check -------------------------------------------------------------------
    msgs = [{"role": "user", "content": "Say something."}]
    ids = hf_tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                     return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=K + 10, do_sample=False)
    text = hf_tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    expect = {
        "vocab": V, "vocab_padded": V_pad, "params": sum(p.numel() for p in model.parameters()),
        "reasoning_tokens": K, "content_cycle": M,
        "reasoning_text": tok.decode(reasoning), "content_text": tok.decode(content),
        "sample_greedy_output": text,
    }
    json.dump(expect, open(os.path.join(args.out, "tiny_model_info.json"), "w"), indent=2)
    print(json.dumps(expect, indent=2))
    assert text.startswith("<think>"), text


if __name__ == "__main__":
    main()
