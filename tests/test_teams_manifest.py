"""The Teams app package: a zip with manifest.json and two icons of the sizes Teams requires."""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from bot.teams.manifest import SCHEMA_VERSION, ManifestConfig, ManifestError, build_package, icon_png
from tests.fakes.bot_connector import APP_ID
from tests.support import app_setting

CONFIG = ManifestConfig(
    bot_id=APP_ID,
    messaging_endpoint="https://bot.shop.example/teams/messages",
    developer_name="Shop Example",
    website_url="https://shop.example",
    privacy_url="https://shop.example/privacy",
    terms_url="https://shop.example/terms",
)


def read_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, colour type, rows) of an 8-bit PNG with filter 0 rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8
    raw = zlib.decompress(idat)
    stride = width * 4 + 1
    rows = [raw[i * stride + 1 : (i + 1) * stride] for i in range(height)]
    assert all(raw[i * stride] == 0 for i in range(height))
    return width, height, colour, rows


def pixels(rows: list[bytes]) -> list[tuple[int, int, int, int]]:
    return [tuple(row[i : i + 4]) for row in rows for i in range(0, len(row), 4)]  # type: ignore[misc]


def test_the_package_unpacks_into_a_manifest_and_two_icons(tmp_path: Path) -> None:
    out = build_package(CONFIG, tmp_path / "teams" / "signoff.zip")
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == ["color.png", "manifest.json", "outline.png"]
        doc = json.loads(z.read("manifest.json"))
        color, outline = z.read("color.png"), z.read("outline.png")
    for key in (
        "$schema",
        "manifestVersion",
        "version",
        "id",
        "developer",
        "name",
        "description",
        "icons",
        "accentColor",
        "bots",
        "validDomains",
    ):
        assert key in doc
    assert doc["manifestVersion"] == SCHEMA_VERSION and f"v{SCHEMA_VERSION}/" in doc["$schema"]
    assert doc["id"] == APP_ID and doc["icons"] == {"color": "color.png", "outline": "outline.png"}
    assert set(doc["developer"]) == {"name", "websiteUrl", "privacyUrl", "termsOfUseUrl"}
    (bot,) = doc["bots"]
    assert bot["botId"] == APP_ID and bot["scopes"] == ["personal", "team", "groupChat"]
    assert bot["supportsFiles"] is False
    assert [c["title"] for c in bot["commandLists"][0]["commands"]] == ["assist", "queue"]
    assert "assist C-7" in bot["commandLists"][0]["commands"][0]["description"]
    assert doc["validDomains"] == ["bot.shop.example"]
    assert len(doc["name"]["short"]) <= 30 and len(doc["description"]["short"]) <= 80
    w, h, _, rows = read_png(color)
    assert (w, h) == (192, 192) and all(p[3] == 255 for p in pixels(rows))
    w, h, colour_type, rows = read_png(outline)
    assert (w, h, colour_type) == (32, 32, 6)


def test_the_outline_icon_is_white_on_transparent_only() -> None:
    _, _, _, rows = read_png(icon_png(32, background=None))
    seen = set(pixels(rows))
    assert (0, 0, 0, 0) in seen and (255, 255, 255, 255) in seen
    assert seen <= {(0, 0, 0, 0), (255, 255, 255, 255)}


def test_the_teams_app_id_can_differ_from_the_bot_id(tmp_path: Path) -> None:
    other = "22222222-2222-4222-8222-222222222222"
    with zipfile.ZipFile(build_package(replace(CONFIG, app_id=other), tmp_path / "p.zip")) as z:
        doc = json.loads(z.read("manifest.json"))
    assert doc["id"] == other and doc["bots"][0]["botId"] == APP_ID


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"bot_id": "signoff-bot"}, "bot_id"),
        ({"app_id": "nope"}, "app_id"),
        ({"messaging_endpoint": "http://bot.shop.example/teams/messages"}, "messaging_endpoint"),
        ({"privacy_url": "shop.example/privacy"}, "privacy_url"),
        ({"short_name": "x" * 31}, "short_name"),
        ({"short_description": "y" * 81}, "short_description"),
        ({"version": "1.0"}, "version"),
        ({"accent_color": "green"}, "accent_color"),
    ],
)
def test_invalid_settings_are_refused_naming_the_field(tmp_path: Path, change: dict[str, str], says: str) -> None:
    with pytest.raises(ManifestError, match=says):
        build_package(replace(CONFIG, **change), tmp_path / "p.zip")  # type: ignore[arg-type]
    assert not (tmp_path / "p.zip").exists()


def test_the_cli_writes_the_package_into_a_directory_or_to_a_named_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.cli.commands import main

    for name in [k for k in __import__("os").environ if k.startswith("SIGNOFF_") and app_setting(k)]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    args = ["teams", "manifest", "--app-id", APP_ID, "--endpoint", "https://bot.shop.example/teams/messages"]
    assert main([*args, "--out", str(tmp_path / "dist")]) == 0
    with zipfile.ZipFile(tmp_path / "dist" / "signoff-teams.zip") as z:
        doc = json.loads(z.read("manifest.json"))
    assert doc["bots"][0]["botId"] == APP_ID and doc["validDomains"] == ["bot.shop.example"]
    assert doc["developer"]["websiteUrl"] == "https://bot.shop.example"
    assert main([*args, "--out", str(tmp_path / "named.zip")]) == 0 and (tmp_path / "named.zip").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--endpoint", "https://bot.shop.example/teams/messages"], "SIGNOFF_TEAMS_APP_ID"),
        (["--app-id", APP_ID], "SIGNOFF_TEAMS_MESSAGING_ENDPOINT"),
        (["--app-id", "not-a-guid", "--endpoint", "https://bot.shop.example/teams/messages"], "GUID"),
        (["--app-id", APP_ID, "--endpoint", "http://bot.shop.example/teams/messages"], "https"),
    ],
)
def test_the_cli_refuses_a_missing_or_bad_setting_in_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    from bot.cli.commands import main

    for name in [k for k in __import__("os").environ if k.startswith("SIGNOFF_") and app_setting(k)]:
        monkeypatch.delenv(name)
    assert main(["teams", "manifest", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []
