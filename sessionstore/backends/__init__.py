"""Database backends of the store: SQLite (embedded default) and PostgreSQL (shared)."""

from __future__ import annotations

from .postgres import PostgresSessionStore
from .sqlite import SQLiteSessionStore

__all__ = ["PostgresSessionStore", "SQLiteSessionStore"]
