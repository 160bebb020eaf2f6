"""Files and images in a message's content: `input_file` parts become text for the model,
`input_image` parts are refused by a model that takes no images.

A file comes inline (`file_data`, as base64 or a data URL, or a data URL in `file_url`):
spate reaches no file store and fetches no URL. PDFs are read with pypdf (one whose
cross-reference table is missing or wrong is rebuilt by scanning its objects, as PDF
readers recover such files: api/lowering/pdf_repair), plain text and markdown are taken as they are; the text replaces the part, framed with the file's name,
before the request is lowered. What cannot be read is a 400 naming the part.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from pypdf import PdfReader
from pypdf.errors import PdfReadError

from api.errors import APIError
from api.lowering.pdf_repair import rebuilt
from api.schema.input_items import InputFilePart, InputImagePart, MessageItem, TextPart
from api.schema.request import ResponsesRequest
from events import ModelCard

# What pypdf raises on a file it cannot make sense of.
PDF_ERRORS = (PdfReadError, ValueError, KeyError, TypeError, OSError)
# A PDF past this many pages is refused before its text is read (reading is CPU work).
MAX_PDF_PAGES = 500
TEXT_TYPES = ("text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json")
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".csv", ".json", ".log")


Part = TypeVar("Part", InputFilePart, InputImagePart)


class Unreadable(ValueError):
    """A file part whose text cannot be had; the message says why."""


@dataclass(frozen=True, slots=True)
class InlineFile:
    data: bytes
    media_type: str | None
    filename: str | None


def refuse_images(request: ResponsesRequest, card: ModelCard) -> None:
    """A 400 naming the first `input_image` part, when the model takes no images."""
    if "image" in card.input_modalities:
        return
    for index, content_index, _ in _parts(request, InputImagePart):
        raise APIError(
            400, f"The model '{card.name}' takes no images (its input modalities: "
            f"{', '.join(card.input_modalities)}), so input[{index}].content[{content_index}] "
            "cannot be sent to it.", param=f"input[{index}].content[{content_index}]",
            code="invalid_value")


async def with_file_text(request: ResponsesRequest, max_file_bytes: int) -> ResponsesRequest:
    """The request with each `input_file` part replaced by an `input_text` part holding the
    file's text; PDFs are read off the event loop."""
    if isinstance(request.input, str):
        return request
    items = list(request.input)
    for index, content_index, part in list(_parts(request, InputFilePart)):
        param = f"input[{index}].content[{content_index}]"
        try:
            text = await asyncio.to_thread(file_text, inline_file(part, max_file_bytes))
        except Unreadable as error:
            raise APIError(400, f"The file in {param} cannot be read: {error}.", param=param,
                           code="invalid_file") from None
        message = items[index]
        if isinstance(message, MessageItem) and isinstance(message.content, list):
            content = list(message.content)
            content[content_index] = TextPart(type="input_text", text=framed(part.filename, text))
            items[index] = message.model_copy(update={"content": content})
    return request.model_copy(update={"input": items})


def framed(filename: str | None, text: str) -> str:
    """The file's text as the model reads it: named, so a prompt can refer to it."""
    return f'<file name="{filename or "file"}">\n{text}\n</file>\n'


def inline_file(part: InputFilePart, max_bytes: int) -> InlineFile:
    """The bytes of an inline file part, within the size bound."""
    if part.file_id is not None:
        raise Unreadable("this server has no file store, so a file_id names nothing here; "
                         "send the file inline in file_data")
    source = part.file_data
    if source is None and part.file_url is not None:
        if not part.file_url.startswith("data:"):
            raise Unreadable("this server fetches no URLs; send the file inline in file_data "
                             "or as a data URL")
        source = part.file_url
    if source is None:
        raise Unreadable("it has no file_data")
    media_type = None
    if source.startswith("data:"):
        header, comma, source = source.partition(",")
        if not comma or not header.endswith(";base64"):
            raise Unreadable("a data URL must be base64 (data:<type>;base64,<data>)")
        media_type = header[len("data:"):-len(";base64")].lower() or None
    # Base64 is 4 characters for 3 bytes: refuse before decoding what is too large.
    if len(source) > (max_bytes + 2) // 3 * 4 + 4:
        raise Unreadable(f"it is larger than {max_bytes} bytes (SPATE_MAX_FILE_BYTES)")
    try:
        data = base64.b64decode(source, validate=True)
    except (binascii.Error, ValueError):
        raise Unreadable("file_data is not valid base64") from None
    if len(data) > max_bytes:
        raise Unreadable(f"it is larger than {max_bytes} bytes (SPATE_MAX_FILE_BYTES)")
    return InlineFile(data, media_type, part.filename)


def file_text(file: InlineFile) -> str:
    """A PDF's text, or a text file as it is."""
    kind = _kind(file)
    if kind == "pdf":
        return _pdf_text(file.data)
    try:
        return file.data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("it is not UTF-8 text; spate reads PDFs, plain text and markdown") from None


def _kind(file: InlineFile) -> Literal["pdf", "text"]:
    name = (file.filename or "").lower()
    if file.media_type == "application/pdf" or name.endswith(".pdf") or file.data[:5] == b"%PDF-":
        return "pdf"
    if (file.media_type in TEXT_TYPES or (file.media_type or "").startswith("text/")
            or name.endswith(TEXT_SUFFIXES) or (file.media_type is None and not name)):
        return "text"
    raise Unreadable(f"its type ({file.media_type or name}) is not one spate reads; it reads "
                     "PDFs, plain text and markdown")


def _pdf_text(data: bytes) -> str:
    try:
        reader, pages = _opened(data)
    except PDF_ERRORS as error:
        repaired = rebuilt(data)
        if repaired is None:
            raise Unreadable(f"it is not a readable PDF ({error})") from None
        try:
            reader, pages = _opened(repaired)
        except PDF_ERRORS:
            raise Unreadable(f"it is not a readable PDF ({error})") from None
    encrypted = reader.is_encrypted
    if encrypted:
        raise Unreadable("the PDF is encrypted")
    if pages > MAX_PDF_PAGES:
        raise Unreadable(f"the PDF has {pages} pages, more than {MAX_PDF_PAGES}")
    try:
        texts = [page.extract_text().strip() for page in reader.pages]
    except PDF_ERRORS as error:
        raise Unreadable(f"its text cannot be read ({error})") from None
    text = "\n\n".join(page for page in texts if page)
    if not text:
        raise Unreadable("the PDF holds no text (a scan needs a model that takes images)")
    return text


def _opened(data: bytes) -> tuple[PdfReader, int]:
    """A reader on the PDF and its page count (0 when encrypted: its pages are sealed).
    Not strict: like other readers, it takes what the standard's letter would refuse
    but the file makes plain; a table it cannot find at all is rebuilt (`rebuilt`)."""
    reader = PdfReader(io.BytesIO(data), strict=False)
    return reader, 0 if reader.is_encrypted else len(reader.pages)


def _parts(request: ResponsesRequest, kind: type[Part]) -> Iterator[tuple[int, int, Part]]:
    """(item index, content index, part) of each content part of type `kind`."""
    if isinstance(request.input, str):
        return
    for index, item in enumerate(request.input):
        if isinstance(item, MessageItem) and isinstance(item.content, list):
            for content_index, part in enumerate(item.content):
                if isinstance(part, kind):
                    yield index, content_index, part
