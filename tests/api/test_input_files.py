"""input_file parts become text (PDFs through pypdf, text as it is) within a size bound;
input_image parts are refused by a text-only model."""

from __future__ import annotations

import base64
import io
import re

import pytest
from pypdf import PdfReader
from pypdf.errors import PdfReadError

from api.errors import APIError
from api.lowering.input_files import file_text, inline_file, refuse_images, with_file_text
from api.schema.conversation import ItemsCreate
from api.schema.input_items import InputFilePart
from api.schema.model_base import FieldRejected
from api.schema.request import ResponsesRequest
from events import ModelCard
from tests.pdf_file import pdf_with_text

LIMIT = 64 * 1024


def part(**fields: object) -> InputFilePart:
    return InputFilePart.model_validate({"type": "input_file", **fields})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_pdf_becomes_its_text() -> None:
    pdf = pdf_with_text("The launch code is 4417.")
    for given in (part(file_data=b64(pdf), filename="notes.pdf"),
                  part(file_data=f"data:application/pdf;base64,{b64(pdf)}"),
                  part(file_url=f"data:application/pdf;base64,{b64(pdf)}")):
        assert file_text(inline_file(given, LIMIT)) == "The launch code is 4417."


def test_text_and_markdown_as_they_are() -> None:
    markdown = "# Title\n\n* café, naïve\n"
    assert file_text(inline_file(part(file_data=b64(markdown.encode()), filename="a.md"), LIMIT)) == markdown
    plain = part(file_data=f"data:text/plain;base64,{b64(b'plain')}")
    assert file_text(inline_file(plain, LIMIT)) == "plain"


def broken_tails(pdf: bytes) -> dict[str, bytes]:
    """The same PDF with the tails readers meet in small hand-written files: no
    `startxref`, no table at all, an offset pointing nowhere, cut off after its objects."""
    table = pdf.index(b"xref\n")
    return {
        "no startxref": re.sub(rb"startxref\n\d+\n", b"", pdf),
        "no table": pdf[:table] + b"trailer\n<< /Size 6 /Root 1 0 R >>\n%%EOF\n",
        "wrong offset": pdf.replace(b"startxref\n%d" % table, b"startxref\n9"),
        "cut after its objects": pdf[:table],
        "CRLF lines, cut": pdf.replace(b"\n", b"\r\n")[:pdf.replace(b"\n", b"\r\n").index(b"xref")],
    }


def test_a_pdf_with_a_broken_table_is_recovered() -> None:
    pdf = pdf_with_text("The secret word is marmalade.")
    for name, broken in broken_tails(pdf).items():
        with pytest.raises(PdfReadError):  # each is one a strict reader refuses
            PdfReader(io.BytesIO(broken), strict=True)
        read = file_text(inline_file(part(file_data=b64(broken), filename="s.pdf"), LIMIT))
        assert read == "The secret word is marmalade.", name


async def test_a_pdf_beyond_recovery_is_a_400_naming_the_part() -> None:
    hopeless = b64(b"%PDF-1.4\nno objects here\n%%EOF\n")
    with pytest.raises(APIError) as refused:
        await with_file_text(request_with(
            {"type": "input_file", "filename": "a.pdf", "file_data": hopeless}), LIMIT)
    assert refused.value.status == 400
    assert refused.value.param == "input[1].content[1]"
    assert "input[1].content[1] cannot be read: it is not a readable PDF" in refused.value.message


@pytest.mark.parametrize(("given", "why"), [
    (part(file_id="file-123"), "no file store"),
    (part(file_url="https://example.com/a.pdf"), "fetches no URLs"),
    (part(filename="a.txt"), "no file_data"),
    (part(file_data="not base64!", filename="a.txt"), "not valid base64"),
    (part(file_data=b64(b"x" * (LIMIT + 1)), filename="a.txt"), "larger than"),
    (part(file_data=b64(b"\xff\xfe\x00binary"), filename="a.txt"), "not UTF-8"),
    (part(file_data=b64(b"PK\x03\x04"), filename="a.docx"), "not one spate reads"),
    (part(file_data=b64(b"%PDF-1.4 broken"), filename="a.pdf"), "PDF"),
])
def test_what_cannot_be_read_says_why(given: InputFilePart, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        file_text(inline_file(given, LIMIT))


def request_with(*parts: dict[str, object]) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": [{"type": "input_text", "text": "Read:"}, *parts]}]})


async def test_the_part_is_replaced_by_the_framed_text() -> None:
    pdf = b64(pdf_with_text("Quarterly numbers"))
    request = await with_file_text(request_with(
        {"type": "input_file", "filename": "q3.pdf", "file_data": pdf}), LIMIT)
    message = request.input[1]
    assert message.text() == 'Read:<file name="q3.pdf">\nQuarterly numbers\n</file>\n'  # type: ignore[union-attr]


async def test_an_unreadable_file_is_a_400_naming_the_part() -> None:
    with pytest.raises(APIError) as refused:
        await with_file_text(request_with({"type": "input_file", "file_id": "file-1"}), LIMIT)
    assert refused.value.status == 400
    assert refused.value.param == "input[1].content[1]"


def test_a_text_only_model_refuses_images_by_name() -> None:
    request = request_with({"type": "input_image", "image_url": "data:image/png;base64,AAAA",
                            "detail": "auto"})
    text_only = ModelCard(name="m", context_length=8)
    with pytest.raises(APIError) as refused:
        refuse_images(request, text_only)
    assert refused.value.param == "input[1].content[1]"
    assert "takes no images" in refused.value.message
    refuse_images(request, ModelCard(name="m", context_length=8, input_modalities=("text", "image")))


@pytest.mark.parametrize(("item", "param"), [
    ({"role": "user", "content": [{"type": "input_file", "file_data": "eA==", "filename": "a.txt"}]},
     "items[0].content[0]"),
    ({"role": "user", "content": [{"type": "input_text", "text": "see"},
                                  {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
     "items[0].content[1]"),
    ({"type": "reasoning", "summary": [], "encrypted_content": "spate1.x"}, "items[0].encrypted_content"),
])
def test_a_conversation_item_cannot_hold_what_only_a_response_input_reads(
    item: dict[str, object], param: str,
) -> None:
    with pytest.raises(FieldRejected) as refused:
        ItemsCreate.model_validate({"items": [item]})
    assert refused.value.param == param
