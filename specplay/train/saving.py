"""What training writes (rollouts, the teacher's answers, checkpoints, the trained model) on a
disk that fills: one SpecplayError line, and no half-written file left behind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from specplay.errors import SpecplayError

DISK_FIX = "free some disk space, or choose another --out"


@contextlib.contextmanager
def saving(what: str, where: Path, partial: Iterable[Path] = (), fix: str = DISK_FIX) -> Iterator[None]:
    """Turn a failed write into one line naming `what` and `where`, removing the `partial` files
    first (MLX reports a failed write, such as a full disk, as a RuntimeError)."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        for path in partial:
            with contextlib.suppress(OSError):
                if not path.is_symlink():
                    path.unlink(missing_ok=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc).splitlines() or [""])[0]
        raise SpecplayError(f"cannot write {what} in {where}: {reason or type(exc).__name__}; {fix}") from None
