"""The Textual playground (`specplay tui`); `specplay.ui.app.create_app` builds it.

Only this package imports Textual, and only from its modules, not here.
"""
