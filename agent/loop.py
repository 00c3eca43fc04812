"""The agent loop (C1). It fits on one screen; everything else is a step type,
a wrapper around the registry, or a repository method.

check budgets → call the model (no transaction open) → classify the response
into a closed set of frozen steps → dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from agent import steps
from agent.errors import BudgetExceeded, ModelUnavailable, StepLimitExceeded
from agent.llm.base import ModelResponse, ToolUseBlock
from agent.outcomes import TurnResult
from agent.turn import Turn


@dataclass(frozen=True, kw_only=True)
class FinalAnswer:
    response: ModelResponse


@dataclass(frozen=True, kw_only=True)
class RunTools:
    response: ModelResponse
    tool_uses: list[ToolUseBlock]


@dataclass(frozen=True, kw_only=True)
class Continue:
    """``pause_turn``: the provider paused a long turn; send it back as it is."""

    response: ModelResponse


@dataclass(frozen=True, kw_only=True)
class Refused:
    response: ModelResponse


Step = FinalAnswer | RunTools | Continue | Refused


def classify(response: ModelResponse) -> Step:
    """Map a model response to the one step it calls for."""
    if response.stop_reason == "refusal":
        return Refused(response=response)
    if response.tool_uses:
        # tool_use, or max_tokens that cut a tool call short: every tool_use gets a result.
        return RunTools(response=response, tool_uses=response.tool_uses)
    if response.stop_reason == "pause_turn":
        return Continue(response=response)
    return FinalAnswer(response=response)


async def run_loop(turn: Turn) -> TurnResult:
    """Drive one turn until the model answers, finishes, or a cap is hit."""
    await steps.repair(turn)
    while True:
        try:
            turn.check_budgets()
            response = await turn.model.complete(turn.request())
        except (StepLimitExceeded, BudgetExceeded) as exc:
            return await steps.give_up(turn, reason=type(exc).__name__, detail=str(exc))
        except ModelUnavailable as exc:
            return await steps.give_up(turn, reason="model_unavailable", detail=exc.reason)
        step = classify(response)
        match step:
            case FinalAnswer(response=r):
                return await steps.answer(turn, r)
            case RunTools(response=r, tool_uses=uses):
                if isinstance(await steps.run_tools(turn, r, uses), steps.Finished):
                    return steps.finished(turn)
            case Continue(response=r):
                await steps.partial(turn, r)
            case Refused(response=r):
                return await steps.refused(turn, r)
            case _:
                assert_never(step)
