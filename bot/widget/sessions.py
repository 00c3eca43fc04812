"""Who is calling the widget's API: a session, and the principal it acts as.

Three ways in, all ending at one session row (``storage/widget.py``):

* **Shopify app proxy** (``/shopify/proxy/…``, the storefront's ``/apps/signoff/…``): every
  request carries Shopify's signature (:mod:`bot.widget.proxy`); a logged-in customer's session
  is found from the signed customer id itself, a guest's by the page-held id.
* **A JWT** the site's backend signed for its logged-in customer (the API's own
  :class:`~bot.api.auth.Authenticator`): presented when the session is opened.
* **A guest**: knowledge only, until verified (``bot/widget/verify.py``) and bound to one customer.

The session secret is opaque and random; only its hash is stored. On the widget's own origin it
lives in an httpOnly, Secure, SameSite=Strict cookie scoped to ``/widget/api``; cross-site (an
origin in ``SIGNOFF_WIDGET_ORIGINS``) and through the app proxy (Shopify strips cookies) the page
holds it in memory and sends it as ``X-Signoff-Session``. Never in a URL, never in localStorage.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from agent.history import new_id
from bot.api.auth import Authenticator
from bot.web import ApiError
from bot.widget import proxy
from bot.widget.config import WidgetConfig
from storage.widget import WidgetSession, WidgetStore
from tools.backend import CommerceBackend
from tools.context import Principal

COOKIE = "signoff_widget"
HEADER = "X-Signoff-Session"
COOKIE_PATH = "/widget/api"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
PROXY_PREFIX = "/shopify/proxy/"


@dataclass(frozen=True, kw_only=True)
class Visitor:
    session: WidgetSession
    #: The session is held by the page (cross-site or app proxy), not by a cookie.
    page_held: bool

    @property
    def principal(self) -> Principal:
        s = self.session
        if s.customer_id is not None:
            return Principal(kind="customer", id=s.customer_id, customer_id=s.customer_id)
        # A guest: its own limits under its own key, and the shop's shared guest budget.
        return Principal(kind="customer", id=f"widget-{s.id}", customer_id=None, group=f"widget-shop:{s.shop}")


def ip_hash(request: web.Request) -> str:
    return hashlib.sha256((request.remote or "-").encode()).hexdigest()


def is_proxied(request: web.Request) -> bool:
    return request.path.startswith(PROXY_PREFIX)


class Sessions:
    def __init__(self, config: WidgetConfig, store: WidgetStore, auth: Authenticator, backend: CommerceBackend) -> None:
        self.config = config
        self.store = store
        self.auth = auth
        self.backend = backend

    # -- where the request comes from ---------------------------------------------------------
    def cross_site(self, request: web.Request) -> bool:
        """An allowed other origin (the page holds the session); a foreign origin is refused."""
        origin = request.headers.get("Origin")
        if origin is None or is_proxied(request) or urlsplit(origin).netloc == request.host:
            return False
        if origin not in self.config.origins:
            raise ApiError("forbidden", "origin not allowed")
        return True

    def _proxy_identity(self, request: web.Request) -> proxy.ProxyIdentity:
        try:
            return proxy.verify(list(request.query.items()), self.config.proxy_secret)
        except proxy.ProxyRejected as exc:
            raise ApiError("unauthorized", f"app proxy: {exc}") from None

    async def _shopify_customer(self, raw: str) -> str:
        for candidate in (raw, f"gid://shopify/Customer/{raw}"):
            customer = await self.backend.get_customer(candidate)
            if customer is not None:
                return customer.id
        raise ApiError("forbidden", "unknown customer")

    def _secret(self, request: web.Request, *, page_held: bool) -> str | None:
        value = request.headers.get(HEADER) if page_held else request.cookies.get(COOKIE)
        return value if value and len(value) <= 128 else None

    # -- every call but the first ---------------------------------------------------------------
    async def current(self, request: web.Request) -> Visitor:
        """The caller's session; 401 when there is none (the widget opens one)."""
        page_held = is_proxied(request) or self.cross_site(request)
        if is_proxied(request):
            who = self._proxy_identity(request)
            if who.customer is not None:
                customer = await self._shopify_customer(who.customer)
                found = await self.store.latest_for(
                    who.shop, customer, via="app_proxy", window=self.config.resume_window
                )
                if found is None:
                    raise ApiError("unauthorized", "no session")
                return Visitor(session=found, page_held=True)
        secret = self._secret(request, page_held=page_held)
        session = await self.store.by_secret(secret) if secret else None
        if session is None or (is_proxied(request) and not _guest_of(session, who.shop)):
            raise ApiError("unauthorized", "no session")
        return Visitor(session=session, page_held=page_held)

    # -- the first call of a page ---------------------------------------------------------------
    async def open(self, request: web.Request) -> tuple[Visitor, str | None]:
        """The page's session and, when a new secret was made, that secret (cookie or body)."""
        page_held = is_proxied(request) or self.cross_site(request)
        if is_proxied(request):
            who = self._proxy_identity(request)
            if who.customer is not None:
                customer = await self._shopify_customer(who.customer)
                return await self._identified(request, who.shop, customer, "app_proxy", page_held), None
            return await self._guest(request, who.shop, page_held)
        authorization = request.headers.get("Authorization")
        if authorization:
            caller = await self.auth.authenticate(authorization)
            if caller.role != "customer" or caller.principal.customer_id is None:
                raise ApiError("forbidden", "the widget is for customers")
            customer = caller.principal.customer_id
            secret = self._secret(request, page_held=page_held)
            mine = await self.store.by_secret(secret) if secret else None
            if mine is not None and mine.customer_id == customer and mine.verified_via == "jwt":
                return Visitor(session=mine, page_held=page_held), None
            visitor = await self._identified(request, self.config.shop, customer, "jwt", page_held)
            fresh = secrets.token_urlsafe(32)
            await self.store.rotate(visitor.session.id, fresh)
            return visitor, fresh
        return await self._guest(request, self.config.shop, page_held)

    async def _identified(self, request: web.Request, shop: str, customer: str, via: str, page_held: bool) -> Visitor:
        found = await self.store.latest_for(shop, customer, via=via, window=self.config.resume_window)
        if found is None:
            found = await self.store.create(
                id=new_id("ws"),
                secret=secrets.token_urlsafe(32),
                shop=shop,
                ip_hash=ip_hash(request),
                customer_id=customer,
                verified_via=via,
            )
        return Visitor(session=found, page_held=page_held)

    async def _guest(self, request: web.Request, shop: str, page_held: bool) -> tuple[Visitor, str | None]:
        secret = self._secret(request, page_held=page_held)
        mine = await self.store.by_secret(secret) if secret else None
        if mine is not None and _guest_of(mine, shop):
            return Visitor(session=mine, page_held=page_held), None
        limits = self.config.limits
        if await self.store.opened_from(ip_hash(request), limits.hour) >= limits.sessions_per_hour_per_ip:
            raise ApiError("rate_limited", "too many new conversations from this address")
        fresh = secrets.token_urlsafe(32)
        session = await self.store.create(id=new_id("ws"), secret=fresh, shop=shop, ip_hash=ip_hash(request))
        return Visitor(session=session, page_held=page_held), fresh

    # -- responses --------------------------------------------------------------------------------
    def remember(self, response: web.StreamResponse, visitor: Visitor, secret: str | None) -> None:
        """The cookie of a new secret on the widget's own origin (page-held secrets go in the body)."""
        if secret is None or visitor.page_held:
            return
        response.set_cookie(
            COOKIE,
            secret,
            path=COOKIE_PATH,
            max_age=COOKIE_MAX_AGE_S,
            httponly=True,
            secure=self.config.secure_cookie,
            samesite="Strict",
        )

    def cors(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin is not None and origin in self.config.origins and not is_proxied(request):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
            response.headers["Access-Control-Allow-Headers"] = f"Content-Type, Authorization, Last-Event-ID, {HEADER}"
            response.headers["Access-Control-Allow-Methods"] = "GET, POST"
            response.headers["Access-Control-Max-Age"] = "600"


def _guest_of(session: WidgetSession, shop: str) -> bool:
    """A page-held or cookie session may act for this shop's guest: opened there as a guest (and
    perhaps verified since by order or code), never a logged-in customer's session."""
    return session.shop == shop and session.verified_via in (None, "order", "code")


__all__ = ["COOKIE", "COOKIE_PATH", "HEADER", "Sessions", "Visitor", "ip_hash", "is_proxied"]
