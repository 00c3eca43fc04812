"""The widget in a real browser: Debian's chromium driven by Playwright (no browser download).

One browser for the module, a fresh context per test. Skips when /usr/bin/chromium is missing
(``.ci/run`` installs it). Screenshots of the launcher, a conversation and a confirmation go to
``$SIGNOFF_WIDGET_SHOTS`` (default: the test's temporary directory). axe-core is vendored under
``tests/vendor/axe-core``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.llm.base import ModelRequest, ModelResponse
from agent.llm.testing import make_response
from tests.widget_kit import WidgetServer, widget_server

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (.ci/run installs it)"
)
AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = (
    'Here you go: <img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> '
    '[x](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">link</a>'
)
WAIT_MS = 30_000
ROOT = "document.querySelector('signoff-chat').shadowRoot"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright gives every launch a fresh, temporary --user-data-dir of its own.
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server() -> Iterator[WidgetServer]:
    with widget_server(SIGNOFF_WIDGET_CHUNK_DELAY_S="0.25") as s:
        yield s


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("SIGNOFF_WIDGET_SHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def _page(browser: Any, url: str, *, width: int = 1280, **options: Any) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 800}, **options)
    page = context.new_page()
    page.goto(url)
    page.wait_for_function(
        "customElements.get('signoff-chat') !== undefined && !!document.querySelector('signoff-chat')"
    )
    return page


def _bubbles(page: Any, kind: str) -> list[str]:
    return page.evaluate(
        "k => [...document.querySelector('signoff-chat').shadowRoot.querySelectorAll('.msg.' + k + ' .text')]"
        ".map(e => e.textContent)",
        kind,
    )


def _answer_with(page: Any, pattern: str) -> str:
    """Wait for a complete agent answer matching ``pattern`` (the live region announces complete ones)."""
    page.wait_for_function(
        f"p => new RegExp(p).test({ROOT}.querySelector('[role=status].sr').textContent)",
        arg=pattern,
        timeout=WAIT_MS,
    )
    return next(t for t in reversed(_bubbles(page, "answer")) if re.search(pattern, t))


def _say(page: Any, text: str) -> None:
    page.locator("signoff-chat textarea").fill(text)
    page.locator("signoff-chat textarea").press("Enter")


def test_a_guest_asks_a_policy_question_verifies_with_an_order_and_gets_its_status(
    browser: Any, server: WidgetServer, shots: Path
) -> None:
    page = _page(browser, f"{server.url}/widget/demo")
    page.screenshot(path=str(shots / "widget-launcher.png"))
    page.get_by_role("button", name="Chat with us").click()
    _say(page, "What is your refund policy?")
    assert "original payment method" in _answer_with(page, "Refund")
    page.get_by_text("See your orders").click()
    page.get_by_label("Order number").fill("O-1042")
    page.locator("signoff-chat #v-email").fill("maya.chen@example.com")
    page.get_by_role("button", name="Verify", exact=True).click()
    page.get_by_text("Thank you, you are verified.").wait_for(timeout=WAIT_MS)
    _say(page, "Where is my order O-1042?")
    assert "O-1042" in _answer_with(page, "O-1042")
    page.screenshot(path=str(shots / "widget-conversation.png"))
    page.context.close()


def test_a_wrong_email_does_not_verify(browser: Any, server: WidgetServer) -> None:
    page = _page(browser, f"{server.url}/widget/demo")
    page.get_by_role("button", name="Chat with us").click()
    page.get_by_text("See your orders").click()
    page.get_by_label("Order number").fill("O-1042")
    page.locator("signoff-chat #v-email").fill("someone.else@example.com")
    page.get_by_role("button", name="Verify", exact=True).click()
    page.get_by_text("We could not match that order and email").wait_for(timeout=WAIT_MS)
    page.context.close()


def test_a_logged_in_customer_through_the_app_proxy_confirms_a_refund(
    browser: Any, server: WidgetServer, shots: Path
) -> None:
    server.storefront.customer = "C-9"
    try:
        page = _page(browser, f"{server.storefront_url}/", bypass_csp=True)
        page.get_by_role("button", name="Chat with us").click()
        _say(page, "The tees from O-1061 shrank in the wash, please refund $30.")
        confirm = page.get_by_role("button", name="Confirm")
        confirm.wait_for(timeout=WAIT_MS)
        page.screenshot(path=str(shots / "widget-confirmation.png"))
        assert _serious_violations(page) == []  # with the confirmation card and its buttons on screen
        confirm.click()
        page.get_by_text("You confirmed this.").wait_for(timeout=WAIT_MS)
        _answer_with(page, "[Rr]efund")
        assert page.get_by_role("button", name="Confirm").count() == 0
    finally:
        server.storefront.customer = None
    page.context.close()


def test_a_reload_mid_stream_loses_nothing_and_shows_nothing_twice(browser: Any, server: WidgetServer) -> None:
    page = _page(browser, f"{server.url}/widget/demo")
    page.get_by_role("button", name="Chat with us").click()
    _say(page, "What is your refund policy?")
    # The answer is arriving piece by piece (0.25 s apart): reload while it is.
    page.wait_for_function(
        f"() => {{ const t = [...{ROOT}.querySelectorAll('.msg.answer .text')];"
        " return t.length > 0 && t[t.length - 1].textContent.length > 0; }",
        timeout=WAIT_MS,
    )
    partial = _bubbles(page, "answer")[-1]
    page.reload()
    page.get_by_role("button", name="Chat with us").click()
    full = _answer_with(page, r"asks\.$")
    assert full.startswith(partial) and len(full) > len(partial)
    assert _bubbles(page, "user").count("What is your refund policy?") == 1
    assert _bubbles(page, "answer").count(full) == 1
    page.context.close()


def test_the_same_flow_with_the_keyboard_alone(browser: Any, server: WidgetServer) -> None:
    page = _page(browser, f"{server.url}/widget/demo")
    launcher = "document.querySelector('signoff-chat').shadowRoot.activeElement?.className === 'launcher'"
    for _ in range(12):
        page.keyboard.press("Tab")
        if page.evaluate(launcher):
            break
    assert page.evaluate(launcher)
    page.keyboard.press("Enter")
    page.keyboard.type("What is your refund policy?")
    page.keyboard.press("Enter")
    _answer_with(page, "Refund")
    page.keyboard.press("Shift+Tab")  # from the message box to "See your orders"
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.type("O-1042")
    page.keyboard.press("Tab")
    page.keyboard.type("maya.chen@example.com")
    page.keyboard.press("Enter")
    page.get_by_text("Thank you, you are verified.").wait_for(timeout=WAIT_MS)
    page.locator("signoff-chat textarea").focus()
    page.keyboard.type("Where is my order O-1042?")
    page.keyboard.press("Enter")
    _answer_with(page, "O-1042")
    page.keyboard.press("Escape")
    assert page.evaluate(launcher)
    page.context.close()


def test_axe_finds_no_serious_or_critical_violation(browser: Any, server: WidgetServer) -> None:
    page = _page(browser, f"{server.url}/widget/demo", width=360, bypass_csp=True, reduced_motion="reduce")
    page.get_by_role("button", name="Chat with us").click()
    _say(page, "What is your refund policy?")
    _answer_with(page, "Refund")
    page.get_by_text("See your orders").click()
    assert _serious_violations(page) == []
    page.context.close()


def _serious_violations(page: Any) -> list[tuple[str, str]]:
    """axe-core's serious and critical findings on the page as it is now (the widget's open shadow root included)."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    results = page.evaluate("() => axe.run(document, { resultTypes: ['violations'] })")
    return [(v["id"], v["impact"]) for v in results["violations"] if v["impact"] in ("serious", "critical")]


def test_talk_to_a_person_says_a_person_will_join(browser: Any, server: WidgetServer) -> None:
    """The button opens a hand-off itself; the stream's ``handoff`` event is shown in words."""
    page = _page(browser, f"{server.url}/widget/demo")
    page.get_by_role("button", name="Chat with us").click()
    page.get_by_role("button", name="Talk to a person").click()
    page.get_by_role("region", name="Conversation").get_by_text("A person from our team will join").wait_for(
        timeout=WAIT_MS
    )
    assert _bubbles(page, "user") == ["I'd like to talk to a person, please."]
    page.context.close()


class HostileModel:
    """A model whose every answer is markup and a javascript: link."""

    @property
    def model_name(self) -> str:
        return "hostile"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return make_response(HOSTILE, model=self.model_name, request=request)


def test_markup_in_a_model_answer_renders_as_inert_text(browser: Any) -> None:
    with widget_server(HostileModel()) as s:  # type: ignore[arg-type]
        page = _page(browser, f"{s.url}/widget/demo")
        page.get_by_role("button", name="Chat with us").click()
        _say(page, "hello")
        text = _answer_with(page, "pwned=4")
        assert text == HOSTILE
        created = page.evaluate(f"() => {ROOT}.querySelectorAll('.log img, .log script, .log a').length")
        assert created == 0
        assert page.evaluate("() => window.__pwned") is None
        assert page.evaluate("() => document.querySelectorAll('img, a[href^=javascript]').length") == 0
        page.context.close()
