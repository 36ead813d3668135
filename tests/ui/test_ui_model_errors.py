"""The playground on a real MLX model whose files fail at run time: one line in the status, the app up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specplay.ui.protocols import RunState
from tests.support.tiny_models import TinyModels
from tests.support.ui_helpers import make_app, wait_for


async def test_a_chat_template_that_fails_is_one_status_line(tiny: TinyModels, tmp_path: Path) -> None:
    folder = shutil.copytree(tiny.chat_target, tmp_path / "chat")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = "{{ raise_exception('this model takes no user turns') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": template}))
    app = make_app(tiny, tmp_path / "sessions", target=folder, prompt="x", max_tokens=4, autorun=True)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: "run failed" in app.playground.status, "the run to fail")
        status = app.playground.status
        assert "chat template cannot render the prompt" in status and "--raw" in status and "\n" not in status
        assert "Traceback" not in status and app.playground.state == RunState.READY
        await pilot.press("ctrl+q")
