"""llama.cpp's pre-tokenizers for byte-level BPE vocabularies, by the name a GGUF file gives
(`tokenizer.ggml.pre`): the regular expressions that split text into words before merging.

llama.cpp applies its expressions in turn, each splitting the pieces the previous one left, and keeps
the text between matches as pieces of its own; a sequence of isolating splits does the same.
"""

from __future__ import annotations

from dataclasses import dataclass

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]
    clean_spaces: bool = True
    """Whether decoding removes the space before punctuation, as llama.cpp does for this vocabulary."""
    ignore_merges: bool = False
    """Whether a word found whole in the vocabulary is one token, before any merging (Llama 3)."""
    add_bos: bool = False
    """llama.cpp's default for adding BOS when the file does not say."""


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_STARCODER = PreTokenizer((r"\p{N}", _GPT2))
_LLAMA3_PRE = PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_PRE = PreTokenizer((_QWEN2,), clean_spaces=False)

PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    "gpt-2": PreTokenizer((_GPT2,)),
    "phi-2": PreTokenizer((_GPT2,)),
    "mpt": PreTokenizer((_GPT2,)),
    "olmo": PreTokenizer((_GPT2,)),
    "starcoder": _STARCODER,
    "refact": _STARCODER,
    "codeshell": _STARCODER,
    "smollm": PreTokenizer(_STARCODER.regexes, clean_spaces=False),
    "llama3": _LLAMA3_PRE,
    "llama-v3": _LLAMA3_PRE,
    "llama-bpe": _LLAMA3_PRE,
    "falcon3": _LLAMA3_PRE,
    "dbrx": PreTokenizer((_LLAMA3,)),
    "smaug-bpe": PreTokenizer((_LLAMA3,)),
    "qwen2": _QWEN2_PRE,
    "deepseek-r1-qwen": _QWEN2_PRE,
    "megrez": PreTokenizer((_QWEN2,)),
    "stablelm2": PreTokenizer((_QWEN2,)),
}


def pre_tokenizer(name: str | None) -> PreTokenizer | None:
    """The named pre-tokenizer; a file without a name gets llama.cpp's default. None when unknown."""
    return PRE_TOKENIZERS.get(name or "default")
