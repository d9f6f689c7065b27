"""Long-term memory: facts about the user kept across sessions, per scope, in SQLite or PostgreSQL (docs/memory.md)."""
