"""A corpus to build synthetic examples from: the contexts of a triples file, or a folder of text documents."""

from __future__ import annotations

import re
from pathlib import Path

from juiz.judging.synthetic import Passage
from juiz.runtime.errors import InputError

DOCUMENT_SUFFIXES = (".txt", ".md")


def read_passages(path: Path) -> list[Passage]:
    """Passages by document: each context segment under its `source` (or its item's id when it has none), or each
    blank-line-separated paragraph of each .txt/.md file in a folder, under the file's name."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _folder_passages(path)
    from juiz.formats.readers import read_triples

    passages = []
    for triple in read_triples(path):
        context = triple.context
        if isinstance(context, str):
            passages.append(Passage(context, triple.id))
        elif context:
            passages += [Passage(segment.text, segment.source or triple.id) for segment in context]
    if not passages:
        raise InputError(f"{path}: no item has a context to build examples from")
    return passages


def _folder_passages(folder: Path) -> list[Passage]:
    files = sorted(p for p in folder.rglob("*") if p.suffix in DOCUMENT_SUFFIXES and p.is_file())
    passages = [
        Passage(paragraph.strip(), str(file.relative_to(folder)))
        for file in files
        for paragraph in re.split(r"\n\s*\n", file.read_text(encoding="utf-8", errors="replace"))
        if paragraph.strip()
    ]
    if not passages:
        raise InputError(f"{folder}: no .txt or .md document with text")
    return passages
