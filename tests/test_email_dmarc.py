"""Our own DKIM check honours the From domain's DMARC record (``adkim=s``/``r``) and finds
the organisational domain by the DMARCbis tree walk, with DNS stubbed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.email.dmarc import DmarcPolicy, aligned, dmarc_policy, record_tags, walk_names
from bot.email.senders import dkim_aligned
from tests.test_email_senders import KEY, OTHER_KEY, OTHER_TXT, TXT, message, signed_by


def stub(records: dict[str, str]) -> tuple[list[str], Callable[[str], str | None]]:
    """A resolver answering ``records`` (and nothing else), and the names it was asked."""
    asked: list[str] = []

    def lookup(name: str) -> str | None:
        asked.append(name.lower())
        return records.get(name.lower())

    return asked, lookup


def test_records_and_the_tree_walk() -> None:
    assert record_tags("v=DMARC1; p=reject; adkim=s") == {"v": "dmarc1", "p": "reject", "adkim": "s"}
    assert record_tags("v=spf1 -all") is None and record_tags("p=reject; v=DMARC1") is None
    assert record_tags(None) is None and record_tags("v=DMARC1; junk") is None
    assert walk_names("a.mail.example.com") == ["a.mail.example.com", "mail.example.com", "example.com", "com"]
    long = ".".join(f"l{i}" for i in range(12)) + ".example.com"
    names = walk_names(long)
    assert len(names) == 8 and names[0] == long and names[1].count(".") == 6 and names[-1] == "com"


def organisation(domain: str, lookup: Callable[[str], str | None]) -> str | None:
    policy = dmarc_policy(domain, lookup)
    return policy.organisational if policy else None


def test_the_policy_and_the_organisational_domain() -> None:
    asked, lookup = stub({"_dmarc.example.com": "v=DMARC1; p=reject"})
    policy = dmarc_policy("Mail.Example.com", lookup)
    assert policy == DmarcPolicy(domain="example.com", adkim="r", organisational="example.com")
    assert asked == ["_dmarc.mail.example.com", "_dmarc.example.com", "_dmarc.com"]
    # The From domain's own record is the policy; the fewest-label record the organisation.
    _asked, lookup = stub({"_dmarc.mail.example.com": "v=DMARC1; p=none; adkim=s", "_dmarc.example.com": "v=DMARC1"})
    assert dmarc_policy("mail.example.com", lookup) == DmarcPolicy(
        domain="mail.example.com", adkim="s", organisational="example.com"
    )
    # psd=n marks the organisational domain; psd=y a public suffix, the organisation below it.
    _asked, lookup = stub({"_dmarc.shop.example": "v=DMARC1; psd=n", "_dmarc.example": "v=DMARC1; psd=y"})
    assert organisation("a.shop.example", lookup) == "shop.example"
    _asked, lookup = stub({"_dmarc.example": "v=DMARC1; p=reject; psd=y"})
    assert organisation("a.shop.example", lookup) == "shop.example"
    assert dmarc_policy("example.com", stub({})[1]) is None


def test_alignment_strict_relaxed_and_without_a_record() -> None:
    relaxed = DmarcPolicy(domain="example.com", adkim="r", organisational="example.com")
    strict = DmarcPolicy(domain="example.com", adkim="s", organisational="example.com")
    assert aligned("example.com", "mail.example.com", relaxed) and aligned("mail.example.com", "example.com", relaxed)
    assert aligned("news.example.com", "mail.example.com", relaxed)  # same organisation
    assert not aligned("example.org", "example.com", relaxed)
    assert aligned("example.com", "example.com", strict) and not aligned("example.com", "mail.example.com", strict)
    # No record: the domain or a parent only, never a sibling (no public-suffix list).
    assert aligned("example.com", "mail.example.com") and not aligned("news.example.com", "mail.example.com")
    assert not aligned("com", "example.com") and not aligned("", "example.com")
    # Two labels in common are not an organisation: shop.co.uk publishes its own record.
    _asked, lookup = stub({"_dmarc.shop.co.uk": "v=DMARC1; p=reject"})
    policy = dmarc_policy("shop.co.uk", lookup)
    assert not aligned("evil.co.uk", "shop.co.uk", policy) and not aligned("evil.co.uk", "shop.co.uk")


SUB = "maya@mail.example.com"


def _keys(extra: dict[str, str]) -> Callable[[str], str | None]:
    records = {"s1._domainkey.example.com": TXT, "s1._domainkey.news.example.com": OTHER_TXT, **extra}
    return stub(records)[1]


@pytest.mark.parametrize(
    "records,signer,expect",
    [
        ({}, "example.com", "example.com"),  # no record: a parent signs for its subdomain
        ({"_dmarc.example.com": "v=DMARC1; p=reject"}, "example.com", "example.com"),  # relaxed
        ({"_dmarc.example.com": "v=DMARC1; p=reject; adkim=s"}, "example.com", None),  # strict: not the From domain
        ({"_dmarc.mail.example.com": "v=DMARC1; adkim=s"}, "example.com", None),  # the From domain's own record
        ({"_dmarc.example.com": "v=DMARC1; p=reject"}, "news.example.com", "news.example.com"),  # a sibling
        ({}, "news.example.com", None),  # a sibling without a record: not aligned
    ],
    ids=["no-record-parent", "relaxed-parent", "strict-parent", "strict-own-record", "relaxed-sibling", "no-sibling"],
)
def test_our_dkim_check_honours_the_dmarc_record(records: dict[str, str], signer: str, expect: str | None) -> None:
    raw = message().replace(b"maya.chen@example.com", SUB.encode())
    key = KEY if signer == "example.com" else OTHER_KEY
    assert dkim_aligned(signed_by(raw, signer, key), "mail.example.com", _keys(records)) == expect
