"""Build the tiny Llama-style model directory the real vLLM engine serves (`make real-engine`, docs/real-engine.md):
random weights from a fixed seed, a byte-level BPE tokenizer trained here on generated text, a chat template.
Nothing is downloaded (these machines reach no model hub). Its answers are gibberish; its protocols are vLLM's.

    /opt/pdcp-vllm-cpu/bin/python scripts/tiny_model.py DEST [--layers 2] [--hidden 256] [--vocab 2048]

Shapes: head_dim 64 (a size every vLLM CPU attention backend supports), 4 query heads, 2 KV heads (GQA), so
KV bytes per token = layers * 2 (K,V) * kv_heads * head_dim * 2 (bf16) = 1 KiB for 2 layers.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['content'] is string -%}{%- set text = m['content'] -%}"
    "{%- else -%}{%- set text = m['content'] | map(attribute='text') | join(' ') -%}{%- endif -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + text + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ("the a of to and in is it that for on with as was by at be this are from or an have not which but all "
         "prefill decode cache key value token block transfer engine model request node proxy latency memory "
         "layer attention tensor batch stream chat system user assistant hello world explain why how what when "
         "one two three four five six seven eight nine ten zero fast slow big small good bad yes no").split()


def corpus(seed: int, lines: int = 4000):
    rng = random.Random(seed)
    for _ in range(lines):
        n = rng.randint(4, 20)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        yield " ".join(words).capitalize() + rng.choice([".", "?", "!", ",", ":"])


def build_tokenizer(dest: Path, vocab: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, chat_template=CHAT_TEMPLATE, model_max_length=4096)
    fast.save_pretrained(str(dest))
    return fast


def build_model(dest: Path, tok, layers: int, hidden: int, seed: int):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 128), head_dim=64,
        max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id).save_pretrained(str(dest))
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dest")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    t0 = time.time()
    dest = Path(a.dest)
    dest.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(dest, a.vocab, a.seed)
    build_model(dest, tok, a.layers, a.hidden, a.seed)
    for f in [dest, *dest.iterdir()]:  # safetensors is written 0600: make it readable by an unprivileged engine
        f.chmod(0o755 if f.is_dir() else 0o644)
    print(json.dumps({"dest": str(dest), "vocab": len(tok), "layers": a.layers, "hidden": a.hidden,
                      "seconds": round(time.time() - t0, 2)}))


if __name__ == "__main__":
    main()
