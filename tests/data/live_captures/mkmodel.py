"""Build a tiny random Llama (head_dim 32) with a small BPE tokenizer, offline, for
capture.py: ``python mkmodel.py OUT_DIR`` (needs transformers and tokenizers)."""

import sys

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"])
tok.train_from_iterator(["hello world this is a tiny model for testing vllm"] * 50, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
fast.save_pretrained(out)
cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(cfg).save_pretrained(out)
print("ok", out)
