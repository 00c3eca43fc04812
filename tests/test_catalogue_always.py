"""The always-loaded tools against the real sandbox store and in-test runtime
protocols: knowledge search (C11), case tools, finish, load_tools (C4, C12)."""

from __future__ import annotations

from storage.db import Database
from tests.catalogue_harness import INJECTION, REGISTRY, Desk, Run, call, make_ctx, make_store
from tools.context import Rules


async def test_search_knowledge_returns_evidence_ids_and_records_them(db: Database) -> None:
    """Hits carry ``doc@version#section`` and the run remembers them for citation checks."""
    store = await make_store(db)
    run = Run()
    out = await call("search_knowledge", {"query": "refund window"}, make_ctx(store, run=run))
    ids = [h["evidence_id"] for h in out["hits"]]
    assert "refund-policy@7#window" in ids
    assert out["count"] == len(ids)
    assert run.evidence == set(ids)


async def test_search_knowledge_text_is_wrapped_and_truncated(db: Database) -> None:
    """Help-centre text is untrusted data, cut at the rules' limit (S7)."""
    store = await make_store(db)
    ctx = make_ctx(store, rules=Rules(untrusted_text_limit=80))
    out = await call("search_knowledge", {"query": "damaged items"}, ctx)
    hit = next(h for h in out["hits"] if h["evidence_id"] == "refund-policy@7#damaged")
    data = hit["content"]["untrusted_data"]
    assert data["source"] == "knowledge" and data["truncated"] is True and len(data["text"]) == 80
    assert set(hit) == {"evidence_id", "kind", "content"}


async def test_search_knowledge_injected_text_stays_inside_the_wrapper(db: Database) -> None:
    """An instruction in a help article appears only as untrusted data."""
    store = await make_store(db)
    out = await call("search_knowledge", {"query": "delayed parcels", "kind": "help"}, make_ctx(store))
    assert [h["evidence_id"] for h in out["hits"]] == ["shipping-help@2#delays"]
    assert INJECTION in out["hits"][0]["content"]["untrusted_data"]["text"]
    assert all(h["kind"] == "help" for h in out["hits"])


async def test_search_knowledge_with_no_hits_records_nothing(db: Database) -> None:
    """An unmatched query returns an empty list, not an error."""
    store = await make_store(db)
    run = Run()
    out = await call("search_knowledge", {"query": "zeppelin"}, make_ctx(store, run=run))
    assert out == {"hits": [], "count": 0} and run.evidence == set()


async def test_case_tools_delegate_to_the_case_desk(db: Database) -> None:
    """Notes are added through ctx.case and read back wrapped as untrusted."""
    store = await make_store(db)
    desk = Desk()
    ctx = make_ctx(store, desk=desk)
    assert await call("add_case_note", {"note": "Customer reports damage."}, ctx) == {
        "note_id": 1,
        "added": True,
    }
    case = await call("get_case", {}, ctx)
    assert case["conversation_id"] == "conv_1" and case["status"] == "open"
    assert case["notes"] == [
        {
            "untrusted_data": {
                "source": "case_note",
                "text": "Customer reports damage.",
                "truncated": False,
            }
        }
    ]


async def test_escalate_to_human_hands_off_through_the_desk(db: Database) -> None:
    """Escalation records reason and summary and says so."""
    store = await make_store(db)
    desk = Desk()
    out = await call(
        "escalate_to_human",
        {"reason": "customer_request", "summary": "Wants a person."},
        make_ctx(store, desk=desk),
    )
    assert out["escalated"] is True and out["case_status"] == "escalated"
    assert desk.escalations == [("customer_request", "Wants a person.")]


async def test_finish_delegates_and_surfaces_runtime_refusals(db: Database) -> None:
    """finish passes claims to ctx.run; a false claim comes back as a tool error."""
    store = await make_store(db)
    run = Run()
    ctx = make_ctx(store, run=run)
    bad = await call(
        "finish",
        {"resolution": "Refunded.", "action_ids": ["R-1"], "sources": ["refund-policy@7#window"]},
        ctx,
    )
    assert bad["error"] == "unverified_sources"
    await call("search_knowledge", {"query": "refund window"}, ctx)
    ok = await call(
        "finish",
        {"resolution": "Refunded.", "action_ids": ["R-1"], "sources": ["refund-policy@7#window"]},
        ctx,
    )
    assert ok == {"finished": True}
    assert run.finished == ("Refunded.", ["R-1"], ["refund-policy@7#window"])


async def test_load_tools_adds_a_group(db: Database) -> None:
    """load_tools asks the run to add the group and reports the tools now loaded."""
    store = await make_store(db)
    run = Run()
    out = await call("load_tools", {"group": "billing"}, make_ctx(store, run=run))
    assert run.groups == ["billing"]
    assert out["group"] == "billing"
    assert out["tools_now_loaded"] == REGISTRY.names_for(["billing"])
    assert "issue_refund" in out["tools_now_loaded"]
