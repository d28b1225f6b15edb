#!/usr/bin/env python3
"""Create a tiny Qwen2-VL vision-language model entirely locally (no hub access).

Why: images as load are only proven against a server that really runs a vision tokenizer
(resize to multiples of 28, 14-pixel patches, 2x2 merge) and counts the image tokens in
`usage.prompt_tokens`. A real VLM is too big for the 2-core test machine; this one is the
Qwen2-VL architecture shrunk (text hidden 128, 2 layers; vision depth 1, embed 64) with
random weights, so the server's image pipeline and token count are real, the answers noise.

* tokenizer: make_tiny_model.py's byte-level BPE plus Qwen2-VL's vision specials
  (<|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|>);
* processor: Qwen2-VL's own image processor (defaults: min 56*56, max 28*28*1280 pixels),
  so an image of w x h (multiples of 28, within the bounds) costs (w/28)*(h/28) tokens,
  plus <|vision_start|> and <|vision_end|> around it;
* chat template: ChatML whose content parts render an image as
  <|vision_start|><|image_pad|><|vision_end|> and text as itself.

Usage: python make_tiny_vlm.py OUT_DIR
"""
import argparse
import json
import os
import sys

import torch
from tokenizers import AddedToken

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_model import build_tokenizer  # noqa: E402

VISION_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' or 'image' in part -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in part -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--max-pos", type=int, default=32768)
    args = ap.parse_args()

    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    torch.manual_seed(0)
    tok = build_tokenizer(args.vocab_size)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in VISION_SPECIALS])
    tid = tok.token_to_id
    V = tok.get_vocab_size()
    V_pad = ((V + 63) // 64) * 64
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None, clean_up_tokenization_spaces=False,
        split_special_tokens=False, model_max_length=args.max_pos,
    )
    hf_tok.chat_template = TEMPLATE

    H = 128  # head_dim 32: vLLM's CPU attention needs >= 32; mrope halves sum to 16
    cfg = Qwen2VLConfig(
        text_config={
            "vocab_size": V_pad, "hidden_size": H, "intermediate_size": 2 * H,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": args.max_pos, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0,
                                "mrope_section": [4, 6, 6]},
            "bos_token_id": tid("<|endoftext|>"), "eos_token_id": tid("<|im_end|>"),
            "pad_token_id": tid("<|endoftext|>"), "tie_word_embeddings": False,
        },
        vision_config={
            "depth": 1, "embed_dim": 64, "hidden_size": H, "num_heads": 2, "mlp_ratio": 2,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        image_token_id=tid("<|image_pad|>"), video_token_id=tid("<|video_pad|>"),
        vision_start_token_id=tid("<|vision_start|>"),
        vision_end_token_id=tid("<|vision_end|>"), tie_word_embeddings=False,
    )
    cfg.dtype = "float32"
    model = Qwen2VLForConditionalGeneration(cfg).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tid("<|endoftext|>"), eos_token_id=tid("<|im_end|>"),
        pad_token_id=tid("<|endoftext|>"), do_sample=False, max_new_tokens=64,
    )
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    hf_tok.save_pretrained(args.out)
    image_processor = Qwen2VLImageProcessorPil()
    image_processor.save_pretrained(args.out)
    with open(os.path.join(args.out, "chat_template.jinja"), "w") as fh:
        fh.write(TEMPLATE)
    tc_path = os.path.join(args.out, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    tc["chat_template"] = TEMPLATE
    tc["processor_class"] = "Qwen2VLProcessor"
    json.dump(tc, open(tc_path, "w"), indent=2)
    with open(os.path.join(args.out, "processor_config.json"), "w") as fh:
        json.dump({"processor_class": "Qwen2VLProcessor"}, fh)
    info = {"vocab": V, "vocab_padded": V_pad,
            "params": sum(p.numel() for p in model.parameters()),
            "image_tokens_rule": "(w/28)*(h/28) + 2 per image (multiples of 28 in bounds)"}
    json.dump(info, open(os.path.join(args.out, "tiny_model_info.json"), "w"), indent=2)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
