"""The Teams app package: ``manifest.json`` plus the two icons, zipped.

``build_package(config, out_path)`` writes what an admin uploads in Teams
(``signoff teams manifest --out FILE``). Icons are drawn here as PNGs with
``zlib`` and ``struct`` only: ``color.png`` 192×192 (opaque) and ``outline.png``
32×32 (white on transparent), as Teams requires.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.teams.config import GUID

SCHEMA_VERSION = "1.30"
SCHEMA_URL = f"https://developer.microsoft.com/json-schemas/teams/v{SCHEMA_VERSION}/MicrosoftTeams.schema.json"
COLOR_SIZE, OUTLINE_SIZE = 192, 32
COMMANDS = (
    ("assist", "Bind this thread to a customer account, e.g. assist C-7"),
    ("queue", "Show the approvals waiting for you"),
)
_SEMVER = re.compile(r"^\d{1,4}\.\d{1,4}\.\d{1,4}$")
_HEX = re.compile(r"^#[0-9A-Fa-f]{6}$")


class ManifestError(ValueError):
    """A manifest setting is invalid; the message names it."""


@dataclass(frozen=True, kw_only=True)
class ManifestConfig:
    """What the package says about the app. ``bot_id`` is the bot's Entra app id."""

    bot_id: str
    messaging_endpoint: str
    developer_name: str
    website_url: str
    privacy_url: str
    terms_url: str
    #: The Teams app id; the bot id unless the app is registered separately.
    app_id: str | None = None
    version: str = "1.0.0"
    short_name: str = "signoff"
    full_name: str = "signoff — customer support agent"
    short_description: str = "Looks orders up, returns, cancels and refunds — and asks first."
    full_description: str = (
        "signoff is a customer-support agent for online retailers. It looks orders up, starts returns, "
        "cancels orders and issues refunds, asks the customer to confirm every action, and routes risky "
        "ones to a supervisor for approval. Every decision is made by deterministic code and audited."
    )
    accent_color: str = "#1F6F5C"

    def validate(self) -> None:
        for name, value in (("bot_id", self.bot_id), ("app_id", self.app_id or self.bot_id)):
            if not GUID.match(value):
                raise ManifestError(f"{name} must be a GUID")
        for name, url in (
            ("messaging_endpoint", self.messaging_endpoint),
            ("website_url", self.website_url),
            ("privacy_url", self.privacy_url),
            ("terms_url", self.terms_url),
        ):
            parts = urlsplit(url)
            if parts.scheme != "https" or not parts.hostname:
                raise ManifestError(f"{name} must be an https URL")
        _bounded("short_name", self.short_name, 30)
        _bounded("full_name", self.full_name, 100)
        _bounded("short_description", self.short_description, 80)
        _bounded("full_description", self.full_description, 4000)
        _bounded("developer_name", self.developer_name, 32)
        if not _SEMVER.match(self.version):
            raise ManifestError("version must look like 1.0.0")
        if not _HEX.match(self.accent_color):
            raise ManifestError("accent_color must look like #RRGGBB")


def _bounded(name: str, value: str, limit: int) -> None:
    if not value.strip() or len(value) > limit:
        raise ManifestError(f"{name} must be 1–{limit} characters")


def manifest(config: ManifestConfig) -> dict[str, Any]:
    """The ``manifest.json`` document."""
    config.validate()
    host = urlsplit(config.messaging_endpoint).hostname or ""
    scopes = ["personal", "team", "groupChat"]
    return {
        "$schema": SCHEMA_URL,
        "manifestVersion": SCHEMA_VERSION,
        "version": config.version,
        "id": config.app_id or config.bot_id,
        "developer": {
            "name": config.developer_name,
            "websiteUrl": config.website_url,
            "privacyUrl": config.privacy_url,
            "termsOfUseUrl": config.terms_url,
        },
        "name": {"short": config.short_name, "full": config.full_name},
        "description": {"short": config.short_description, "full": config.full_description},
        "icons": {"color": "color.png", "outline": "outline.png"},
        "accentColor": config.accent_color.upper(),
        "bots": [
            {
                "botId": config.bot_id,
                "scopes": scopes,
                "supportsFiles": False,
                "isNotificationOnly": False,
                "commandLists": [{"scopes": scopes, "commands": [{"title": t, "description": d} for t, d in COMMANDS]}],
            }
        ],
        "permissions": ["identity", "messageTeamMembers"],
        "validDomains": [host],
    }


def build_package(config: ManifestConfig, out_path: Path) -> Path:
    """Write the app package zip to ``out_path`` and return it."""
    doc = manifest(config)
    accent = _rgb(config.accent_color)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out_path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(doc, indent=2, ensure_ascii=False))
        z.writestr("color.png", icon_png(COLOR_SIZE, background=accent))
        z.writestr("outline.png", icon_png(OUTLINE_SIZE, background=None))
    return out_path


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


def icon_png(size: int, *, background: tuple[int, int, int] | None) -> bytes:
    """A white check mark; on ``background`` (opaque) or on transparency (outline icon)."""
    rows = bytearray()
    for y in range(size):
        rows.append(0)  # filter: none
        for x in range(size):
            if _on_check(x + 0.5, y + 0.5, size):
                rows += bytes((255, 255, 255, 255))
            elif background is not None:
                rows += bytes((*background, 255))
            else:
                rows += bytes((0, 0, 0, 0))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


_CHECK = ((0.24, 0.52), (0.42, 0.70), (0.77, 0.32))


def _on_check(x: float, y: float, size: int) -> bool:
    width = max(1.5, size * 0.075)
    points = [(px * size, py * size) for px, py in _CHECK]
    return any(_distance(x, y, a, b) <= width for a, b in zip(points, points[1:], strict=False))


def _distance(x: float, y: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
    return float(((x - ax - t * dx) ** 2 + (y - ay - t * dy) ** 2) ** 0.5)
