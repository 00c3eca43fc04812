"""``SIGNOFF_PEOPLE_FILE``: who the staff are and which Slack and Teams users are which customers.

YAML or JSON (YAML reads both)::

    staff:
      - {id: S-1, name: Priya Raman, role: rep, slack_user_id: U01PRIYA, email: priya@shop.example}
      - {id: S-3, name: Grace Liu, role: supervisor, teams_user_id: 5f0c…}
    customers:
      - {customer_id: "gid://shopify/Customer/7", slack_user_id: U07MAYA}

Staff are not the shop's customers; a customer link names the shop's customer id (a Shopify
GID, its bare number, or a sandbox id). Unknown keys are an error naming them; so are a repeated
staff id or a Slack or Teams user listed twice. The file is checked whole before anything is
seeded (:func:`load_people_file`), and seeding replaces the previous seed
(``storage.identities.People.replace``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agent.errors import ConfigError
from storage.identities import CustomerLink, PeopleSeed, Staff

SETTING = "SIGNOFF_PEOPLE_FILE"
_Id = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
_CustomerId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")]
_Name = Annotated[str, StringConstraints(min_length=1, max_length=255)]
_Email = Annotated[str, StringConstraints(max_length=320, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]
_SlackUser = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,20}$")]
_TeamsUser = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"),
    AfterValidator(str.lower),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class StaffEntry(_Strict):
    """A rep or supervisor, as in the dataset's ``staff``."""

    id: _Id
    name: _Name
    role: Literal["rep", "supervisor"]
    slack_user_id: _SlackUser | None = None
    teams_user_id: _TeamsUser | None = None
    email: _Email | None = None


class CustomerEntry(_Strict):
    """A shop customer's Slack and/or Teams user."""

    customer_id: _CustomerId
    slack_user_id: _SlackUser | None = None
    teams_user_id: _TeamsUser | None = None


class PeopleFile(_Strict):
    """The whole file."""

    staff: list[StaffEntry] = Field(default_factory=list)
    customers: list[CustomerEntry] = Field(default_factory=list)


def _where(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "the file"


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if err["type"] == "extra_forbidden":
        unknown = sorted({_where(e["loc"]) for e in exc.errors() if e["type"] == "extra_forbidden"})
        return f"unknown keys: {', '.join(unknown)}"
    return f"{_where(err['loc'])}: {err['msg']}"


def _repeats(people: PeopleFile) -> str | None:
    seen: dict[tuple[str, str], str] = {}
    entries = [(f"staff[{i}]", m.slack_user_id, m.teams_user_id) for i, m in enumerate(people.staff)]
    entries += [(f"customers[{i}]", c.slack_user_id, c.teams_user_id) for i, c in enumerate(people.customers)]
    for where, slack, teams in entries:
        for key in (("Slack user", slack), ("Teams user", teams)):
            if key[1] is None:
                continue
            if key in seen:
                return f"{where}: {key[0]} {key[1]!r} is also {seen[key]}'s"  # type: ignore[index]
            seen[key] = where  # type: ignore[index]
    ids = [m.id for m in people.staff]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    return f"staff: id {twice[0]!r} appears more than once" if twice else None


def parse_people(text: str) -> PeopleSeed:
    """The people in ``text`` (YAML or JSON); ``ValueError`` with one line saying what is wrong."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML or JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(raw, dict):
        raise ValueError("must be a mapping with `staff` and/or `customers`")
    try:
        people = PeopleFile.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_problem(exc)) from None
    if (repeat := _repeats(people)) is not None:
        raise ValueError(repeat)
    return PeopleSeed(
        staff=tuple(Staff(**m.model_dump()) for m in people.staff),
        customers=tuple(CustomerLink(**c.model_dump()) for c in people.customers),
    )


def load_people_file(path: Path) -> PeopleSeed:
    """The people in ``path``; :class:`ConfigError` naming the setting and the file otherwise."""
    try:
        return parse_people(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{SETTING}: {path}: cannot read it ({type(exc).__name__})") from None
    except ValueError as exc:
        raise ConfigError(f"{SETTING}: {path}: {exc}") from None
