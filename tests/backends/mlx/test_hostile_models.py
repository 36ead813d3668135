"""Hostile model folders and GGUF files: sizes they declare but do not hold, values of the wrong
type, weights a model cannot compute with, tokenizers past the embedding. Each is refused at load
in one line naming the model; the ones that once filled memory run as a specplay process under a
2 GB address-space limit."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplay.backends.mlx import load_mlx_backend
from specplay.backends.mlx.gguf import converted_folder
from specplay.backends.mlx.loading import load_model
from specplay.errors import ModelError
from tests.support.gguf_files import bpe_vocab, write_gguf
from tests.support.mutations import JSON_VALUES, paths, replace_at
from tests.support.tiny_models import TinyModels

ROOT = Path(__file__).resolve().parents[3]
LIMITED = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
sys.argv = ["specplay", *sys.argv[1:]]
runpy.run_module("specplay", run_name="__main__")
"""


def copy_of(folder: Path, out: Path) -> Path:
    shutil.copytree(folder, out)
    return out


def with_config(folder: Path, out: Path, **changes: Any) -> Path:
    copy = copy_of(folder, out)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | changes))
    return copy


def with_weights(folder: Path, out: Path, change: Callable[[dict[str, mx.array]], None]) -> Path:
    copy = copy_of(folder, out)
    weights = dict(mx.load(str(copy / "model.safetensors")))
    change(weights)
    mx.save_safetensors(str(copy / "model.safetensors"), weights)
    return copy


def with_header(folder: Path, out: Path, name: str, **entry: Any) -> Path:
    """A copy whose safetensors header says `entry` of tensor `name`, the data left as it is."""
    copy = copy_of(folder, out)
    file = copy / "model.safetensors"
    data = file.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    header[name] |= entry
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    file.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])
    return copy


def refused(target: Path | str, *drafters: tuple[str, str]) -> str:
    with pytest.raises(ModelError) as caught:
        if drafters:
            load_mlx_backend(str(target), list(drafters))
        else:
            load_model("target", str(target))
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# --- declared sizes against the data, in a process under a memory limit --------------------------------


def _folder_member(tiny: TinyModels, out: Path, member: str) -> Path:
    if member == "layers":
        return with_config(tiny.target, out, num_hidden_layers=10**9)
    if member == "vocab":
        return with_config(tiny.target, out, vocab_size=10**9)
    if member == "hidden":
        return with_config(tiny.target, out, hidden_size=10**7)
    if member == "shape":
        return with_header(tiny.target, out, "model.embed_tokens.weight", shape=[10**6, 10**6])
    if member == "offsets":
        return with_header(tiny.target, out, "model.norm.weight", data_offsets=[10**12, 10**12 + 256])
    gguf = out.with_suffix(".gguf")
    key = {"gguf-blocks": "llama.block_count", "gguf-hidden": "llama.embedding_length"}[member]
    return write_gguf(tiny.target, gguf, metadata={key: 10**9}).path


SIZE_MEMBERS = {
    "layers": "declares num_hidden_layers 1000000000 but its weights hold 2 layers",
    "vocab": "(1000000000, 64)",
    "hidden": "10000000",
    "shape": "declares shape [1000000, 1000000]",
    "offsets": "past the end of the file",
    "gguf-blocks": "block_count 1000000000 but tensors for 2 blocks",
    "gguf-hidden": "embedding_length 1000000000",
}


@pytest.mark.parametrize("member", list(SIZE_MEMBERS))
def test_declared_sizes_the_data_does_not_hold_are_one_line_within_2_gb(
    tiny: TinyModels, tmp_path: Path, member: str
) -> None:
    model = _folder_member(tiny, tmp_path / member, member)
    env = os.environ | {"PYTHONPATH": str(ROOT), "SPECPLAY_CACHE_DIR": str(tmp_path / "cache")}
    command = ["run", "--target", str(model), "--mode", "target", "--prompt", "x", "--max-tokens", "2"]
    result = subprocess.run(
        [sys.executable, "-c", LIMITED, *command], capture_output=True, text=True, env=env, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert SIZE_MEMBERS[member] in lines[0] and str(model) in lines[0]


# --- values of the wrong type, names that are not architectures -------------------------------------------


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rope_theta": "abc"}, "rope_theta"),
        ({"rms_norm_eps": "1e-5"}, "rms_norm_eps"),
        ({"num_attention_heads": "4"}, "num_attention_heads"),
        ({"hidden_size": None}, "hidden_size"),
        ({"intermediate_size": True}, "intermediate_size"),
        ({"max_position_embeddings": [4096]}, "max_position_embeddings"),
        ({"rope_theta": 1e400}, "rope_theta"),  # JSON's Infinity after parsing
        ({"layer_types": [1, 2]}, "layer_types"),
        ({"rope_scaling": {"rope_type": "linear", "factor": "abc"}}, "could not load model"),
        ({"sliding_window": 10**12, "layer_types": ["sliding_attention", "full_attention"]}, "cannot run"),
    ],
)
def test_config_values_of_the_wrong_type_are_refused_at_load(
    tiny: TinyModels, tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    folder = with_config(tiny.target, tmp_path / "m", **changes)
    message = refused(folder)
    assert named in message and str(folder) in message


@pytest.mark.parametrize("model_type", ["llama.x", "../llama", "llama/x", "mlx_lm.models.llama", "", 7, None])
def test_a_model_type_that_is_not_an_architecture_name_is_refused(
    tiny: TinyModels, tmp_path: Path, model_type: Any
) -> None:
    message = refused(with_config(tiny.target, tmp_path / "m", model_type=model_type))
    assert "is not an architecture name" in message


def test_a_config_that_is_not_an_object_or_nests_too_deep_is_refused(tiny: TinyModels, tmp_path: Path) -> None:
    folder = copy_of(tiny.target, tmp_path / "m")
    for text in ("[1, 2]", "[" * 100_000 + "]" * 100_000, '{"model_type": '):
        (folder / "config.json").write_text(text)
        assert "config.json that is not a JSON object" in refused(folder)


@pytest.mark.parametrize(
    ("name", "size"),
    [("config.json", 17 * 2**20), ("generation_config.json", 17 * 2**20), ("tokenizer.json", 257 * 2**20)],
)
def test_json_files_larger_than_any_models_are_refused_unread(
    tiny: TinyModels, tmp_path: Path, name: str, size: int
) -> None:
    folder = copy_of(tiny.target, tmp_path / "m")
    with (folder / name).open("ab") as handle:
        handle.truncate(size)  # sparse: no disk written, nothing a reader could hold in memory
    message = refused(folder)
    assert f"its {name} is {size // 2**20} MiB" in message


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_configs_load_or_fail_in_one_line(tiny: TinyModels, tmp_path: Path, data: Any) -> None:
    config = json.loads((tiny.target / "config.json").read_text())
    absent = [("quantization",), ("rope_scaling",), ("layer_types",), ("text_config",)]
    where = data.draw(st.sampled_from([p for p in paths(config) if p] + absent))
    config = config | {where[0]: None} if where[0] not in config else config
    changed = replace_at(config, where, data.draw(JSON_VALUES))
    folder = tmp_path / f"m-{abs(hash(json.dumps(changed))) % 10**9}"
    if not folder.exists():
        copy_of(tiny.target, folder)
    (folder / "config.json").write_text(json.dumps(changed))
    try:
        load_model("target", str(folder))
    except ModelError as error:
        assert "\n" not in str(error) and str(folder) in str(error)


# --- weights, tokenizers -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [mx.int32, mx.bool_, mx.complex64, mx.int8, mx.uint16])
def test_weights_a_model_cannot_compute_with_are_refused_at_load(
    tiny: TinyModels, tmp_path: Path, dtype: mx.Dtype
) -> None:
    name = "model.layers.1.mlp.up_proj.weight"

    def retype(weights: dict[str, mx.array]) -> None:
        weights[name] = weights[name].astype(dtype)

    message = refused(with_weights(tiny.target, tmp_path / "m", retype))
    assert name in message and str(dtype).removeprefix("mlx.core.") in message and "the target" in message


def shrunk_embedding(folder: Path, out: Path, rows: int) -> Path:
    def shrink(weights: dict[str, mx.array]) -> None:
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            weights[name] = weights[name][:rows]

    copy = with_weights(folder, out, shrink)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | {"vocab_size": rows}))
    return copy


def test_a_tokenizer_past_the_embedding_is_refused_naming_its_model(tiny: TinyModels, tmp_path: Path) -> None:
    small = shrunk_embedding(tiny.target, tmp_path / "small", 300)
    message = refused(small)
    assert "the target" in message and "tokenizer of 512 ids but an embedding of 300 rows" in message
    # The same weights as a drafter: the drafter is named, not the target (which is sound).
    message = refused(tiny.target, ("small", str(small)))
    assert f"drafter 'small' ({small})" in message and "the target" not in message
    assert "embedding of 300 rows" in message
    # An embedding with rows past the tokenizer (padding) is not a fault.
    assert load_model("target", str(tiny.padded)).model is not None


# --- GGUF files ----------------------------------------------------------------------------------------


def gguf_refusal(path: Path, cache: Path) -> str:
    with pytest.raises(ModelError) as caught:
        converted_folder(path, cache)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert not cache.exists() or not [p for p in cache.iterdir() if p.is_dir()]  # nothing kept
    return message


def _gguf_with_nested_metadata(path: Path, depth: int) -> Path:
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value)) + value.encode()

    # An empty array of uint32, inside `depth` arrays of one array each.
    value = struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + text("general.deep") + struct.pack("<I", 9) + value)
    return path


@pytest.mark.parametrize("depth", [20, 3_000, 100_000])
def test_gguf_metadata_nested_deep_is_refused(tmp_path: Path, depth: int) -> None:
    message = gguf_refusal(_gguf_with_nested_metadata(tmp_path / "deep.gguf", depth), tmp_path / "cache")
    assert "nested over" in message and "damaged" in message


@pytest.mark.parametrize(
    ("bad_merge", "named"),
    [("zzq qqz", "'zzq'"), ("Ġ zzq", "'zzq'"), ("nospace", "is not two tokens")],
)
def test_merges_naming_tokens_the_vocabulary_lacks_are_refused(
    tiny: TinyModels, tmp_path: Path, bad_merge: str, named: str
) -> None:
    def vocab(writer: Any) -> None:
        add = writer.add_token_merges
        writer.add_token_merges = lambda merges: add([*merges, bad_merge])
        bpe_vocab(tiny.target)(writer)

    written = write_gguf(tiny.target, tmp_path / "m.gguf", vocab=vocab)
    message = gguf_refusal(written.path, tmp_path / "cache")
    assert "tokenizer" in message and "merge" in message and named in message


def test_a_gguf_vocabulary_past_its_embedding_is_refused(tiny: TinyModels, tmp_path: Path) -> None:
    def vocab(writer: Any) -> None:
        add = writer.add_token_list
        writer.add_token_list = lambda tokens: add([*tokens, *(f"extra{i}" for i in range(40))])
        writer.add_token_types = lambda types: None  # token types would no longer match; not the point here
        bpe_vocab(tiny.target)(writer)

    written = write_gguf(tiny.target, tmp_path / "v.gguf", vocab=vocab)
    assert "552 tokens but an embedding of 512 rows" in gguf_refusal(written.path, tmp_path / "cache")


@pytest.fixture(scope="module")
def small_gguf(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """A float16 GGUF file of the tiny target, and where its tensor data starts (its header's length)."""
    from specplay.backends.mlx.gguf.reader import read_gguf

    path = write_gguf(tiny.target, tmp_path_factory.mktemp("fuzz") / "small.gguf", qtype=Q.F16).path
    data = path.read_bytes()
    start = min(data.index(t.data.tobytes()[:64]) for t in read_gguf(path).tensors.values() if t.data.size >= 64)
    return data, start


EDGES = [0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, 10**9]
"""Values a hostile header puts in counts, lengths, dimensions and offsets."""


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_gguf_headers_convert_or_fail_in_one_line(
    small_gguf: tuple[bytes, int], tmp_path: Path, data: Any
) -> None:
    content, header = small_gguf
    mutated = bytearray(content)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(8, header - 8))
        if data.draw(st.booleans()):
            mutated[at] = data.draw(st.integers(0, 255))
        else:
            mutated[at : at + 8] = struct.pack("<Q", data.draw(st.sampled_from(EDGES)))
    path = tmp_path / f"fuzzed-{hash(bytes(mutated)) & 0xFFFFFF:x}.gguf"
    path.write_bytes(bytes(mutated))
    cache = tmp_path / f"{path.stem}-cache"
    try:
        converted_folder(path, cache)
    except ModelError as error:
        assert "\n" not in str(error) and str(path) in str(error)
        assert not cache.exists() or not [p for p in cache.iterdir() if p.is_dir()]


FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
sys.argv = ["specplay", *sys.argv[1:]]
runpy.run_module("specplay", run_name="__main__")
"""


def test_a_full_disk_during_conversion_is_one_line_and_leaves_nothing(tiny: TinyModels, tmp_path: Path) -> None:
    written = write_gguf(tiny.target, tmp_path / "m.gguf")  # float32: weights of about 800 KB
    cache = tmp_path / "cache"
    env = os.environ | {"PYTHONPATH": str(ROOT), "SPECPLAY_CACHE_DIR": str(cache)}
    command = ["run", "--target", str(written.path), "--mode", "target", "--prompt", "x", "--max-tokens", "2"]
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, *command], capture_output=True, text=True, env=env, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert f"cannot write the GGUF cache {cache / 'gguf'}" in lines[0] and "free space" in lines[0]
    assert [p.name for p in (cache / "gguf").iterdir()] == ["hashes.json"]  # no folder, whole or half
