"""DMARC identifier alignment for our own DKIM check: the ``From:`` domain's DMARC record
(``_dmarc.<domain>`` TXT, through the same stubbable lookup as the DKIM keys), its ``adkim``
mode, and the organisational domain.

No public-suffix list is a dependency, so the organisational domain is found the way
DMARCbis (draft-ietf-dmarc-dmarcbis, which replaces the list) finds it, by a *DNS tree
walk*: ``_dmarc.<From domain>``, then each parent up to the top-level domain, at most eight
queries. The first record found is the policy (``adkim=s``: the signer must be the ``From:``
domain itself; ``r``, the default: any domain within the organisational domain). The
organisational domain is the domain of a record with ``psd=n``, the child below a record
with ``psd=y`` (a public-suffix operator's), else the record with the fewest labels; it has
at least two labels.

Limitation: with no DMARC record anywhere on the path, nothing tells a registrable domain
from a public suffix, so only the ``From:`` domain itself or one of its parents (two labels
or more: whoever controls a parent's DNS controls the child's) is aligned; a sibling or a
child of the ``From:`` domain never is. A shop's customer whose domain publishes no DMARC
record and signs from a sibling domain is served as unverified (safe side).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: A TXT lookup (the same shape as ``senders.TxtLookup``).
Lookup = Callable[[str], str | None]
#: The DNS tree walk asks at most this many names (DMARCbis).
MAX_WALK = 8
#: A DMARC record longer than this is not read.
MAX_RECORD = 2000


@dataclass(frozen=True, kw_only=True)
class DmarcPolicy:
    """What the ``From:`` domain's DMARC records say about DKIM alignment."""

    #: Where the policy record was found (the ``From:`` domain or a parent).
    domain: str
    #: ``adkim``: "s" strict (exact domain) or "r" relaxed (same organisational domain).
    adkim: str
    #: The organisational domain (two labels or more).
    organisational: str


def record_tags(text: str | None) -> dict[str, str] | None:
    """The tags of a DMARC record (``v=DMARC1; p=…; adkim=s``), lower case; None when ``text``
    is not one (its first tag must be ``v=DMARC1``)."""
    if not text or len(text) > MAX_RECORD:
        return None
    tags: dict[str, str] = {}
    for part in text.split(";"):
        name, eq, value = part.partition("=")
        if eq:
            tags.setdefault(name.strip().lower(), value.strip().lower())
        elif part.strip():
            return None
    first = text.split(";", 1)[0].replace(" ", "").lower()
    return tags if first == "v=dmarc1" else None


def walk_names(domain: str) -> list[str]:
    """The names a DMARCbis tree walk asks about, ``domain`` first: after it, the suffix of
    at most seven labels, then one label fewer each time, down to the top-level domain."""
    labels = domain.split(".")
    names = [domain]
    for count in range(min(len(labels) - 1, MAX_WALK - 1), 0, -1):
        names.append(".".join(labels[-count:]))
    return names


def dmarc_policy(from_domain: str, lookup: Lookup) -> DmarcPolicy | None:
    """The policy that applies to ``from_domain``, found by the tree walk; None when no name on
    the path publishes a DMARC record."""
    domain = from_domain.lower().rstrip(".")
    names = walk_names(domain)
    found = [(name, tags) for name in names if (tags := record_tags(lookup(f"_dmarc.{name}"))) is not None]
    if not found:
        return None
    organisational = found[-1][0]  # the fewest labels, unless a psd tag says otherwise
    for name, tags in found:
        if tags.get("psd") == "n":
            organisational = name
            break
        if tags.get("psd") == "y":
            below = names.index(name) - 1
            organisational = names[below] if below >= 0 else name
            break
    if organisational.count(".") < 1:  # never a top-level domain
        organisational = ".".join(domain.split(".")[-2:])
    first_name, first_tags = found[0]
    adkim = "s" if first_tags.get("adkim") == "s" else "r"
    return DmarcPolicy(domain=first_name, adkim=adkim, organisational=organisational)


def _within(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def aligned(signer: str, from_domain: str, policy: DmarcPolicy | None = None) -> bool:
    """A DKIM signing domain aligned with the ``From:`` domain: under ``adkim=s`` the same
    domain; under ``adkim=r`` any domain within the organisational domain; with no DMARC
    record, the same domain or a parent of it (see the module's limitation)."""
    signer, from_domain = signer.lower().rstrip("."), from_domain.lower().rstrip(".")
    if not signer or "." not in signer:
        return False
    if policy is None:
        return _within(from_domain, signer)
    if policy.adkim == "s":
        return signer == from_domain
    return _within(signer, policy.organisational) and _within(from_domain, policy.organisational)


__all__ = ["DmarcPolicy", "aligned", "dmarc_policy", "record_tags", "walk_names"]
