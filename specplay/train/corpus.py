"""The demo corpus: text found on every Python installation, so anyone can rebuild the models offline.

Code is the standard library's source; prose is the documentation shipped with it
(`pydoc_data.topics`) plus the long docstrings of the standard library's modules, classes and
functions. Each text is assigned to train or held-out by a hash of its name, so the split never
depends on the file system's order.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

MIN_DOCSTRING_CHARS = 300
HELD_OUT_SHARE = 0.05


@dataclass(frozen=True)
class Text:
    name: str
    kind: str
    """code or prose"""
    body: str


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> list[Path]:
    """Library modules only: tests, demos and site-packages would tilt the code towards test style."""
    root = stdlib_dir()
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3", "turtledemo"}
    return sorted(path for path in root.rglob("*.py") if not skip & set(path.relative_to(root).parts))


def code_texts() -> list[Text]:
    root = stdlib_dir()
    texts = []
    for path in stdlib_files():
        body = path.read_text(encoding="utf-8", errors="replace")
        if body.strip():
            texts.append(Text(str(path.relative_to(root)), "code", body))
    return texts


def docstrings(code: str) -> list[str]:
    """Module, class and function docstrings, cleaned of their indentation."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))]
    found = (ast.get_docstring(node, clean=True) for node in nodes)
    return [doc for doc in found if doc and len(doc) >= MIN_DOCSTRING_CHARS]


def prose_texts() -> list[Text]:
    from pydoc_data import topics

    texts = [Text(f"pydoc_data.topics:{key}", "prose", body) for key, body in sorted(topics.topics.items())]
    for code in code_texts():
        for i, doc in enumerate(docstrings(code.body)):
            texts.append(Text(f"{code.name}:doc{i}", "prose", doc))
    return texts


def is_held_out(text: Text) -> bool:
    digest = hashlib.sha256(text.name.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < HELD_OUT_SHARE


def split(texts: list[Text]) -> tuple[list[Text], list[Text]]:
    train = [t for t in texts if not is_held_out(t)]
    held_out = [t for t in texts if is_held_out(t)]
    return train, held_out


def describe(texts: list[Text]) -> dict[str, object]:
    """What the manifest records, so a rebuild can tell whether it saw the same corpus."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.name.encode() + b"\0" + text.body.encode("utf-8", "replace") + b"\0")
    return {
        "python": sys.version.split()[0],
        "texts": len(texts),
        "chars": sum(len(t.body) for t in texts),
        "sha256": digest.hexdigest(),
    }
