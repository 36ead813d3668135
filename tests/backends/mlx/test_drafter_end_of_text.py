"""Only the target ends its text: a drafter whose tokenizer names other end-of-text tokens (its
config's, or the extra ones of its generation config) drafts through them, and the greedy
speculative text is the target-only text, on the real MLX backend and tiny models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.engine.events import DoneEvent
from tests.support.engine_runs import done, rounds, run
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

TOKENS = 24


def target_only(backend: MlxBackend) -> DoneEvent:
    """The greedy target-only run, ending where the target's own end-of-text says."""
    return done(run(backend, CODE_PROMPT, mode="target", max_tokens=TOKENS, ignore_eos=False))


def drafter_ending_on(model: Path, out: Path, eos_ids: list[int], where: str) -> Path:
    """A copy of `model` whose end-of-text is `eos_ids`: one id in config.json (another
    end-of-text token), or a list in generation_config.json (extra stop tokens)."""
    shutil.copytree(model, out)
    if where == "config.json":
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps(config | {"eos_token_id": eos_ids[0]}))
    else:
        (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_ids}))
    return out


@pytest.mark.parametrize("where", ["config.json", "generation_config.json"])
def test_a_drafters_end_of_text_never_ends_the_run(
    tiny: TinyModels, backend: MlxBackend, tmp_path: Path, where: str
) -> None:
    expected = target_only(backend).token_ids
    stops = [t for t in dict.fromkeys(expected[1:5]) if t not in backend.eos_token_ids]
    early = drafter_ending_on(tiny.near, tmp_path / "early", stops, where)
    paired = load_mlx_backend(str(tiny.target), [("early", str(early))])
    drafter_eos = set(paired.models["early"].tokenizer.eos_token_ids)
    assert drafter_eos != set(paired.target.tokenizer.eos_token_ids) and drafter_eos & set(expected)  # it could cut
    events = run(paired, CODE_PROMPT, max_tokens=TOKENS, ignore_eos=False)
    assert (done(events).token_ids, done(events).finish_reason) == (expected, target_only(paired).finish_reason)
    accepted = {p.token_id for r in rounds(events) for p in r.positions if p.outcome == "accepted"}
    assert accepted & drafter_eos  # the drafter drafted its end-of-text, and the target kept it
