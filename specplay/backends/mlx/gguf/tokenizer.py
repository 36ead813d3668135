"""The tokenizer of a GGUF file, rebuilt from its metadata as the tokenizer.json and
tokenizer_config.json that mlx-lm (through transformers) loads.

Two vocabularies are supported: byte-level BPE (`gpt2`, with its merges and llama.cpp's pre-tokenizer)
and SentencePiece-style BPE with byte fallback (`llama`, as Gemma and Llama 2 use). A SentencePiece
vocabulary keeps scores, not merges: llama.cpp merges the adjacent pair whose union has the highest score,
which is BPE with every split of every token as a merge, ranked by the token's score.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import TokenType
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from specplay.backends.mlx.gguf.pretokenizers import PRE_TOKENIZERS, pre_tokenizer
from specplay.backends.mlx.gguf.reader import USE_FOLDER, GGUFFile
from specplay.errors import ModelError
from specplay.files.json_text import dump_json

SPIECE_SPACE = "\u2581"


@dataclass(frozen=True)
class TokenizerFiles:
    tokenizer_json: str
    tokenizer_config: dict[str, Any]
    bos_token_id: int | None
    eos_token_ids: list[int]
    """The end-of-sequence token and the end-of-turn ones chat models stop at."""


def _id(gguf: GGUFFile, key: str, count: int) -> int | None:
    value = gguf.metadata.get(f"tokenizer.ggml.{key}")
    return int(value) if value is not None and 0 <= int(value) < count else None


def _refuse(gguf: GGUFFile, why: str) -> ModelError:
    return ModelError(f"cannot rebuild the tokenizer of {gguf.path}: {why}; {USE_FOLDER}")


def _merge_pairs(gguf: GGUFFile, merges: Any, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Each merge as the pair it joins; both halves and their union must be tokens of the vocabulary
    (the tokenizers library refuses anything else with no word of which merge)."""
    pairs: list[tuple[str, str]] = []
    for number, merge in enumerate(merges if isinstance(merges, list) else [merges]):
        left, space, right = str(merge).partition(" ")
        missing = [t for t in (left, right, left + right) if t not in vocab]
        if not space or missing:
            what = f"names {missing[0]!r}, which is not in its vocabulary" if space else "is not two tokens"
            raise _refuse(gguf, f"merge {number} ({str(merge)[:40]!r}) {what}")
        pairs.append((left, right))
    return pairs


def _bpe(gguf: GGUFFile, tokens: list[str]) -> tuple[Tokenizer, bool, bool]:
    """Byte-level BPE; also whether decoding cleans spaces and llama.cpp's default for adding BOS."""
    name = gguf.metadata.get("tokenizer.ggml.pre")
    pre = pre_tokenizer(name)
    if pre is None:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise _refuse(gguf, f"llama.cpp pre-tokenizer {name!r} is not one this converter knows ({known})")
    merges = gguf.metadata.get("tokenizer.ggml.merges")
    if not merges:
        raise _refuse(gguf, "its byte-level BPE vocabulary has no merges")
    vocab = {token: i for i, token in reversed(list(enumerate(tokens)))}
    pairs = _merge_pairs(gguf, merges, vocab)
    tokenizer = Tokenizer(models.BPE(vocab, pairs, ignore_merges=pre.ignore_merges))
    splits = [pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in pre.regexes]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, pre.clean_spaces, pre.add_bos


def _spm_merges(tokens: list[str], scores: np.ndarray, types: np.ndarray) -> list[tuple[str, str]]:
    """Every split of every normal token into two tokens, the highest-scoring union first."""
    vocab = {token: i for i, token in reversed(list(enumerate(tokens)))}
    found: list[tuple[float, int, str, str]] = []
    for i, token in enumerate(tokens):
        if types[i] != TokenType.NORMAL or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                found.append((-float(scores[i]), i, left, right))
    found.sort()
    return [(left, right) for _, _, left, right in found]


def _spm(gguf: GGUFFile, tokens: list[str], types: np.ndarray, unknown: int | None) -> tuple[Tokenizer, bool, bool]:
    scores = gguf.metadata.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise _refuse(gguf, "its SentencePiece vocabulary has no scores")
    if not any(f"<0x{b:02X}>" in tokens for b in (0x00, 0x41, 0xFF)):
        raise _refuse(gguf, "its SentencePiece vocabulary has no byte tokens to fall back on")
    vocab = {token: i for i, token in reversed(list(enumerate(tokens)))}
    unk = tokens[unknown] if unknown is not None else None
    model = models.BPE(
        vocab, _spm_merges(tokens, np.asarray(scores), types), unk_token=unk, fuse_unk=True, byte_fallback=True
    )
    tokenizer = Tokenizer(model)
    prefix = bool(gguf.metadata.get("tokenizer.ggml.add_space_prefix", True))
    spaces = normalizers.Replace(" ", SPIECE_SPACE)
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPIECE_SPACE), spaces]) if prefix else spaces
    steps = [decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)] if prefix else steps)
    return tokenizer, False, True


def _template(head: list[tuple[str, int]], tail: list[tuple[str, int]]) -> processors.TemplateProcessing:
    """BOS before and EOS after the text, as llama.cpp adds them when the file asks it to."""
    first, second = [t for t, _ in head], [t for t, _ in tail]
    return processors.TemplateProcessing(
        single=[*first, "$A", *second],
        pair=[*first, "$A", *second, *first, "$B:1", *second],
        special_tokens=list(dict.fromkeys(head + tail)),
    )


def tokenizer_files(gguf: GGUFFile, context_length: int) -> TokenizerFiles:
    """The tokenizer files of `gguf`, or a ModelError when its vocabulary cannot be rebuilt."""
    kind = gguf.metadata.get("tokenizer.ggml.model")
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    if not kind or not tokens:
        raise _refuse(gguf, "the file carries no vocabulary (tokenizer.ggml.tokens)")
    count = len(tokens)
    types = np.asarray(gguf.metadata.get("tokenizer.ggml.token_type", np.full(count, TokenType.NORMAL)))
    if len(types) != count:
        raise _refuse(gguf, "its token types do not match its vocabulary")
    unknown = _id(gguf, "unknown_token_id", count)
    if kind == "gpt2":
        tokenizer, clean_spaces, add_bos_default = _bpe(gguf, tokens)
    elif kind == "llama":
        tokenizer, clean_spaces, add_bos_default = _spm(gguf, tokens, types, unknown)
    else:
        raise _refuse(gguf, f"its {kind!r} vocabulary is not one this converter rebuilds (gpt2 and llama are)")

    # Control tokens (chat markers, BOS, EOS) and user-defined ones match whole, before any splitting.
    tokenizer.add_tokens(
        [
            AddedToken(tokens[i], special=int(types[i]) in (TokenType.CONTROL, TokenType.UNKNOWN), normalized=False)
            for i in range(count)
            if int(types[i]) in (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
        ]
    )
    bos, eos = _id(gguf, "bos_token_id", count), _id(gguf, "eos_token_id", count)
    add_bos = bool(gguf.metadata.get("tokenizer.ggml.add_bos_token", add_bos_default)) and bos is not None
    add_eos = bool(gguf.metadata.get("tokenizer.ggml.add_eos_token", False)) and eos is not None
    head = [(tokens[bos], bos)] if add_bos and bos is not None else []
    tail = [(tokens[eos], eos)] if add_eos and eos is not None else []
    if head or tail:
        tokenizer.post_processor = _template(head, tail)

    def name(i: int | None) -> str | None:
        return tokens[i] if i is not None else None

    ends = [eos] + [_id(gguf, key, count) for key in ("eot_token_id", "eom_token_id")]
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name(bos),
        "eos_token": name(eos),
        "unk_token": name(unknown),
        "pad_token": name(_id(gguf, "padding_token_id", count)),
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": clean_spaces,
        "model_max_length": context_length,
    }
    if template := gguf.metadata.get("tokenizer.chat_template"):
        config["chat_template"] = template
    return TokenizerFiles(tokenizer.to_str(), config, bos, [i for i in dict.fromkeys(ends) if i is not None])


def write_tokenizer(files: TokenizerFiles, folder: Path) -> None:
    (folder / "tokenizer.json").write_text(files.tokenizer_json, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(dump_json(files.tokenizer_config, indent=2), encoding="utf-8")
