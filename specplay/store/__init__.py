"""Session files: one run, its lanes and every event, kept so runs can be compared and shown."""

from specplay.store.codec import SCHEMA_VERSION
from specplay.store.format import LaneRecord, Session, SessionError, TurnRecord, load_session
from specplay.store.location import find_session, list_session_files, session_prompt, sessions_dir
from specplay.store.writer import SessionWriter

__all__ = [
    "SCHEMA_VERSION",
    "LaneRecord",
    "Session",
    "SessionError",
    "SessionWriter",
    "TurnRecord",
    "find_session",
    "list_session_files",
    "load_session",
    "session_prompt",
    "sessions_dir",
]
