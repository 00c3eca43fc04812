"""The opening-message classifier picks tool groups deterministically (C4)."""

from __future__ import annotations

import pytest

from tools.intent import classify

A, O, R, B = "account", "orders", "returns", "billing"  # noqa: E741

#: (message, groups that must be present). Extra groups are allowed unless the
#: exact-set table below pins them.
MUST_INCLUDE = [
    ("Where is my order?", {O}),
    ("where's my package, it was supposed to come yesterday", {O}),
    ("My parcel still hasn't arrived and it's been 2 weeks", {O}),
    ("Can you track O-1042 for me", {O}),
    ("The tracking number you gave me doesn't work", {O}),
    ("I ordered a lamp last week and have heard nothing", {O}),
    ("Please cancel my order, I bought the wrong thing", {O}),
    ("I need to change the shipping address on my latest purchase", {O}),
    ("I moved last month, can you send it to my new address?", {O}),
    ("Can I reorder the same coffee beans as last time?", {O}),
    ("The delivery is late again. What's going on?", {O}),
    ("I want a refund", {B, O}),
    ("I was charged twice for the same order!!", {B, O}),
    ("You double-charged my card", {B, O}),
    ("when will I get my money back", {B, O}),
    ("REFUNDS take forever with you guys", {B, O}),
    ("My payment was declined but I think the money left my account", {B}),
    ("Can I get a copy of the invoice for O-77?", {B, O}),
    ("I need a VAT receipt for my company", {B}),
    ("How do I return these shoes? They don't fit", {R, O}),
    ("I'd like to send it back", {R, O}),
    ("Returning two items from my last order", {R, O}),
    ("What's the status of my return RT-31?", {R, O}),
    ("The mug arrived broken", {R, O, B}),
    ("the blender is defective, it stopped working after a day", {R, O, B}),
    ("You sent me the wrong item", {R, O}),
    ("Can I exchange this for a bigger size?", {R, O}),
    ("I forgot my password", {A}),
    ("I can't log in to my account", {A}),
    ("Please update my email address", {A}),
    ("I'm locked out, can't sign in", {A}),
    ("how do I change my phone number on file", {A}),
    ("My credit card expired, how do I update it?", {A, B}),
    ("Can you send me a payment link?", {A, B}),
    ("I never received my order and I want my money back", {O, B}),
    ("Hi, my order O-1042 arrived damaged and I would like a refund please", {O, B, R}),
    ("My package hasn\u2019t shown up yet", {O}),
    ("It doesn\u2019t fit, can I swap it?", {R, O}),
    ("Still waiting on my stuff from two weeks ago", {O}),
    ("I need to reset my 2FA", {A}),
    ("Can I change my address? I typed the wrong zip", {O}),
    ("The price dropped two days after I bought it", {B, O}),
    ("Is my tent still under warranty?", {R, O}),
    ("how do I use my gift card", {B}),
    ("I haven't received it yet", {O}),
]


@pytest.mark.parametrize(("message", "expected"), MUST_INCLUDE)
def test_classify_recalls_the_groups_a_support_message_needs(message: str, expected: set[str]) -> None:
    """Realistic opening messages load at least the groups they need."""
    assert expected <= classify(message), message


EXACT = [
    ("Where is my order?", {O}),
    ("I forgot my password", {A}),
    ("I want a refund", {B, O}),
    ("How do I return these shoes?", {R, O}),
]


@pytest.mark.parametrize(("message", "expected"), EXACT)
def test_classify_stays_narrow_on_single_topic_messages(message: str, expected: set[str]) -> None:
    """A one-topic message does not drag in unrelated groups."""
    assert classify(message) == frozenset(expected)


@pytest.mark.parametrize(
    "message",
    [
        "",
        "hi",
        "Hello there!",
        "thanks, that's all",
        "Is anyone there?",
        "What are your opening hours?",
        "I'm writing in order to say you're great",
    ],
)
def test_classify_returns_empty_set_when_unsure(message: str) -> None:
    """Greetings and off-topic text carry no signal: the model loads groups itself."""
    assert classify(message) == frozenset()


def test_classify_is_case_insensitive_and_respects_word_boundaries() -> None:
    """Case does not matter; substrings inside other words do not match."""
    assert classify("WHERE IS MY ORDER") == classify("where is my order")
    assert classify("the disordered shelves") == frozenset()
    assert classify("a paywall article") == frozenset()


def test_classify_returns_frozenset_of_known_groups() -> None:
    """The result is hashable and only ever names loadable groups."""
    out = classify("refund my order, reset my password, return the shoes")
    assert isinstance(out, frozenset)
    assert out == {A, O, R, B}
