"""The agent's documents: a folder of markdown or text, indexed once, searched per turn.

Each file is cut into passages (a markdown section, or a paragraph of a text file) and
put in an in-memory SQLite FTS5 table when the process starts; a turn's words find the
best passages by BM25. The index is tiny and local, so a search takes well under a
millisecond and needs no model: the prompt's extra prefill is what retrieval costs.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from agent.errors import UserError

SUFFIXES = {".md", ".txt"}
# Words that say nothing about what a caller wants to know: matching them ranks noise.
STOPWORDS = frozenset(
    "a an and are as at be but by can could do does for from have hi hello how i if in is it "
    "its me my of on or our please so that the their there this to uh um us was we what "
    "when where which who will with would you your yes no okay ok thanks thank".split()
)


def passages(text: str) -> list[str]:
    """``text`` cut at markdown headings and blank lines; a heading stays with its text."""
    parts: list[str] = []
    heading = ""
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if block.startswith("#"):
            first, _, rest = block.partition("\n")
            heading = first.lstrip("#").strip()
            block = rest.strip()
            if not block:
                continue
        parts.append(f"{heading}: {block}" if heading else block)
    return parts


class Knowledge:
    """Passages of a folder's documents, searchable by a caller's words."""

    def __init__(self, folder: Path) -> None:
        files = sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        if not folder.is_dir() or not files:
            raise UserError(
                f"tools.knowledge_dir {folder}: no .md or .txt files there; point it at a "
                "folder of documents or set it to null"
            )
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        # porter: "allergens" finds "allergen", "parked" finds "parking"
        self._db.execute("CREATE VIRTUAL TABLE passages USING fts5(source, text, tokenize=porter)")
        rows = [(p.name, part) for p in files for part in passages(p.read_text())]
        self._db.executemany("INSERT INTO passages VALUES (?, ?)", rows)
        self.texts = [text for _, text in rows]
        self.size = len(rows)

    def search(self, words: str, limit: int) -> list[str]:
        """The ``limit`` passages that best match the meaningful ``words`` (none: none)."""
        terms = {w for w in re.findall(r"[a-z0-9]+", words.lower()) if w not in STOPWORDS}
        if not terms:
            return []
        query = " OR ".join(f'"{t}"' for t in sorted(terms))
        found = self._db.execute(
            "SELECT text FROM passages WHERE passages MATCH ? ORDER BY bm25(passages) LIMIT ?",
            (query, limit),
        )
        return [text for (text,) in found]
