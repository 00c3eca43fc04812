"""The model seam: one request shape in, one response shape out.

History is always Anthropic content blocks (plain JSON dicts exactly as the
Messages API takes and returns them); adapters for other providers translate
at their edge and never change what is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypedDict, TypeGuard

from tools.registry import ToolSpec  # what the model sees of a tool (defined with the registry)

StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn", "stop_sequence"]


class TextBlock(TypedDict):
    """``{"type": "text", "text": ...}``: what the model or a person wrote, or a runtime event."""

    type: Literal["text"]
    text: str
    cache_control: NotRequired[dict[str, str]]


class ToolUseBlock(TypedDict):
    """``{"type": "tool_use", "id", "name", "input"}``: a call the model proposes."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: Any
    cache_control: NotRequired[dict[str, str]]


class ToolResultBlock(TypedDict):
    """``{"type": "tool_result", "tool_use_id", "content", "is_error"?}``: our answer to a call."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: Any
    is_error: NotRequired[bool]
    cache_control: NotRequired[dict[str, str]]


#: One Anthropic content block, exactly as the Messages API takes and returns it; mypy checks
#: each access against the block's type (narrow on ``block["type"]`` first).
Block = TextBlock | ToolUseBlock | ToolResultBlock


def is_text(block: Block) -> TypeGuard[TextBlock]:
    return block.get("type") == "text"


def is_tool_use(block: Block) -> TypeGuard[ToolUseBlock]:
    return block.get("type") == "tool_use"


def is_tool_result(block: Block) -> TypeGuard[ToolResultBlock]:
    return block.get("type") == "tool_result"


@dataclass(frozen=True, kw_only=True)
class Message:
    role: Literal["user", "assistant"]
    content: list[Block]

    def as_api(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 1024
    #: Free-form labels for logs and tracing (conversation id, run id).
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    stop_reason: StopReason
    content: list[Block]
    usage: Usage
    model: str
    request_id: str | None = None

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if is_tool_use(b)]

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if is_text(b))


class ModelClient(Protocol):
    """Anything that can answer a :class:`ModelRequest`.

    Implementations raise :class:`agent.errors.ModelUnavailable` when the
    provider cannot answer after retries (or the circuit is open); every other
    vendor exception stays inside the adapter.
    """

    @property
    def model_name(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...
