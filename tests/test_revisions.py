"""Start-up reads the migration graph without Alembic (``storage/revisions.py``): the same
answer as Alembic's own script directory and migration context, a clear error for a version
file it cannot read (that serving never imports Alembic: ``test_serving_imports.py``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from sandbox import schema
from storage import migrate, revisions

ROOT = Path(__file__).resolve().parent.parent


def _alembic(folders: list[Path]) -> tuple[set[str], set[str]]:
    script = ScriptDirectory(str(migrate.MIGRATIONS), version_locations=[str(f) for f in folders])
    return {r.revision for r in script.walk_revisions()}, set(script.get_heads())


@pytest.mark.parametrize("sources", [[], [schema.SOURCE]], ids=["runtime", "runtime+sandbox"])
def test_the_graph_is_alembics_graph(sources: list[migrate.MigrationSource]) -> None:
    folders = migrate.version_folders(sources)
    graph = revisions.graph(folders)
    known, heads = _alembic(folders)
    assert set(graph.known) == known and len(known) > 10
    assert set(graph.heads) == heads == set(migrate.heads(sources))


def _revision(folder: Path, name: str, down: str) -> None:
    folder.joinpath(f"{name}.py").write_text(
        textwrap.dedent(f'''\
            """{name}"""
            revision: str = "{name}"
            down_revision = {down}
            branch_labels = None
            depends_on = None

            def upgrade() -> None: ...
            def downgrade() -> None: ...
            ''')
    )


def test_branches_and_merges_read_as_alembic_reads_them(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    _revision(a, "r1", "None")
    _revision(a, "r2", '"r1"')
    _revision(a, "r3", '"r1"')  # a second branch from r1
    _revision(a, "r4", '("r2", "r3")')  # merged
    _revision(b, "s1", "None")  # another source's own branch
    _revision(b, "s2", "['s1']")
    graph = revisions.graph([a, b])
    assert graph.heads == ("r4", "s2")
    assert (set(graph.known), set(graph.heads)) == _alembic([a, b])


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('revision = "x" + "y"\ndown_revision = None\n', "revision is not a literal"),
        ("down_revision = None\n", "no literal `revision"),
        ('revision = "x"\ndown_revision = 3\n', "down_revision must be"),
    ],
)
def test_a_version_file_it_cannot_read_is_named(tmp_path: Path, body: str, error: str) -> None:
    (tmp_path / "0001_bad.py").write_text(body)
    with pytest.raises(revisions.RevisionFileError, match=error) as caught:
        revisions.graph([tmp_path])
    assert "0001_bad.py" in str(caught.value)


async def test_the_database_revisions_are_the_migration_contexts(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(revisions.current) == ((), False)  # a blank database
        await schema.upgrade(url)
        async with engine.connect() as conn:
            at, has_tables = await conn.run_sync(revisions.current)
            theirs = await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_heads())
        assert has_tables and at == tuple(sorted(theirs)) and len(at) == 2
        state = await schema.state(engine)
        assert state.at == at and set(state.heads) == set(at) and not state.behind and state.unknown == ()
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('9999_from_the_future')"))
        assert (await schema.state(engine)).unknown == ("9999_from_the_future",)
    finally:
        await engine.dispose()
