"""GGUF files become mlx-lm folders that compute what the files hold.

Checked three ways: SmolLM2-135M against a numpy forward pass written here over the tensors as llama.cpp
stores and reads them (its pairwise rotary embedding on its permuted q and k); tiny files written from the
repository's tiny models against the folders they came from; and every way a file or cache can be wrong.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)

# isort: split
import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import regex
from gguf import GGMLQuantizationType as Q
from mlx.utils import tree_unflatten
from mlx_lm import load
from mlx_lm.utils import load_model

from specplay.backends.mlx.gguf import cache as gguf_cache
from specplay.backends.mlx.gguf import convert as gguf_convert
from specplay.backends.mlx.gguf import converted_folder, default_cache_dir
from specplay.backends.mlx.loading import upcast_for_cpu
from specplay.errors import ModelError
from specplay.train.model_files import (
    llama_config,
    read_texts,
    stdlib_sources,
    train_tokenizer,
    write_model,
)
from tests.support.checks import every
from tests.support.gguf_files import (
    bpe_vocab,
    spm_vocab,
    train_spm,
    write_gguf,
    write_reference,
)
from tests.support.tiny_models import CHATML_TEMPLATE

VOCAB = 512
SAMPLES = (
    "def parse(path):\n    with open(path) as f:\n        return f.read()  # 42\n",
    "The module provides a way of using the operating system, in 2024 and 1999.",
    "  spaces   and\ttabs\n\nnew lines, café déjà vu ½ ²!",
)


# --- models as numbers ----------------------------------------------------------------------------------


def exact_f32(model: nn.Module) -> nn.Module:
    """The model in float32, quantized layers dequantized with float32 scales: exactly the values llama.cpp
    decodes (mlx-lm's own dequantization rounds them to the scales' float16)."""
    replaced = []
    for name, module in model.named_modules():
        if isinstance(module, nn.QuantizedLinear | nn.QuantizedEmbedding):
            scales, biases = module.scales.astype(mx.float32), module.biases.astype(mx.float32)
            weight = mx.dequantize(module.weight, scales, biases, module.group_size, module.bits)
            if isinstance(module, nn.QuantizedEmbedding):
                plain: nn.Module = nn.Embedding(*weight.shape)
            else:
                plain = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
                if "bias" in module:
                    plain.bias = module.bias
            plain.weight = weight
            replaced.append((name, plain))
    model.update_modules(tree_unflatten(replaced))
    model.set_dtype(mx.float32)
    return model


def logits(folder: Path, ids: Sequence[int], exact: bool = True) -> np.ndarray:
    model, _ = load_model(folder)
    model = exact_f32(model) if exact else model
    return np.array(model(mx.array([list(ids)])).astype(mx.float32))[0]


def assert_same_logits(got: np.ndarray, want: np.ndarray, atol: float) -> None:
    worst = float(np.abs(got - want).max())
    assert worst <= atol, f"logits differ by up to {worst:.3g} (allowed {atol})"
    assert (got.argmax(-1) == want.argmax(-1)).all()


def numpy_llama(path: Path, ids: Sequence[int]) -> np.ndarray:
    """SmolLM2's logits computed in float64 from the GGUF tensors as stored (dequantized by the gguf
    package), the way llama.cpp computes a llama: q and k keep the file's permuted rows, and the rotary
    embedding turns adjacent pairs (2i, 2i + 1) of each head, which is what that permutation is for."""
    reader = gguf.GGUFReader(path)

    def meta(key: str) -> float:
        return float(reader.fields[f"llama.{key}"].contents())

    w = {
        t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape.tolist())))
        for t in reader.tensors
    }
    heads, kv_heads = int(meta("attention.head_count")), int(meta("attention.head_count_kv"))
    eps, base = meta("attention.layer_norm_rms_epsilon"), meta("rope.freq_base")

    def rms_norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight

    def rope(x: np.ndarray) -> np.ndarray:
        dim = x.shape[-1]
        angle = np.arange(len(x))[:, None] * base ** (-np.arange(0, dim, 2) / dim)
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
        return out

    n = len(ids)
    x = w["token_embd.weight"][list(ids)].astype(np.float64)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(int(meta("block_count"))):
        p = f"blk.{layer}."
        h = rms_norm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(n, heads, -1))
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(n, kv_heads, -1))
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, kv_heads, -1)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1]) + causal
        p_attn = np.exp(scores - scores.max(-1, keepdims=True))
        p_attn /= p_attn.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", p_attn, v).reshape(n, -1) @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    head = w.get("output.weight", w["token_embd.weight"])
    return rms_norm(x, w["output_norm.weight"]) @ head.T


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for bytes, which byte-level BPE vocabularies are written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(extra)}


# llama.cpp's pre-tokenizer expressions, by the names GGUF files give them.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
LLAMACPP_REGEXES = {
    "gpt-2": [GPT2_REGEX],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", "[0-9][0-9][0-9]"],
    "smollm": [r"\p{N}", GPT2_REGEX],
    "llama-bpe": [CONTRACTIONS + r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [CONTRACTIONS + r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}


def llamacpp_bpe(
    text: str, regexes: Sequence[str], vocab: dict[str, int], merges: Sequence[str], ignore_merges: bool = False
) -> list[int]:
    """llama.cpp's byte-level BPE, written from its definition: each expression splits the pieces left by
    the one before (text between matches stays a piece), then each piece merges its lowest-ranked pair
    (leftmost first) until none is left; with `ignore_merges` (Llama 3) a piece in the vocabulary is one
    token as it is."""
    pieces = [text]
    for expression in regexes:
        split = []
        for piece in pieces:
            at = 0
            for match in regex.finditer(expression, piece):
                split += [piece[at : match.start()]] if match.start() > at else []
                split += [match.group()] if match.group() else []
                at = match.end()
            split += [piece[at:]] if at < len(piece) else []
        pieces = split
    rank = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
    table = bytes_to_unicode()
    ids: list[int] = []
    for piece in pieces:
        symbols = [table[b] for b in piece.encode("utf-8")]
        if ignore_merges and "".join(symbols) in vocab:
            symbols = ["".join(symbols)]
        while len(symbols) > 1:
            ranked = [(rank.get((a, b), math.inf), i) for i, (a, b) in enumerate(itertools.pairwise(symbols))]
            best, at = min(ranked)
            if best == math.inf:
                break
            symbols[at : at + 2] = [symbols[at] + symbols[at + 1]]
        ids += [vocab[s] for s in symbols]
    return ids


# --- SmolLM2-135M-Instruct, Q4_1 with a Q8_0 embedding -------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_folder(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_folder(smollm2, tmp_path_factory.mktemp("gguf-cache"))


# "You are a helpful AI assistant named SmolLM," in SmolLM2's vocabulary
PROMPT_IDS = [2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28]


def test_smollm2_computes_what_llamacpp_computes_from_the_file(smollm2: Path, smollm2_folder: Path) -> None:
    want = numpy_llama(smollm2, PROMPT_IDS)
    # Same weights in float32: only summation order differs (measured up to 6e-5 on logits of about ±27).
    assert_same_logits(logits(smollm2_folder, PROMPT_IDS), want, atol=1e-3)
    # Run as stored, quantized, with float16 scales (measured 0.02).
    assert_same_logits(logits(smollm2_folder, PROMPT_IDS, exact=False), want, atol=0.15)


def test_smollm2_stays_quantized_as_mlx_reads_the_file(smollm2: Path, smollm2_folder: Path) -> None:
    config = json.loads((smollm2_folder / "config.json").read_text())
    assert config["quantization"] == {
        "group_size": 32,
        "bits": 4,
        "mode": "affine",
        "model.embed_tokens": {"group_size": 32, "bits": 8, "mode": "affine"},
    }
    assert config["tie_word_embeddings"] is True and config["num_key_value_heads"] == 3
    # MLX's own GGUF reader makes the same affine triples from Q4_1 and Q8_0: the repacking is bit-exact.
    mlx_read = mx.load(str(smollm2))
    ours = mx.load(str(smollm2_folder / "model.safetensors"))
    for gguf_name, path in (("token_embd", "model.embed_tokens"), ("blk.7.ffn_down", "model.layers.7.mlp.down_proj")):
        for part in ("weight", "scales", "biases"):
            assert mx.array_equal(mlx_read[f"{gguf_name}.{part}"], ours[f"{path}.{part}"]), f"{path}.{part}"


def test_smollm2_greedy_text_is_the_same_quantized_and_in_fp32(smollm2_folder: Path) -> None:
    from mlx_lm import stream_generate

    model, tokenizer = load(str(smollm2_folder))
    messages = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    def greedy(model: nn.Module) -> tuple[list[int], str]:
        steps = list(stream_generate(model, tokenizer, prompt, max_tokens=32))
        return [step.token for step in steps], "".join(step.text for step in steps)

    quantized, text = greedy(model)
    assert len(quantized) == 32
    assert greedy(upcast_for_cpu(model))[0] == quantized
    assert "robot" in text.lower()  # English about the prompt, not the noise a wrong layout gives


def test_smollm2_tokenizer_gives_llamacpp_ids_and_renders_its_chat_template(smollm2_folder: Path) -> None:
    _, tokenizer = load(str(smollm2_folder))
    # Known encodings of SmolLM2's vocabulary.
    known = {
        "Hello, we can use": [19556, 28, 392, 416, 722],
        "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
        "Café déjà vu.": [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30],
        "  multiple   spaces": [216, 2701, 256, 5600],
        "\n": [198],
    }
    for text, ids in known.items():
        assert tokenizer.encode(text) == ids, text
    # The file's control tokens are whole tokens, with the file's ids.
    assert tokenizer.encode("<|im_start|>user<|im_end|><|endoftext|>") == [1, 4093, 2, 0]
    assert tokenizer.eos_token_ids == {2}
    # smollm's pre-tokenizer splits digits singly.
    digits = tokenizer.encode("2024")
    assert [tokenizer.decode([i]) for i in digits] == ["2", "0", "2", "4"]
    # And everything else as llama.cpp's BPE, written above from its definition, does.
    tokenizer_json = json.loads((smollm2_folder / "tokenizer.json").read_text())
    vocab, merges = tokenizer_json["model"]["vocab"], [" ".join(m) for m in tokenizer_json["model"]["merges"]]
    for text in SAMPLES:
        assert tokenizer.encode(text) == llamacpp_bpe(text, LLAMACPP_REGEXES["smollm"], vocab, merges), text
        assert tokenizer.decode(tokenizer.encode(text)) == text
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a colour."}], add_generation_prompt=True, tokenize=False
    )
    assert "<|im_start|>user\nName a colour.<|im_end|>\n" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")


# --- tiny files from the repository's tiny models -------------------------------------------------------


@dataclass(frozen=True)
class Tiny:
    root: Path
    llama: Path  # grouped-query attention (4 heads, 2 KV heads), untied output
    rope3: Path  # llama with Llama 3 rope scaling


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    root = tmp_path_factory.mktemp("gguf-tiny")
    train_tokenizer(
        read_texts(stdlib_sources(20)), root / "tok", VOCAB, eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE
    )
    gqa = {"num_key_value_heads": 2, "tie_word_embeddings": False}
    write_model(root / "llama", llama_config(64, 2, VOCAB, **gqa), root / "tok", seed=0, output_scale=4.0)
    qwen2 = llama_config(64, 1, VOCAB, num_key_value_heads=2) | {"model_type": "qwen2"}
    write_model(root / "qwen2", qwen2, root / "tok", seed=1, output_scale=4.0)
    qwen3 = llama_config(64, 1, VOCAB, num_key_value_heads=2, head_dim=16) | {"model_type": "qwen3"}
    write_model(root / "qwen3", qwen3, root / "tok", seed=3, output_scale=4.0)
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    rope3 = llama_config(64, 1, VOCAB, rope_scaling=llama3, rope_theta=500000.0, **gqa)
    write_model(root / "rope3", rope3, root / "tok", seed=2, output_scale=4.0)
    return Tiny(root, root / "llama", root / "rope3")


TOKENS = [5, 77, 300, 41, 2, 150, 9, 480, 33, 33, 12, 260]


def convert_and_compare(written_from: Path, out: Path, cache: Path, atol: float, **write: object) -> Path:
    written = write_gguf(written_from, out, **write)  # type: ignore[arg-type]
    folder = converted_folder(written.path, cache)
    reference = write_reference(written_from, out.with_suffix(".reference"), written.weights)
    assert_same_logits(logits(folder, TOKENS), logits(reference, TOKENS), atol=atol)
    return folder


@pytest.mark.parametrize(
    ("storage", "bits"),
    [
        pytest.param(q, b, id=q.name)
        for q, b in [(Q.F32, None), (Q.F16, None), (Q.BF16, None), (Q.Q8_0, 8), (Q.Q4_0, 4), (Q.Q4_1, 4)]
    ],
)
def test_each_storage_converts_to_the_same_model(tiny: Tiny, tmp_path: Path, storage: Q, bits: int | None) -> None:
    folder = convert_and_compare(tiny.llama, tmp_path / "m.gguf", tmp_path / "cache", atol=1e-4, qtype=storage)
    config = json.loads((folder / "config.json").read_text())
    assert config.get("quantization", {}).get("bits") == bits
    if storage == Q.F32:  # stored as is: the very model the file came from
        assert_same_logits(logits(folder, TOKENS), logits(tiny.llama, TOKENS), atol=1e-5)


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_qwen_models_convert_unpermuted(tiny: Tiny, tmp_path: Path, family: str) -> None:
    source = tiny.root / family  # qwen2: q, k, v biases; qwen3: q and k norms; both tie their embeddings
    written = write_gguf(source, tmp_path / "q.gguf", qtype=Q.F32)
    folder = converted_folder(written.path, tmp_path / "cache")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == family and config["tie_word_embeddings"] is True
    assert_same_logits(logits(folder, TOKENS), logits(source, TOKENS), atol=1e-5)


def test_k_quants_are_dequantized_through_the_gguf_package(tiny: Tiny, tmp_path: Path) -> None:
    # K-quant blocks span 256 values: the tiny model's down projections (256 inputs) can hold them. Their
    # values are kept as float16, which rounds them (logits within 3e-3 of the exact ones, measured).
    types = {"model.layers.0.mlp.down_proj.weight": Q.Q4_K, "model.layers.1.mlp.down_proj.weight": Q.Q6_K}
    folder = convert_and_compare(
        tiny.llama, tmp_path / "k.gguf", tmp_path / "cache", atol=1e-2, qtype=Q.Q8_0, types=types
    )
    config = json.loads((folder / "config.json").read_text())
    weights = mx.load(str(folder / "model.safetensors"))
    assert weights["model.layers.0.mlp.down_proj.weight"].dtype == mx.float16
    assert "model.layers.0.mlp.down_proj.scales" not in weights
    assert config["quantization"]["bits"] == 8  # the Q8_0 rest stays quantized


def test_llama3_rope_scaling_is_recovered_from_rope_freqs(tiny: Tiny, tmp_path: Path) -> None:
    config = json.loads((tiny.rope3 / "config.json").read_text())
    scaling, head_dim = config["rope_scaling"], config["hidden_size"] // config["num_attention_heads"]
    # The divisors llama.cpp's converter stores for Llama 3.x (its rope_freqs tensor).
    wavelen = 2 * math.pi * config["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    old = scaling["original_max_position_embeddings"]
    smooth = (old / wavelen - 1.0) / (4.0 - 1.0)
    factors = np.where(wavelen < old / 4.0, 1.0, np.where(wavelen > old / 1.0, 8.0, 1 / ((1 - smooth) / 8.0 + smooth)))
    assert ((factors > 1) & (factors < 8)).any()  # the tiny head has a frequency in the smoothed band
    written = write_gguf(
        tiny.rope3, tmp_path / "r.gguf", extra_tensors={"rope_freqs.weight": factors.astype(np.float32)}
    )
    folder = converted_folder(written.path, tmp_path / "cache")
    assert json.loads((folder / "config.json").read_text())["rope_scaling"] == scaling
    long = TOKENS * 40  # far enough for the scaled frequencies to matter
    assert_same_logits(logits(folder, long), logits(tiny.rope3, long), atol=1e-4)


def test_the_tokenizer_and_chat_template_survive_the_round_trip(tiny: Tiny, tmp_path: Path) -> None:
    written = write_gguf(tiny.llama, tmp_path / "t.gguf", qtype=Q.F16)
    _, converted = load(str(converted_folder(written.path, tmp_path / "cache")))
    _, original = load(str(tiny.llama))
    for text in (*SAMPLES, "<|im_start|>user\nhi<|im_end|>"):
        assert converted.encode(text) == original.encode(text), text
        assert converted.decode(converted.encode(text)) == text
    messages = [{"role": "user", "content": "tell me about os.path"}]
    assert converted.apply_chat_template(messages, add_generation_prompt=True) == original.apply_chat_template(
        messages, add_generation_prompt=True
    )
    assert converted.eos_token_ids == original.eos_token_ids


@pytest.mark.parametrize("pre", sorted(LLAMACPP_REGEXES))
def test_each_pre_tokenizer_splits_as_llamacpp_does(tiny: Tiny, tmp_path: Path, pre: str) -> None:
    written = write_gguf(tiny.llama, tmp_path / "p.gguf", vocab=bpe_vocab(tiny.llama, pre=pre, add_bos=None))
    folder = converted_folder(written.path, tmp_path / "cache")
    _, tokenizer = load(str(folder))
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    vocab, merges = tokenizer_json["model"]["vocab"], [" ".join(m) for m in tokenizer_json["model"]["merges"]]
    llama3 = pre == "llama-bpe"
    bos = [tokenizer.bos_token_id] if llama3 else []  # llama.cpp adds BOS for Llama 3 unless told not to
    for text in (*SAMPLES, "I'VE 12345678 x  \n\n  y"):
        assert tokenizer.encode(text) == bos + llamacpp_bpe(text, LLAMACPP_REGEXES[pre], vocab, merges, llama3), text


# --- SentencePiece vocabularies: Gemma 3 and Llama 2 style ----------------------------------------------


def gemma3_config(vocab: int) -> dict[str, object]:
    return {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 6,  # the sixth is Gemma 3's global-attention layer
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "query_pre_attn_scalar": 16,
        "sliding_window": 8,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 4096,
    }


def random_folder(out: Path, config: dict[str, object], seed: int) -> Path:
    """A random-init mlx-lm model without a tokenizer: the reference side of a SentencePiece file."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes, save_config

    mx.random.seed(seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    # Random norm weights too: Gemma's 1 + w offset must come out right, not just cancel on ones.
    for name, value in tree_flatten(model.parameters()):
        if name.endswith("norm.weight"):
            model.update(tree_unflatten([(name, 0.3 * mx.random.normal(value.shape))]))
    weights = dict(tree_flatten(model.parameters()))
    if config["model_type"] == "gemma3_text":
        del weights["lm_head.weight"]  # Gemma ties its output to the embedding
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    save_config(dict(config), out / "config.json")
    return out


@pytest.fixture(scope="module")
def spm_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("gguf-spm")
    lines = [line for text in read_texts(stdlib_sources(12)) for line in text.splitlines() if line.strip()]
    return {
        "gemma": train_spm(lines, root / "gemma", VOCAB, dummy_prefix=False),
        "llama2": train_spm(lines, root / "llama2", VOCAB, dummy_prefix=True),
    }


def sentencepiece_ids(model_file: Path, text: str) -> list[int]:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(model_file)).encode(text)


SPM_SAMPLES = (*SAMPLES, "naïve résumé — 東京 🙂", "x")


@pytest.mark.parametrize(("style", "config"), [("gemma", gemma3_config(VOCAB)), ("llama2", None)])
def test_sentencepiece_models_convert_with_their_tokenizer(
    spm_models: dict[str, Path], tmp_path: Path, style: str, config: dict[str, object] | None
) -> None:
    model_file = spm_models[style]
    source = random_folder(tmp_path / "source", config or llama_config(64, 2, VOCAB, tie_word_embeddings=False), 3)
    prefix = style == "llama2"
    folder = convert_and_compare(
        source, tmp_path / "s.gguf", tmp_path / "cache", atol=1e-3, qtype=Q.Q8_0, vocab=spm_vocab(model_file, prefix)
    )
    _, tokenizer = load(str(folder))
    bos = tokenizer.bos_token_id
    for text in SPM_SAMPLES:
        ids = sentencepiece_ids(model_file, text)
        assert tokenizer.encode(text) == [bos, *ids], text
        assert tokenizer.decode(ids) == text
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    start_of_turn = tokenizer.convert_tokens_to_ids("<start_of_turn>")
    assert tokenizer.encode("<start_of_turn>user", add_special_tokens=False)[0] == start_of_turn  # whole
    assert end_of_turn in tokenizer.eos_token_ids


# --- what is refused, and what a broken run leaves -----------------------------------------------------


@pytest.fixture(scope="module")
def small_gguf(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tiny.llama, tmp_path_factory.mktemp("gguf-small") / "small.gguf", qtype=Q.F16).path


def test_a_converted_file_is_found_in_the_cache_by_its_content(
    small_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int, int]] = []
    first = converted_folder(small_gguf, tmp_path, on_progress=lambda *event: seen.append(event))
    assert {stage for stage, _, _ in seen} == {"hashing", "converting"}
    assert every(0 < done <= total for _, done, total in seen) and seen[-1][1] == seen[-1][2]

    def fail(*_: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_convert, "write_folder", fail)
    monkeypatch.setattr(gguf_cache, "_hash", fail)  # the index remembers (path, size, mtime)
    assert converted_folder(small_gguf, tmp_path) == first
    monkeypatch.undo()
    monkeypatch.setattr(gguf_convert, "write_folder", fail)
    copy = tmp_path / "elsewhere.gguf"
    shutil.copyfile(small_gguf, copy)  # another path, the same content: hashed, then found
    assert converted_folder(copy, tmp_path) == first


def refusal(path: Path, cache: Path) -> str:
    with pytest.raises(ModelError) as caught:
        converted_folder(path, cache)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "model.gguf"
    text.write_text("not a model")
    message = refusal(text, tmp_path / "cache")
    assert str(text) in message and "not a GGUF file" in message
    assert not (tmp_path / "cache").exists()  # refused before the cache was touched
    assert "not found" in refusal(tmp_path / "missing.gguf", tmp_path / "cache")
    assert "not a file" in refusal(tmp_path, tmp_path / "cache")


@pytest.mark.parametrize("keep", [0.6, 0.0005])
def test_a_truncated_file_is_refused(small_gguf: Path, tmp_path: Path, keep: float) -> None:
    cut = tmp_path / "cut.gguf"
    data = small_gguf.read_bytes()
    cut.write_bytes(data[: int(len(data) * keep)])
    message = refusal(cut, tmp_path / "cache")
    assert str(cut) in message and "truncated" in message and "download" in message
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]


def test_an_unsupported_architecture_is_refused(tiny: Tiny, tmp_path: Path) -> None:
    written = write_gguf(tiny.llama, tmp_path / "a.gguf", arch="phi3")
    message = refusal(written.path, tmp_path / "cache")
    assert "'phi3'" in message and "llama" in message and "qwen2" in message and "gemma3" in message
    experts = np.zeros((2, 256, 64), np.float32)  # a mixture-of-experts variant of the llama layout
    variant = write_gguf(tiny.llama, tmp_path / "v.gguf", extra_tensors={"blk.0.ffn_gate_exps.weight": experts})
    message = refusal(variant.path, tmp_path / "cache")
    assert "blk.0.ffn_gate_exps.weight" in message and "mlx-lm folder" in message


def test_an_unsupported_quantization_is_refused(tiny: Tiny, tmp_path: Path) -> None:
    written = write_gguf(tiny.llama, tmp_path / "q.gguf", types={"model.layers.0.mlp.down_proj.weight": Q.Q8_K})
    message = refusal(written.path, tmp_path / "cache")
    assert "Q8_K" in message and str(written.path) in message


def test_a_tokenizer_that_cannot_be_rebuilt_is_refused(tiny: Tiny, tmp_path: Path) -> None:
    unknown_pre = write_gguf(tiny.llama, tmp_path / "p.gguf", vocab=bpe_vocab(tiny.llama, pre="made-up"))
    assert "'made-up'" in refusal(unknown_pre.path, tmp_path / "cache")

    def wordpiece(writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("bert")
        writer.add_token_list([f"t{i}" for i in range(VOCAB)])

    bert = write_gguf(tiny.llama, tmp_path / "b.gguf", vocab=wordpiece)
    message = refusal(bert.path, tmp_path / "cache")
    assert "tokenizer" in message and "'bert'" in message


def test_an_unwritable_cache_is_refused(small_gguf: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = refusal(small_gguf, blocker / "cache")  # a cache inside a file: unwritable, even as root
    assert str(blocker / "cache") in message and "SPECPLAY_CACHE_DIR" in message


def folders(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir())


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, MemoryError])
def test_an_interrupted_conversion_leaves_nothing_behind(
    small_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupt: type[BaseException]
) -> None:
    cache = tmp_path / "cache"
    real = gguf_convert.convert_tensor
    calls = []

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 5:
            raise interrupt()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gguf_convert, "convert_tensor", interrupted)
    with pytest.raises(interrupt):
        converted_folder(small_gguf, cache)
    assert folders(cache) == []
    monkeypatch.undo()
    folder = converted_folder(small_gguf, cache)
    assert folders(cache) == [folder]


KILLABLE = """
import sys, time
from pathlib import Path
from typing import Any
import specplay.backends.mlx
from specplay.backends.mlx.gguf import converted_folder

def slow(stage, done, total):
    if stage == "converting":
        print(done, flush=True)
        time.sleep(0.2)

converted_folder(Path(sys.argv[1]), Path(sys.argv[2]), slow)
"""


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_a_signal_mid_conversion_leaves_nothing_trusted(small_gguf: Path, tmp_path: Path, signal_number: int) -> None:
    cache = tmp_path / "cache"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, str(small_gguf), str(cache)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "1"  # converting, 0.2 s a tensor
    child.send_signal(signal_number)
    child.wait(timeout=60)
    assert child.returncode != 0
    leftovers = folders(cache)
    assert all(p.name.startswith(".tmp-") for p in leftovers)  # nothing a later run would trust (or nothing left)
    assert len(leftovers) == (0 if signal_number == signal.SIGINT else 1)  # Ctrl-C cleans up; a kill cannot
    folder = converted_folder(small_gguf, cache)
    assert folders(cache) == [folder]  # and the killed run's temporary folder is gone


def test_a_killed_conversion_is_never_trusted_and_its_leftovers_are_removed(small_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    folder = converted_folder(small_gguf, cache)
    # What a SIGKILL mid-conversion leaves: a temporary folder of a process that is gone...
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = cache / f".tmp-{int(dead.stdout)}@{socket.gethostname()}@{folder.name}-x1"
    leftover.mkdir()
    (leftover / "config.json").write_text("{}")
    # ...one that may still be running on another machine sharing the cache (kept, and ignored)...
    foreign = cache / f".tmp-1@elsewhere@{folder.name}-x2"
    foreign.mkdir()
    # ...and, had the final folder been damaged by hand, a folder without its completion marker.
    (folder / gguf_cache.MARKER).unlink()
    (folder / "model.safetensors").write_bytes(b"partial")
    again = converted_folder(small_gguf, cache)
    assert again == folder and (folder / gguf_cache.MARKER).is_file()
    assert folders(cache) == sorted([folder, foreign])
    assert np.isfinite(logits(folder, TOKENS)).all()


def test_the_default_cache_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path / "s"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "s" / "gguf"
    monkeypatch.delenv("SPECPLAY_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "x" / "specplay" / "gguf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "specplay" / "gguf"


@pytest.mark.parametrize(
    "metadata",
    [
        {"general.alignment": 0},
        {"llama.attention.head_count": 0},
        {"llama.embedding_length": "wide"},
        {"llama.context_length": "long"},
    ],
)
def test_damaged_metadata_is_refused_in_one_line(tiny: Tiny, tmp_path: Path, metadata: dict[str, Any]) -> None:
    written = write_gguf(tiny.llama, tmp_path / "m.gguf", metadata=metadata)
    message = refusal(written.path, tmp_path / "cache")
    assert str(written.path) in message and "damaged" in message and "download" in message
    assert "\n" not in message and not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
