"""`specplay run` on models that cannot run as given: one line naming the problem and its fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specplay.cli import main
from tests.support.tiny_models import TinyModels

BROKEN_TEMPLATES = [
    "{% for m in messages %}{{ m['content'] }}",  # unclosed block: a syntax error
    "{{ raise_exception('this model takes no user turns') }}",  # the template's own refusal
    "{{ messages[0]['content'] / 2 }}",  # an error while rendering
    "{{ undefined_macro() }}",
]


@pytest.mark.parametrize("template", BROKEN_TEMPLATES)
def test_a_chat_template_that_fails_is_one_line(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str
) -> None:
    folder = shutil.copytree(tiny.chat_target, tmp_path / "chat")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": template}))
    code = main(["run", "--target", str(folder), "--mode", "target", "--prompt", "x", "--max-tokens", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "chat template cannot render the prompt" in err and "--raw" in err
    # --raw sends the prompt as it is, past the template
    raw = ["run", "--target", str(folder), "--mode", "target", "--prompt", "x", "--max-tokens", "2", "--raw"]
    assert main([*raw, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 2
