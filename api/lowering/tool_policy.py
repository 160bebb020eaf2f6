"""What happens to a declared tool that runs on the server's side at OpenAI (web search,
file search, code interpreter, mcp, ...): spate cannot run it, so it is never offered to
the model. By default (`SPATE_SERVER_TOOLS=omit`) the request goes on without it and the
Response echoes it as declared, so a client that always declares one (Codex declares
web_search) still works; `reject` makes it a 400 naming the tool, for operators whose
clients must learn that the tool did nothing."""

from __future__ import annotations

from api.errors import APIError
from api.schema.request import ResponsesRequest
from api.schema.tools import offered
from api.settings import ServerToolPolicy


def check_server_tools(request: ResponsesRequest, policy: ServerToolPolicy) -> None:
    if policy == "omit":
        return
    for index, tool in enumerate(request.tools or []):
        if not offered(tool):
            raise APIError(
                400, f"The tool type '{tool.type}' runs on the server's side, which this server "
                "does not offer (SPATE_SERVER_TOOLS=reject).",
                param=f"tools[{index}].type", code="invalid_value",
            )
