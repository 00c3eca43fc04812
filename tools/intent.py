"""Which tool groups an opening message needs: a cheap, deterministic classifier.

No model call: a table of word-boundary regular expressions (case-insensitive,
tolerant of simple plurals and verb endings), each naming the groups it
implies. Recall matters more than precision -- an extra group costs a few
hundred prompt tokens, a missing one costs a ``load_tools`` round trip -- but
a message with no signal gets the empty set and the model loads what it needs.
"""

from __future__ import annotations

import re
from typing import Final

ACCOUNT: Final = "account"
ORDERS: Final = "orders"
RETURNS: Final = "returns"
BILLING: Final = "billing"

_R = re.IGNORECASE


def _rx(*alternatives: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{'|'.join(alternatives)})\b", _R)


O_, R_, B_, A_ = {ORDERS}, {RETURNS, ORDERS}, {BILLING, ORDERS}, {ACCOUNT}

#: (pattern, groups). Order does not matter; every matching rule contributes.
_RULES: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = tuple(
    (_rx(*alternatives), frozenset(groups))
    for alternatives, groups in (
        # -- orders and delivery --------------------------------------------------
        (("orders?", "ordered", "purchases?", "purchased", "bought"), O_),
        (("packages?", "parcels?", "shipments?", "deliver(?:y|ies|ed|ing)?"), O_),
        (("ship(?:ping|ped|s)?", "track(?:ing|ed)?", "courier", "carrier"), O_),
        (("dispatch(?:ed)?", "in transit", "eta", "arriv(?:e|ed|es|ing|al)"), O_),
        (("(?:not|never|[a-z]+n't|yet to) (?:be(?:en)? )?(?:received|come|shown up)",), O_),
        (("where(?:'s| is| are)? (?:my|the) (?:stuff|things?|items?)", "still waiting"), O_),
        (("lost", "late", "delay(?:ed|s)?"), O_),
        (
            ("cancel(?:l?ed|l?ing|lation)?", "re-?order(?:ed|ing)?", "(?:order|buy) (?:it )?again"),
            O_,
        ),
        (("(?:shipping|delivery|postal|street|new) address", "wrong address", "moved"), O_),
        (("(?:change|update|correct|fix) (?:my |the )?(?:delivery |shipping )?address",), O_),
        (("O-[0-9A-Za-z]{1,16}",), O_),
        # -- returns -----------------------------------------------------------------
        (("return(?:s|ed|ing)?", "(?:send|sent) (?:it|them|this|these|everything) back"), R_),
        (("exchange[sd]?", "swap", "rma", "wrong size", "too (?:small|big|large|tight)"), R_),
        (("(?:doesn't|does not|didn't|don't) fit",), R_),
        (("wrong (?:item|product|colou?r|one)", "not what I ordered"), R_),
        (("missing (?:item|part|piece)s?",), R_),
        (("broken", "damaged?", "defective", "faulty", "cracked", "smashed"), {*R_, BILLING}),
        (("doesn't work", "does not work", "stopped working"), {*R_, BILLING}),
        (("warranty", "guarantee"), R_),
        (("RT-[0-9A-Za-z]{1,16}",), {RETURNS}),
        # -- billing ----------------------------------------------------------------------
        (("refund(?:s|ed|ing)?", "money back", "reimburse(?:d|ment)?", "compensat(?:e|ion)"), B_),
        (("charge[sd]?", "charging", "double[- ]?charged", "billed", "overcharged", "twice"), B_),
        (("payments?", "pay", "paid", "paying", "declined", "didn't go through"), B_),
        (("invoices?", "receipts?", "vat", "bills?", "billing", "statements?"), {BILLING}),
        (("transactions?", "INV-[0-9A-Za-z]{1,16}", "gift ?cards?"), {BILLING}),
        (
            (
                "price (?:drop(?:ped|s)?|adjustment|match)",
                "discount",
                "coupon",
                "promo(?:tion)? code",
            ),
            B_,
        ),
        # -- account --------------------------------------------------------------------------
        (("password", "log ?in", "logging in", "sign ?in", "signing in", "locked out"), A_),
        (("can't access", "username", "accounts?", "profile", "contact details"), A_),
        (("e-?mail address", "(?:phone|mobile) number", "two[- ]factor", "2fa"), A_),
        (("(?:change|update) (?:my )?(?:e-?mail|phone|number)", "verification code"), A_),
        (
            ("(?:credit|debit) cards?", "saved cards?", "payment (?:method|detail)s?"),
            {*A_, BILLING},
        ),
        (
            ("card on file", "card (?:expired|details)", "payment link", "pay online"),
            {*A_, BILLING},
        ),
    )
)

#: How much of a message is classified: what it is about shows early, and 40 rules over all of
#: a 40,000-character message held the event loop ~0.2 s.
MAX_CLASSIFIED = 2_000

#: Phrases whose words would mislead the rules ("in order to" is not an order).
_NOISE = re.compile(r"\bin order to\b|\bthe order of\b|\bout of order\b", _R)


def classify(text: str) -> frozenset[str]:
    """The tool groups the opening ``text`` most likely needs; empty when unsure."""
    cleaned = _NOISE.sub(" ", text[:MAX_CLASSIFIED].replace("\u2019", "'"))
    groups: set[str] = set()
    for rule, implied in _RULES:
        if rule.search(cleaned):
            groups |= implied
    return frozenset(groups)
