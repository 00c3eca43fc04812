"""Whether a mail really comes from its ``From:`` address: the provider's verdicts, and our own
DKIM check of the raw message when the provider's verdict names no domain.

A sender is *verified* by a DMARC pass from the provider, a provider DKIM pass by the
``From:`` domain itself (SendGrid names the signing domain), or, when the raw message is at
hand (SendGrid raw mode, Mailgun ``body-mime``, Postmark ``RawEmail``), a DKIM signature we
verify here (``dkimpy``) whose ``d=`` is aligned with the ``From:`` domain as its DMARC
record says (``adkim=s``: the same domain; relaxed: the same organisational domain; no
record: the domain or a parent of it; :mod:`bot.email.dmarc`). A bare "Pass" (Mailgun's
``X-Mailgun-Dkim-Check-Result``) never verifies anyone. DNS goes through a :data:`TxtLookup`
the tests stub.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.email.dmarc import aligned, dmarc_policy
from bot.email.parsing import InboundEmail

log = logging.getLogger(__name__)

#: A TXT lookup: the record's text for a DNS name, or None. Synchronous (dkimpy calls it);
#: the bridge runs the check in a thread.
TxtLookup = Callable[[str], str | None]
#: At most this many DKIM-Signature headers are tried (each costs a DNS lookup).
MAX_SIGNATURES = 5
#: Provider verdict fields longer than this are cut before they are read.
MAX_VERDICT = 2000
_BAD_VERDICTS = frozenset({"fail", "softfail", "permerror"})


def dns_txt(name: str, *, timeout_s: float = 3.0) -> str | None:
    """The TXT record at ``name`` through the system resolver (dnspython), None when absent."""
    import dns.exception  # at the first lookup, as dkimpy below: ~2.7 MB a process without mail need not hold
    import dns.resolver

    try:
        answer = dns.resolver.resolve(name, "TXT", lifetime=timeout_s)
    except (dns.exception.DNSException, ValueError):
        return None
    for record in answer:
        return b"".join(record.strings).decode("ascii", "replace")
    return None


def dkim_aligned(raw: bytes, from_domain: str, lookup: TxtLookup) -> str | None:
    """The ``d=`` of a valid DKIM signature on ``raw`` aligned with ``from_domain`` under the
    domain's DMARC record (:mod:`bot.email.dmarc`: ``adkim``, organisational domain), else
    None. A signature with ``l=`` (a body length limit: anything may follow it) never counts.
    The DMARC record is looked up only once a signature is valid."""

    def dnsfunc(name: bytes, timeout: float = 5) -> bytes | None:
        text = lookup(name.decode("ascii", "replace").rstrip("."))
        return text.encode() if text else None

    end = raw.find(b"\r\n\r\n")
    head = raw[: end if end >= 0 else raw.find(b"\n\n")][: 256 * 1024].lower()
    if b"dkim-signature:" not in head:  # unsigned: no need to parse a large message
        return None
    import dkim  # at the first signed mail (see dns_txt)

    signers: list[str] = []
    try:
        checker = dkim.DKIM(raw, minkey=1024, timeout=5)
        count = sum(1 for name, _v in checker.headers if name.lower() == b"dkim-signature")
        for idx in range(min(count, MAX_SIGNATURES)):
            if checker.verify(idx=idx, dnsfunc=dnsfunc) and b"l" not in (checker.signature_fields or {}):
                signers.append((checker.domain or b"").decode("ascii", "replace"))
    except (dkim.DKIMException, ValueError, IndexError, UnicodeError) as exc:
        log.info("DKIM check failed: %s", str(exc)[:200])
    if not signers:
        return None
    policy = dmarc_policy(from_domain, lookup)
    return next((signer for signer in signers if aligned(signer, from_domain, policy)), None)


def _verdict(value: str | None) -> str:
    """A provider's one-word verdict, lower case ("pass", "fail", "none", …); "" when absent."""
    words = (value or "")[:200].strip().lower().split()
    return words[0].strip(";,") if words else ""


def dkim_results(value: str | None) -> list[tuple[str, str]]:
    """(signing domain, verdict) pairs from a SendGrid-style ``{@example.com : pass, @x.net : fail}``;
    a bare verdict (Mailgun's ``Pass``) names no domain (``""``). Linear: split, never a regex."""
    pairs: list[tuple[str, str]] = []
    for part in (value or "")[:MAX_VERDICT].strip().strip("{}").split(","):
        domain, colon, verdict = part.partition(":")
        if colon:
            pairs.append((domain.strip().lstrip("@").lower(), _verdict(verdict)))
        elif part.strip():
            pairs.append(("", _verdict(part)))
    return pairs


@dataclass(frozen=True, kw_only=True)
class SenderCheck:
    """Whether the ``From:`` address is vouched for.

    ``verified``: a DMARC pass, or a DKIM pass by the ``From:`` domain itself (aligned);
    ``failed``: an explicit SPF or own-domain DKIM failure (refused); ``unverified``:
    anything else — no verdict, ``none``, ``neutral``, SPF alone, another domain's DKIM,
    a bare "Pass", ``dmarc=fail``. ``reason`` says which, for logs and the audit of the turn.
    """

    verdict: Literal["verified", "unverified", "failed"]
    reason: str


def sender_check(mail: InboundEmail) -> SenderCheck:
    """Judge the sender from the provider's own verdict fields (never the message's headers)."""
    domain = mail.sender.rpartition("@")[2].lower()
    dmarc = _verdict(mail.dmarc)
    if dmarc == "pass":
        return SenderCheck(verdict="verified", reason="dmarc=pass")
    results = dkim_results(mail.dkim)
    own = [v for d, v in results if d == domain]
    if dmarc != "fail" and "pass" in own:
        return SenderCheck(verdict="verified", reason=f"dkim=pass d={domain}")
    if _verdict(mail.spf) in _BAD_VERDICTS:
        return SenderCheck(verdict="failed", reason="SPF")
    if any(v in _BAD_VERDICTS for v in own) or any(not d and v in _BAD_VERDICTS for d, v in results):
        return SenderCheck(verdict="failed", reason="DKIM")
    if dmarc:
        return SenderCheck(verdict="unverified", reason=f"dmarc={dmarc}")
    return SenderCheck(verdict="unverified", reason=f"no DMARC pass and no DKIM pass by {domain}")


def own_check(mail: InboundEmail, lookup: TxtLookup) -> SenderCheck:
    """:func:`sender_check`, then, for an unverified mail whose raw message we have (and whose
    provider did not report ``dmarc=fail``), our own aligned-DKIM check of that message."""
    check = sender_check(mail)
    if check.verdict != "unverified" or mail.raw is None or _verdict(mail.dmarc) == "fail":
        return check
    signer = dkim_aligned(mail.raw, mail.sender.rpartition("@")[2], lookup)
    return SenderCheck(verdict="verified", reason=f"dkim=pass d={signer} (checked here)") if signer else check


def failed_check(mail: InboundEmail) -> str | None:
    """ "SPF" or "DKIM" when the provider reported an explicit failure for the sender."""
    check = sender_check(mail)
    return check.reason if check.verdict == "failed" else None


__all__ = [
    "SenderCheck",
    "TxtLookup",
    "aligned",
    "dkim_aligned",
    "dkim_results",
    "dns_txt",
    "failed_check",
    "own_check",
    "sender_check",
]
