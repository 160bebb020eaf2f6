"""A PDF whose cross-reference table is missing or wrong, rebuilt the way PDF readers
recover one: by scanning the file for its objects.

Many small PDFs written by hand or by simple tools have a broken tail: no `startxref`, an
offset that points nowhere, a truncated table, no trailer. Their objects are intact, so
viewers show them anyway; pypdf gives up on some of these. `rebuilt` writes the same
objects followed by a fresh table and trailer, which pypdf then reads as any PDF.
"""

from __future__ import annotations

import re

# `12 0 obj` at the start of a line (or of the file after the header).
OBJECT = re.compile(rb"(?:^|(?<=\r))[ \t]*(\d{1,10})[ \t]+(\d{1,5})[ \t]+obj\b", re.M)
CATALOG = re.compile(rb"/Type\s*/Catalog\b")
END_OBJECT = b"endobj"


def rebuilt(data: bytes) -> bytes | None:
    """The PDF's objects with a cross-reference table made by scanning them, or None when
    no object or no document catalog (the root every reader starts from) can be found.
    A later definition of an object number wins, as an incremental update's does."""
    offsets: dict[int, tuple[int, int]] = {}
    root: tuple[int, int] | None = None
    for match in OBJECT.finditer(data):
        number, generation = int(match.group(1)), int(match.group(2))
        end = data.find(END_OBJECT, match.end())
        if end < 0:
            continue  # truncated inside this object: the objects before it still count
        offsets[number] = (match.start(1), generation)
        if CATALOG.search(data, match.end(), end):
            root = (number, generation)
    if not offsets or root is None:
        return None
    last = max(data.rfind(END_OBJECT) + len(END_OBJECT), 0)
    body = bytearray(data[:last])
    body += b"\n"
    size = max(offsets) + 1
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        if number in offsets:
            offset, generation = offsets[number]
            body += b"%010d %05d n \n" % (offset, generation)
        else:
            body += b"0000000000 65535 f \n"
    body += b"trailer\n<< /Size %d /Root %d %d R >>\nstartxref\n%d\n%%%%EOF\n" % (
        size, root[0], root[1], xref)
    return bytes(body)
