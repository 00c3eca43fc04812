"""``signoff teams manifest``: the Teams app package (manifest.json and two icons, zipped)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bot.settings import Settings
from bot.teams.manifest import ManifestConfig, ManifestError, build_package

PACKAGE_NAME = "signoff-teams.zip"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    teams = sub.add_parser("teams", help="Microsoft Teams")
    teams_sub = teams.add_subparsers(dest="teams_command", required=True)
    m = teams_sub.add_parser("manifest", help="write the Teams app package to upload in Teams")
    m.add_argument(
        "--out", type=Path, default=Path("."), help=f"a directory (gets {PACKAGE_NAME}) or a .zip file; default: ."
    )
    m.add_argument("--app-id", help="the bot's Entra app id (default: SIGNOFF_TEAMS_APP_ID)")
    m.add_argument("--endpoint", help="public https URL of /teams/messages (default: SIGNOFF_TEAMS_MESSAGING_ENDPOINT)")
    m.add_argument("--developer", default="signoff", help="developer name shown in Teams (≤32 characters)")
    m.add_argument("--website", help="developer website (https; default: the endpoint's origin)")
    m.add_argument("--privacy", help="privacy statement URL (default: the website)")
    m.add_argument("--terms", help="terms of use URL (default: the website)")
    m.add_argument("--version", dest="app_version", default="1.0.0", help="the package version, e.g. 1.0.0")


def package_path(out: Path) -> Path:
    """``--out``: a ``.zip`` path as given, anything else a directory that gets the package."""
    return out if out.suffix.lower() == ".zip" else out / PACKAGE_NAME


def manifest(settings: Settings, args: argparse.Namespace) -> int:
    bot_id = args.app_id or settings.signoff_teams_app_id
    endpoint = args.endpoint or settings.signoff_teams_messaging_endpoint
    if not bot_id:
        print("signoff: SIGNOFF_TEAMS_APP_ID: required (or --app-id)", file=sys.stderr)
        return 2
    if not endpoint:
        print("signoff: SIGNOFF_TEAMS_MESSAGING_ENDPOINT: required (or --endpoint)", file=sys.stderr)
        return 2
    website = args.website or _origin(endpoint)
    config = ManifestConfig(
        bot_id=bot_id,
        messaging_endpoint=endpoint,
        developer_name=args.developer,
        website_url=website,
        privacy_url=args.privacy or website,
        terms_url=args.terms or website,
        version=args.app_version,
    )
    try:
        out = build_package(config, package_path(args.out))
    except ManifestError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} (bot {bot_id}, endpoint {endpoint}); upload it in Teams: Apps → Manage your apps")
    return 0


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if rest else url
