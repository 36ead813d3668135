"""GGUF files for the tests: SmolLM2-135M from a PyPI wheel, and tiny files written with gguf.GGUFWriter
from the repository's tiny mlx-lm folders, laid out as llama.cpp's converter lays them out.

Nothing here uses the converter under test: names, permutation and norm offsets are written from
llama.cpp's conventions, so a test that converts these files back checks the converter against them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as Q

# --- llama.cpp's layout -------------------------------------------------------------------------------

GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3"}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_BLOCK = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
_QWEN3_BLOCK = _BLOCK | {"self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
_GEMMA3_BLOCK = _QWEN3_BLOCK | {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def gguf_name(hf: str, arch: str) -> str:
    """model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight"""
    module, kind = hf.rsplit(".", 1)
    if module in _TOP:
        return f"{_TOP[module]}.{kind}"
    _, _, block, rest = module.split(".", 3)
    table = {"gemma3": _GEMMA3_BLOCK, "qwen3": _QWEN3_BLOCK}.get(arch, _BLOCK)
    return f"blk.{block}.{table[rest]}.{kind}"


def llamacpp_permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's converter does to the rows of a llama's q and k, per head: (2, half) -> (half, 2)."""
    return rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def llamacpp_unpermute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of llamacpp_permute, found by permuting row numbers (not by reasoning about the layout)."""
    order = llamacpp_permute(np.arange(rows.shape[0]), n_head)
    return rows[np.argsort(order)]


def random_kquant(rows: int, cols: int, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random but well-formed Q4_K or Q6_K blocks (the gguf package cannot quantize to K-quants):
    random codes, with each block's float16 super-scales set to sizes that give weights of about ±0.5."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    if qtype == Q.Q4_K:  # d, dmin lead the block
        data[..., 0:2] = np.frombuffer(np.float16(6e-4).tobytes(), np.uint8)
        data[..., 2:4] = np.frombuffer(np.float16(3e-3).tobytes(), np.uint8)
    elif qtype == Q.Q6_K:  # d ends the block
        data[..., size - 2 :] = np.frombuffer(np.float16(1.2e-4).tobytes(), np.uint8)
    else:
        raise ValueError(qtype)
    return data.reshape(rows, -1)


# --- writing a GGUF file from an mlx-lm folder ---------------------------------------------------------


@dataclass(frozen=True)
class Written:
    path: Path
    weights: dict[str, np.ndarray]
    """What the file holds, dequantized, by Hugging Face name and layout: the reference model's weights."""


VocabWriter = Callable[[gguf.GGUFWriter], None]


def bpe_vocab(folder: Path, pre: str = "gpt-2", add_bos: bool | None = False) -> VocabWriter:
    """The folder's byte-level BPE tokenizer as llama.cpp's converter stores it."""
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = tokenizer_json["model"]["vocab"]
    special = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
    tokens = [""] * (max(vocab.values()) + 1)
    for token, i in (vocab | special).items():
        tokens[i] = token
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer_json["model"]["merges"]]

    def write(writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types([3 if t in special else 1 for t in tokens])
        writer.add_token_merges(merges)
        writer.add_eos_token_id(tokens.index(config["eos_token"]))
        writer.add_bos_token_id(tokens.index("<|endoftext|>"))
        if add_bos is not None:  # absent: llama.cpp's default for the pre-tokenizer
            writer.add_add_bos_token(add_bos)
        if template := config.get("chat_template"):
            writer.add_chat_template(template)

    return write


def _stored(values: np.ndarray, qtype: Q, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(the bytes or array to write, the values a reader gets back)."""
    if qtype in (Q.Q4_K, Q.Q6_K):
        data = random_kquant(values.shape[0], values.shape[1], qtype, rng)
    elif qtype == Q.Q8_K:  # a type llama.cpp uses only inside its kernels: zeros of the right size will do
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        return np.zeros((values.shape[0], values.shape[1] // block * size), np.uint8), np.zeros_like(values)
    else:
        data = gguf.quants.quantize(values, qtype)
    back = gguf.quants.dequantize(data, qtype) if qtype not in (Q.F32, Q.F16) else data.astype(np.float32)
    return data, back.reshape(values.shape).astype(np.float32)


def write_gguf(
    folder: Path,
    out: Path,
    qtype: Q = Q.F32,
    types: dict[str, Q] | None = None,
    vocab: VocabWriter | None = None,
    arch: str | None = None,
    metadata: dict[str, Any] | None = None,
    extra_tensors: dict[str, np.ndarray] | None = None,
    seed: int = 0,
) -> Written:
    """`folder`'s model as a GGUF file: 2-D weights stored as `qtype` (or `types[hf_name]`), 1-D ones as F32."""
    config = json.loads((folder / "config.json").read_text())
    model_type = config["model_type"]
    arch = arch or GGUF_ARCH[model_type]
    weights = {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(folder / "model.safetensors")).items()}
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    if model_type == "gemma3_text":
        writer.add_sliding_window(config["sliding_window"])
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    (vocab or bpe_vocab(folder))(writer)

    rng = np.random.default_rng(seed)
    reference: dict[str, np.ndarray] = {}
    for name in sorted(weights):
        values = weights[name]
        if model_type == "gemma3_text" and name.endswith("norm.weight"):
            values = values + 1  # llama.cpp stores Gemma's 1 + w
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            values = llamacpp_permute(values, heads if ".q_proj." in name else kv_heads)
        kind = (types or {}).get(name, qtype if values.ndim == 2 else Q.F32)
        data, back = _stored(values, kind, rng)
        writer.add_tensor(gguf_name(name, arch), data, raw_dtype=kind if data.dtype == np.uint8 else None)
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            back = llamacpp_unpermute(back, heads if ".q_proj." in name else kv_heads)
        if model_type == "gemma3_text" and name.endswith("norm.weight"):
            back = back - 1
        reference[name] = back
    for name, values in (extra_tensors or {}).items():
        writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Written(out, reference)


def write_reference(folder: Path, out: Path, weights: dict[str, np.ndarray]) -> Path:
    """A copy of `folder` holding `weights` (float32): what a converted GGUF file must compute."""
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            shutil.copyfile(folder / name, out / name)
    return out


# --- SentencePiece vocabularies (Gemma, Llama 2) -------------------------------------------------------


def train_spm(texts: list[str], prefix: Path, vocab_size: int, dummy_prefix: bool) -> Path:
    """A SentencePiece BPE model with byte fallback, as Gemma's and Llama 2's are (identity normalization,
    so that encodings compare with llama.cpp's, which does not normalize)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=dummy_prefix,
        remove_extra_whitespaces=False,
        split_digits=True,
        control_symbols=["<start_of_turn>", "<end_of_turn>"],
        character_coverage=1.0,
        max_sentence_length=100_000,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def spm_vocab(model_file: Path, add_space_prefix: bool, add_bos: bool = True) -> VocabWriter:
    """The SentencePiece model as llama.cpp's converter stores it (tokenizer model `llama`)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    count = sp.get_piece_size()

    def kind(i: int) -> int:
        if sp.is_unknown(i):
            return 2
        if sp.is_control(i):
            return 3
        if sp.is_byte(i):
            return 6
        return 5 if sp.is_unused(i) else 1

    def write(writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list([sp.id_to_piece(i) for i in range(count)])
        writer.add_token_scores([sp.get_score(i) for i in range(count)])
        writer.add_token_types([kind(i) for i in range(count)])
        writer.add_bos_token_id(sp.bos_id())
        writer.add_eos_token_id(sp.eos_id())
        writer.add_unk_token_id(sp.unk_id())
        writer.add_eot_token_id(sp.piece_to_id("<end_of_turn>"))
        writer.add_add_bos_token(add_bos)
        writer.add_add_space_prefix(add_space_prefix)

    return write
