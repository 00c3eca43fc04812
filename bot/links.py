"""Text we did not write, made link-free for every face.

The model's answer (which a customer's text may have steered) and anything an outsider
wrote must never reach a person as a live link: a face shows it as words. :func:`unlink`
turns Markdown links (``[x](https://…)``, images too) and Slack links (``<https://…|x>``)
into their label followed by the address in brackets, then breaks every address so no
client links it on its own: a zero-width space after the scheme (``https:​//``) and after
``www`` / ``mailto`` and their kin. The text still reads the same.
"""

from __future__ import annotations

import re

ZWSP = "\u200b"
# Neither the label nor the target spans a "[": a run of "[[[[" is scanned once, not per start.
_MD_LINK = re.compile(r"!?\[([^\[\]\n]{0,1000})\]\(\s*<?([^()\s<>\[\]]{0,2000})>?(?:\s+\"[^\"\n]{0,200}\")?\s*\)")
_SLACK_LINK = re.compile(r"<((?:[a-z][a-z0-9+.-]{1,20}:|www\.)[^|<>\s]{0,2000})(?:\|([^<>\n]{0,1000}))?>", re.I)
_BARE = re.compile(r"(?i)\b(www|mailto|tel|sip|file|javascript|data)([.:])")


def unlink(text: str) -> str:
    """``text`` with every link shown as words: ``[x](https://e.example)`` → ``x (https:​//e.example)``."""
    text = _MD_LINK.sub(lambda m: _shown(m.group(1), m.group(2)), text)
    text = _SLACK_LINK.sub(lambda m: _shown(m.group(2) or "", m.group(1)), text)
    text = text.replace("://", ":" + ZWSP + "//")
    return _BARE.sub(lambda m: m.group(1) + ZWSP + m.group(2), text)


def _shown(label: str, target: str) -> str:
    label = label.strip()
    if not target or target == label:
        return label or target
    return f"{label} ({target})" if label else target
