"""Adding a face is a folder and one line: a throwaway face, defined in this test and plugged in
with one registry line (``faces=(*FACES, ProbeFace)``), accepts a durable message over its own
route, answers it in the worker, shows a confirmation its customer confirms, receives the
approval card as a staff surface, decides it, and gets the follow-up — no other file touched."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from sqlalchemy import func, select

from agent.face_port import FacePort
from agent.llm.testing import FunctionModel
from agent.notify import EscalationNotice, ShadowNotice
from agent.outcomes import TurnResult
from bot.app import FACES, create_app
from bot.faces import FaceKit
from bot.server import make_web_app
from bot.settings import load_settings
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset
from sandbox.models import StoreRefundRow
from sandbox.schema import upgrade
from storage.inbox import Inbound
from storage.models import InboundRow
from storage.records import Approval, Conversation
from tests.teams_kit import dataset_file
from tests.test_teams_face import Clock, plan
from tools.context import Principal

MAYA = Principal(kind="customer", id="C-7", customer_id="C-7")


class ProbeFace:
    """A face in ~40 lines: a route, the worker's turn, a notifier that is also a staff surface."""

    name = "probe"
    staff = True

    def __init__(self, kit: FaceKit) -> None:
        self.port: FacePort = kit.port
        self.notifier = self
        self.posted: list[str] = []
        self.cards: list[Approval] = []
        self.conversations: list[str] = []

    def join(self, relay: object) -> None:
        return None  # no customers of its own to relay a person's replies to

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/probe/messages", self.receive)]

    async def receive(self, request: web.Request) -> web.Response:
        body = await request.json()
        accepted = await self.port.accept(self.name, [f"probe:{body['id']}"], body)
        return web.json_response({"fresh": accepted.fresh})

    async def handle(self, item: Inbound) -> None:
        life = self.port.item(item)
        result = await self.port.take_message(
            principal=MAYA, channel=self.name, message=item.payload["text"], message_key=f"inbound:{item.id}",
            deliver_later=True,
        )  # fmt: skip
        assert result is not None
        await life.answered(dataclasses.asdict(result))
        await self.deliver(result)
        await life.delivered()

    async def deliver(self, result: TurnResult) -> None:
        self.conversations.append(result.conversation_id)

        async def send() -> dict[str, Any]:
            self.posted.append(result.reply)
            return {"n": len(self.posted)}

        await self.port.once(f"probe:{result.delivery_key}", send)
        await self.port.delivered(result)

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    # -- the notifier -------------------------------------------------------------------
    async def approval_requested(self, approval: Approval) -> None:
        self.cards.append(approval)

    async def approval_decided(self, approval: Approval) -> None: ...
    async def escalated(self, notice: EscalationNotice) -> None: ...
    async def shadow_recorded(self, notice: ShadowNotice) -> None: ...

    async def follow_up(self, conversation: Conversation, result: TurnResult) -> None:
        await self.deliver(result)


async def test_a_throwaway_face_plugged_in_with_one_line_gets_a_message_a_confirmation_and_an_approval(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'probe.db'}"
    await upgrade(url)
    settings = load_settings({"SIGNOFF_DATABASE_URL": url, "SIGNOFF_ENV": "development"})
    probes: list[ProbeFace] = []
    clock = Clock()

    def probe(kit: FaceKit) -> ProbeFace:
        probes.append(ProbeFace(kit))
        return probes[-1]

    app = await create_app(
        settings, model=FunctionModel(plan), seed=False, faces=(*FACES, probe), clock=clock
    )  # the one line
    await load_dataset(app.db, load_dataset_file(dataset_file(tmp_path)), rebase_to=datetime.now(UTC))
    runner = web.AppRunner(make_web_app(app), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        (face,) = probes
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as http:
            for fresh in (True, False):  # a redelivery is one message
                async with http.post(f"{base}/probe/messages", json={"id": "m-1", "text": "refund O-1042"}) as r:
                    assert r.status == 200 and (await r.json())["fresh"] is fresh
        assert await _count(app, select(func.count()).where(InboundRow.face == "probe")) == 1  # durable first
        await app.worker().run_once()
        (said,) = face.posted
        assert said.startswith("I have asked for that refund") and "confirm" in said
        (conf,) = await face.port.pending_confirmations(face.conversations[0], MAYA.key)
        settled = await face.port.confirm(conf.id, actor=MAYA, accept=True, via="button")
        assert settled.approval is not None
        (card,) = face.cards  # the probe is a staff surface: the approval card came to it
        supervisor = await face.port.identify("teams", "53535353-0000-4000-8000-000000000003")
        assert supervisor is not None and supervisor.staff is not None
        refunds_before = await _count(app, select(func.count()).select_from(StoreRefundRow))
        await face.port.decide(
            card.id,
            expected_version=card.version,
            decision="approve",
            actor=Principal(kind="supervisor", id=supervisor.staff.id),
            via={"surface": "probe"},
        )
        assert await _count(app, select(func.count()).select_from(StoreRefundRow)) == refunds_before + 1
        clock.skipped += timedelta(minutes=5)  # the resume job is due
        await app.worker().run_once()
        assert face.posted[-1] == "The refund went through."  # the follow-up came to its face
    finally:
        await runner.cleanup()
        await app.close()


async def _count(app: Any, query: Any) -> int:
    async with app.db.reader() as s:
        return int(await s.scalar(query) or 0)


def test_every_face_folder_is_one_line_of_the_registry() -> None:
    """Each folder under bot/ with a ``wiring.py`` is in ``FACES`` by exactly one line (its
    ``face``), the HTTP API's included; nothing else is."""
    root = Path(__file__).resolve().parents[1] / "bot"
    folders = sorted(p.parent.name for p in root.glob("*/wiring.py"))
    lines = [f"{f.__module__}.{f.__name__}" for f in FACES]  # type: ignore[attr-defined]
    assert sorted(lines) == [f"bot.{name}.wiring.face" for name in folders]
    assert "api" in folders and "shopify" in folders
