"""Identity out of the shop: signoff's own directory (storage/identities.py ``People``), seeded from
``SIGNOFF_PEOPLE_FILE`` (agent/people.py) or the sandbox dataset, answers every face's
``identify(provider, external_id)``; links made with the emailed code live beside the seed and
survive a reseed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.people import load_people_file, parse_people
from bot.app import create_app
from bot.settings import load_settings
from sandbox.dataset import DEMO_DATASET_PATH, load_dataset_file
from sandbox.io import load_dataset
from storage.db import Database
from storage.identities import CustomerLink, IdentityLinks, People, PeopleSeed, Staff
from tests.conftest import make_sqlite

AAD = "5F0C2B1E-1111-4222-8333-444455556666"
GOOD = f"""
staff:
  - {{id: S-1, name: Priya Raman, role: rep, slack_user_id: U01PRIYA, email: priya@shop.example}}
  - {{id: S-3, name: Grace Liu, role: supervisor, teams_user_id: {AAD}}}
customers:
  - {{customer_id: "gid://shopify/Customer/7", slack_user_id: U07MAYA}}
  - {{customer_id: "8", teams_user_id: 11111111-2222-4333-8444-555555555555}}
"""


def test_a_good_people_file_parses_yaml_and_json() -> None:
    """Staff as in the dataset; customers by the shop's id (a Shopify GID or a number); Teams ids lower-cased."""
    seed = parse_people(GOOD)
    assert [m.id for m in seed.staff] == ["S-1", "S-3"]
    assert seed.staff[1].teams_user_id == AAD.lower() and seed.staff[0].email == "priya@shop.example"
    assert seed.customers[0] == CustomerLink(customer_id="gid://shopify/Customer/7", slack_user_id="U07MAYA")
    as_json = parse_people('{"staff": [{"id": "S-1", "name": "P", "role": "rep"}]}')
    assert as_json == PeopleSeed(staff=(Staff(id="S-1", name="P", role="rep"),))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("staff: []\nvendors: []\n", "unknown keys: vendors"),
        ("staff:\n  - {id: S-1, name: P, role: rep, pager: 555}\n", "unknown keys: staff[0].pager"),
        ("customers:\n  - {customer_id: C-1, slack: U1}\n", "unknown keys: customers[0].slack"),
        ("staff:\n  - {id: S-1, name: P, role: admin}\n", "staff[0].role"),
        ("staff:\n  - {id: S-1, name: P, role: rep, slack_user_id: nope}\n", "staff[0].slack_user_id"),
        ("customers:\n  - {customer_id: 7}\n", "customers[0].customer_id"),
        ("- just a list\n", "must be a mapping"),
        ("staff: [\n", "not YAML or JSON"),
        (
            "staff:\n  - {id: S-1, name: P, role: rep, slack_user_id: U01X}\n"
            "customers:\n  - {customer_id: C-1, slack_user_id: U01X}\n",
            "customers[0]: Slack user 'U01X' is also staff[0]'s",
        ),
        ("staff:\n  - {id: S-1, name: P, role: rep}\n  - {id: S-1, name: Q, role: rep}\n", "id 'S-1' appears more"),
    ],
)
def test_a_bad_people_file_says_what_is_wrong(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "people.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_people_file(path)
    message = str(info.value)
    assert message.startswith(f"SIGNOFF_PEOPLE_FILE: {path}: ") and reason in message and "\n" not in message


async def test_identify_each_provider_from_a_seed(any_db: Database) -> None:
    """Slack and Teams users resolve to staff (with role and name) or customers; Teams ids in any
    case; an unknown provider or id is nobody; staff carry their face ids for mentions."""
    people = People(any_db)
    await people.replace(parse_people(GOOD))
    priya = await people.identify("slack", "U01PRIYA")
    assert priya is not None and (priya.kind, priya.id, priya.role, priya.name) == (
        "staff",
        "S-1",
        "rep",
        "Priya Raman",
    )
    grace = await people.identify("teams", AAD)
    assert grace is not None and grace.role == "supervisor"
    maya = await people.identify("slack", "U07MAYA")
    assert maya is not None and (maya.kind, maya.id, maya.role) == ("customer", "gid://shopify/Customer/7", "customer")
    assert (await people.identify("teams", "11111111-2222-4333-8444-555555555555")).id == "8"  # type: ignore[union-attr]
    assert await people.identify("teams", "U01PRIYA") is None and await people.identify("slack", AAD) is None
    assert await people.identify("widget", "U01PRIYA") is None and await people.identify("slack", "  ") is None
    assert await people.staff("S-1") == Staff(
        id="S-1", name="Priya Raman", role="rep", email="priya@shop.example", slack_user_id="U01PRIYA"
    )
    assert await people.staff("S-404") is None


async def test_a_reseed_replaces_the_seed_and_keeps_links_made_with_a_code(db: Database) -> None:
    """The emailed-code link flow writes into the same table; seeding again leaves it alone."""
    people, links = People(db), IdentityLinks(db)
    await people.replace(parse_people(GOOD))
    await links.start("slack", "T1:U0STRANGER", customer_id="C-9", code="ABC123", ttl_s=600)
    assert await people.identify("slack", "T1:U0STRANGER") is None  # a code out is not a link
    assert (await links.attempt("slack", "T1:U0STRANGER", "abc123")).outcome == "linked"
    linked = await people.identify("slack", "T1:U0STRANGER")
    assert linked is not None and (linked.kind, linked.id) == ("customer", "C-9")
    await people.replace(PeopleSeed(staff=(Staff(id="S-2", name="Tomás", role="rep", slack_user_id="U02TOMAS"),)))
    assert await people.identify("slack", "U01PRIYA") is None and await people.staff("S-1") is None
    assert (await people.identify("slack", "U02TOMAS")).id == "S-2"  # type: ignore[union-attr]
    assert (await people.identify("slack", "T1:U0STRANGER")).id == "C-9"  # type: ignore[union-attr]


async def test_the_sandbox_dataset_seeds_people_unless_told_not_to(tmp_path: Path) -> None:
    """With the sandbox and no people file, the dataset's staff and customers' Slack users are the seed."""
    demo = load_dataset_file(DEMO_DATASET_PATH)
    db = await make_sqlite(tmp_path / "a.db")
    await load_dataset(db, demo)
    assert (await People(db).identify("slack", "U07MAYA")).id == "C-7"  # type: ignore[union-attr]
    assert (await People(db).identify("slack", "U03GRACE")).role == "supervisor"  # type: ignore[union-attr]
    other = await make_sqlite(tmp_path / "b.db")
    await load_dataset(other, demo, people=False)
    assert await People(other).identify("slack", "U07MAYA") is None and await People(other).staff("S-1") is None
    await db.dispose()
    await other.dispose()


async def test_the_people_file_wins_at_start_and_a_bad_one_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_app seeds the store's dataset without its people, then the file's people; a bad file
    is a ConfigError naming the setting before the database is touched."""
    for key in list(os.environ):
        if key.startswith("SIGNOFF_") and key != "SIGNOFF_TEST_PG_URL":
            monkeypatch.delenv(key, raising=False)
    db = await make_sqlite(tmp_path / "app.db")
    await db.dispose()
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    monkeypatch.setenv("SIGNOFF_ENV", "development")  # the demo dataset seeds the store in development only
    people_file = tmp_path / "people.yaml"
    people_file.write_text(GOOD)
    monkeypatch.setenv("SIGNOFF_PEOPLE_FILE", str(people_file))
    app = await create_app(load_settings())
    try:
        people = app.runtime.s.people
        assert (await people.identify("slack", "U07MAYA")).id == "gid://shopify/Customer/7"  # type: ignore[union-attr]
        assert await people.identify("slack", "U02TOMAS") is None  # the dataset's rep is not in the file
        assert await app.backend.get_customer("C-7") is not None  # the store itself was seeded
    finally:
        await app.close()
    people_file.write_text("staff:\n  - {id: S-1, name: P, role: boss}\n")
    with pytest.raises(ConfigError, match="SIGNOFF_PEOPLE_FILE"):
        await create_app(load_settings())


async def test_seeding_the_same_people_again_writes_nothing_and_concurrent_seeds_do_not_collide(
    any_db: Database,
) -> None:
    """Every start seeds the file: the same seed is a no-op (rows keep their first stamp), and
    two processes starting together (serve and worker) both succeed."""
    import asyncio
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import text

    first = datetime(2026, 1, 1, tzinfo=UTC)
    await People(any_db, clock=lambda: first).replace(parse_people(GOOD))
    await People(any_db, clock=lambda: first + timedelta(days=1)).replace(parse_people(GOOD))
    async with any_db.engine.connect() as conn:
        stamps = set((await conn.execute(text("SELECT created_at FROM identities"))).scalars())
    assert len(stamps) == 1
    other = PeopleSeed(staff=(Staff(id="S-5", name="Z", role="rep", slack_user_id="U05Z"),))
    await asyncio.gather(People(any_db).replace(other), People(any_db).replace(other))
    assert (await People(any_db).everyone()).staff == other.staff
