"""Tiny real MLX models (and their tokenizers), built from the standard library's text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specplay.train.model_files import (
    llama_config,
    read_texts,
    stdlib_sources,
    train_tokenizer,
    write_model,
    write_perturbed_copy,
)

VOCAB = 512
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as SmolLM2 and Qwen write it: the tiny chat model's template."""


@dataclass(frozen=True)
class TinyModels:
    root: Path
    target: Path
    near: Path  # a noisy copy of the target: accepted often, not always
    far: Path  # a different architecture (qwen2), random: rarely accepted
    swa_target: Path  # sliding window of 8 tokens on alternate layers
    swa_near: Path
    chat_target: Path  # same weights as target, tokenizer with a ChatML template
    other_vocab: Path  # same vocabulary size, different id -> token table
    recurrent: Path  # a Mamba model: caches that cannot be rewound
    padded: Path  # a drafter whose embedding has rows past the tokenizer's vocabulary
    served: Path  # head_dim 64, which vLLM's CPU attention accepts: the real-vLLM tier's target
    served_near: Path  # a noisy copy of it


def build_tiny_models(root: Path) -> TinyModels:
    """Every tiny model the tests use, written into `root`."""
    sources = stdlib_sources()
    train_tokenizer(read_texts(sources[:20]), root / "tok", VOCAB)
    train_tokenizer(
        read_texts(sources[:20]), root / "chat_tok", VOCAB, eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE
    )
    train_tokenizer(read_texts(sources[-20:]), root / "other_tok", VOCAB)

    untied = {"tie_word_embeddings": False}
    write_model(root / "target", llama_config(64, 2, VOCAB, **untied), root / "tok", seed=0, output_scale=4.0)
    write_perturbed_copy(root / "target", root / "near", noise=0.05, seed=3)
    qwen = llama_config(32, 1, VOCAB, **untied) | {"model_type": "qwen2"}
    write_model(root / "far", qwen, root / "tok", seed=1, output_scale=4.0)
    swa = llama_config(64, 2, VOCAB, layer_types=["sliding_attention", "full_attention"], sliding_window=8, **untied)
    write_model(root / "swa_target", swa, root / "tok", seed=4, output_scale=4.0)
    write_perturbed_copy(root / "swa_target", root / "swa_near", noise=0.05, seed=5)
    write_model(root / "chat_target", llama_config(64, 2, VOCAB, **untied), root / "chat_tok", seed=0, output_scale=4.0)
    write_model(root / "other_vocab", llama_config(32, 1, VOCAB), root / "other_tok", seed=6)
    mamba = {
        "model_type": "mamba",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "state_size": 4,
        "num_hidden_layers": 1,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_rank": 4,
    }
    write_model(root / "recurrent", mamba, root / "tok", seed=7)
    write_model(root / "padded", llama_config(32, 1, VOCAB + 64, **untied), root / "tok", seed=8, output_scale=4.0)
    served = llama_config(128, 2, VOCAB, num_heads=2, **untied)
    write_model(root / "served", served, root / "tok", seed=9, output_scale=4.0)
    write_perturbed_copy(root / "served", root / "served_near", noise=0.05, seed=10)
    return TinyModels(
        root,
        root / "target",
        root / "near",
        root / "far",
        root / "swa_target",
        root / "swa_near",
        root / "chat_target",
        root / "other_vocab",
        root / "recurrent",
        root / "padded",
        root / "served",
        root / "served_near",
    )
