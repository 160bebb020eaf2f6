"""Contract: cursor paging, the same for a response's input items and a conversation's
items (`after`, `before`, `limit`, `order` -> data, first_id, last_id, has_more)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from store.base import Store
from store.records import ItemPage
from tests.store.contract_base import ContractBase
from tests.store.projection import input_items_of, new_response_id, project, response_log

Pager = Callable[..., Awaitable[ItemPage]]
ITEMS = 7


def ids(page: ItemPage) -> list[int]:
    return [int(item["id"].removeprefix("msg_in")) for item in page.data]


class PagingContract(ContractBase):
    @pytest.fixture(params=["input_items", "conversation_items"])
    async def pager(self, request: pytest.FixtureRequest, store: Store) -> Pager:
        """A list of items msg_in0 .. msg_in6, in that order, and a page reader over it."""
        items = input_items_of(ITEMS)
        if request.param == "input_items":
            owner_id = new_response_id()
            await project(store, response_log(owner_id), input_items=items)
            read = store.input_items
        else:
            owner_id = (await store.create_conversation(items=items))["id"]
            read = store.conversation_items

        async def page(**options: Any) -> ItemPage:
            result = await read(owner_id, **options)
            assert result is not None
            return result

        return page

    async def test_the_default_page_is_newest_first(self, pager: Pager) -> None:
        page = await pager()
        assert ids(page) == [6, 5, 4, 3, 2, 1, 0]
        assert (page.first_id, page.last_id, page.has_more) == ("msg_in6", "msg_in0", False)
        assert page.list_object() == {
            "object": "list", "data": page.data, "first_id": "msg_in6",
            "last_id": "msg_in0", "has_more": False,
        }

    @pytest.mark.parametrize(
        ("order", "pages"),
        [("asc", [[0, 1, 2], [3, 4, 5], [6]]), ("desc", [[6, 5, 4], [3, 2, 1], [0]])],
    )
    async def test_walking_forward_with_after(
        self, pager: Pager, order: str, pages: list[list[int]]
    ) -> None:
        after = None
        for number, expected in enumerate(pages):
            page = await pager(after=after, limit=3, order=order)
            assert ids(page) == expected
            assert page.has_more is (number < len(pages) - 1)
            after = page.last_id

    @pytest.mark.parametrize(
        ("order", "pages"),
        [("asc", [[4, 5, 6], [1, 2, 3], [0]]), ("desc", [[2, 1, 0], [5, 4, 3], [6]])],
    )
    async def test_walking_back_with_before(
        self, pager: Pager, order: str, pages: list[list[int]]
    ) -> None:
        # Start past the end by reading the last page, then go back page by page.
        first = await pager(order=order, limit=100)
        before = None
        for number, expected in enumerate(pages):
            if before is None:
                page = await pager(after=first.data[-4]["id"], order=order, limit=3)
            else:
                page = await pager(before=before, limit=3, order=order)
                assert page.has_more is (number < len(pages) - 1)
            assert ids(page) == expected
            before = page.first_id

    async def test_a_window_between_two_cursors(self, pager: Pager) -> None:
        page = await pager(after="msg_in1", before="msg_in5", order="asc")
        assert (ids(page), page.has_more) == ([2, 3, 4], False)
        page = await pager(after="msg_in1", before="msg_in5", order="asc", limit=2)
        assert (ids(page), page.has_more) == ([3, 4], True)
        page = await pager(after="msg_in5", before="msg_in1", order="desc")
        assert (ids(page), page.has_more) == ([4, 3, 2], False)

    async def test_past_the_end_is_an_empty_page(self, pager: Pager) -> None:
        page = await pager(after="msg_in6", order="asc")
        assert (page.data, page.first_id, page.last_id, page.has_more) == ([], None, None, False)
        page = await pager(before="msg_in0", order="asc")
        assert (page.data, page.has_more) == ([], False)
        assert (await pager(after="msg_in0", order="desc")).data == []

    async def test_a_limit_of_one(self, pager: Pager) -> None:
        page = await pager(limit=1)
        assert (ids(page), page.has_more) == ([6], True)

    async def test_an_unknown_cursor_is_a_key_error(self, pager: Pager) -> None:
        with pytest.raises(KeyError):
            await pager(after="msg_nope")
        with pytest.raises(KeyError):
            await pager(before="msg_nope")

    @pytest.mark.parametrize("options", [{"limit": 0}, {"limit": 101}, {"order": "up"}])
    async def test_bad_page_options_are_value_errors(
        self, pager: Pager, options: dict[str, Any]
    ) -> None:
        with pytest.raises(ValueError):
            await pager(**options)

    async def test_a_response_without_input_items_has_an_empty_list(self, store: Store) -> None:
        response_id = new_response_id()
        await project(store, response_log(response_id))
        page = await store.input_items(response_id)
        assert page is not None and page.list_object()["data"] == [] and not page.has_more
