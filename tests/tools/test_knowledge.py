"""The knowledge index: documents cut into passages, the best found by a caller's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import UserError
from agent.tools.knowledge import Knowledge, passages


def test_markdown_sections_and_paragraphs_are_passages_that_keep_their_heading():
    text = "# Hours\n\nOpen 12:00 to 22:00.\n\nClosed on Mondays.\n\n## Parking\nFree after 18:00."
    assert passages(text) == [
        "Hours: Open 12:00 to 22:00.",
        "Hours: Closed on Mondays.",
        "Parking: Free after 18:00.",
    ]


def test_the_callers_words_find_the_passage_that_answers_them(tmp_path: Path):
    (tmp_path / "hours.md").write_text("# Opening hours\n\nWe open at noon and close at ten.")
    (tmp_path / "allergens.md").write_text("# Allergens\n\nThe pesto contains pine nuts.")
    (tmp_path / "notes.bin").write_text("ignored")
    knowledge = Knowledge(tmp_path)
    assert knowledge.size == 2
    assert knowledge.search("Does the pesto have nuts in it?", 1) == [
        "Allergens: The pesto contains pine nuts."
    ]
    assert knowledge.search("what are your opening hours", 2)[0].startswith("Opening hours")
    assert knowledge.search("Okay, thanks.", 2) == []  # no word that asks for anything


def test_a_folder_without_documents_is_one_clear_error(tmp_path: Path):
    with pytest.raises(UserError, match="no .md or .txt files"):
        Knowledge(tmp_path / "missing")
