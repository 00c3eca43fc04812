"""The reply as a person reads it: the customer's new words, without the quoted history.

Neither maintained extractor we compared handled our cases (README "Email"):
``mail-parser-reply`` drops bottom-posted and inline answers and misses Russian, Korean and
Chinese headers; ``quotequail`` misses most non-English headers and Outlook blocks under a
rule; ``talon`` does not install on current Python. So the rules are ours, small and kept as
data: the tables below, one test each (tests/test_email_replies.py).

One pass over the lines, with string tests only (no regular expressions), bounded look-ahead
(three lines for a wrapped quote header, four for an Outlook block): linear in the text.
When a line is not clearly history it stays: losing the customer's words is worse than
keeping a quote line.
"""

from __future__ import annotations

#: The extracted reply is capped (never the raw body): the model reads at most this much.
MAX_TEXT = 4000
#: A quote header is short; longer lines (or joins) are never taken for one.
MAX_HEAD = 400

#: Quote headers ("On … wrote:"), per language: (must contain, must end with), compared on
#: the lower-cased header with all whitespace removed and full-width colons made ASCII. A
#: header also holds a digit (its date) or an address, and may be wrapped over up to three lines.
QUOTE_HEADS: tuple[tuple[str, str, str], ...] = (
    ("en", "", "wrote:"),
    ("fr", "", "aécrit:"),
    ("de", "schrieb", ":"),
    ("it", "", "hascritto:"),
    ("es", "", "escribió:"),
    ("pt", "", "escreveu:"),
    ("nl", "schreef", ":"),
    ("nl", "", "geschreven:"),
    ("sv/da/no", "skrev", ":"),
    ("pl", "napisał", ":"),
    ("ru", "написал", ":"),
    ("uk", "написав", ":"),
    ("cs", "napsal", ":"),
    ("fi", "", "kirjoitti:"),
    ("tr", "", "yazdı:"),
    ("ru", "", "пишет:"),
    ("any", "@", ">:"),  # "2022年1月1日(金) 9:00 Name <a@b>:" (Gmail ja/ru), Yandex, Mail.ru: date, name, address
    ("ja", "", "書きました:"),
    ("ko", "", "작성:"),
    ("zh", "", "写道:"),
    ("zh", "", "寫道:"),
)

#: The first field of an Outlook-style header block ("From:", "*Von:*", "Od:"), per language.
FROM_LABELS = frozenset(
    {
        "from",
        "von",
        "van",
        "od",
        "fra",
        "från",
        "de",
        "da",
        "mittente",
        "от",
        "发件人",
        "寄件者",
        "差出人",
        "보낸 사람",
        "lähettäjä",
        "kimden",
    }
)
#: The fields that follow it within four lines (sent, date, to, subject), per language.
NEXT_LABELS = frozenset(
    {
        "sent", "date", "to", "subject", "cc",
        "gesendet", "datum", "an", "betreff",
        "verzonden", "aan", "onderwerp",
        "wysłano", "data", "do", "temat",
        "sendt", "til", "emne", "skickat", "till", "ämne",
        "envoyé", "à", "objet",
        "inviato", "a", "oggetto", "enviado", "para", "asunto", "assunto",
        "отправлено", "дата", "кому", "тема",
        "发送时间", "收件人", "主题", "送信日時", "宛先", "件名", "보낸 날짜", "받는 사람", "제목",
        "lähetetty", "vastaanottaja", "aihe", "gönderildi", "kime", "konu",
    }
)  # fmt: skip

#: Lines that open an original or forwarded message, compared lower-cased without dashes,
#: underscores, asterisks and surrounding spaces.
HISTORY_MARKERS = frozenset(
    {
        "original message", "forwarded message", "begin forwarded message:",
        "anfang der weitergeleiteten nachricht:", "début du message réexpédié :", "inizio messaggio inoltrato:",
        "comienzo del mensaje reenviado:", "begin doorgestuurd bericht:", "начало переадресованного сообщения:",
        "ursprüngliche nachricht", "weitergeleitete nachricht",
        "message d'origine", "message transféré", "message original",
        "messaggio originale", "messaggio inoltrato", "mensaje original", "mensaje reenviado",
        "mensagem original", "mensagem encaminhada", "oorspronkelijk bericht", "doorgestuurd bericht",
        "originalmeddelande", "vidarebefordrat meddelande", "oprindelig meddelelse", "videresendt meddelelse",
        "wiadomość oryginalna", "przekazana wiadomość", "исходное сообщение", "пересылаемое сообщение",
        "原始邮件", "転送されたメッセージ", "元のメッセージ", "원본 메시지", "전달된 메시지",
    }
)  # fmt: skip

#: Whole lines that phones and webmails add under the reply; dropped, nothing else is.
DEVICE_LINES = frozenset(
    {
        "sent from my iphone", "sent from my ipad", "sent from my android", "sent from my phone",
        "sent from yahoo mail for iphone", "sent from yahoo mail on android", "sent from outlook for ios",
        "get outlook for ios", "get outlook for android", "sent from mail for windows",
        "von meinem iphone gesendet", "envoyé de mon iphone", "inviato da iphone", "enviado desde mi iphone",
        "verzonden vanaf mijn iphone", "skickat från min iphone", "sendt fra min iphone",
        "wysłane z iphone'a", "отправлено с iphone", "отправлено из мобильной яндекс.почты",
        "отправлено из мобильной почты mail.ru", "iphoneから送信",
    }
)  # fmt: skip


#: What every quote header ends with or holds, for a one-call test of a line before the table.
_ENDS = tuple(end for _lang, want, end in QUOTE_HEADS if not want)
_WANTED = tuple((want, end) for _lang, want, end in QUOTE_HEADS if want)
_WANTS = tuple(want for want, _end in _WANTED)


def _compact(text: str) -> str:
    """Lower case, no whitespace, ASCII colons: how quote headers are compared."""
    return "".join(text.lower().split()).replace("：", ":")


def quote_head(text: str) -> bool:
    """Whether ``text`` (one line, or up to three joined) is a quote header of the table."""
    if len(text) > MAX_HEAD or not ("@" in text or any(c.isdigit() for c in text)):
        return False
    c = _compact(text)
    return c.endswith(_ENDS) or any(c.endswith(end) and want in c for want, end in _WANTED)


def _label(line: str) -> str:
    """The field label of ``From: x`` / ``*From:* x`` / ``**Von:** x`` (lower case), else ""."""
    head, colon, _rest = line.strip().lstrip("*").partition(":")
    if not colon or len(head) > 20:
        return ""
    return " ".join(head.strip("* \t").lower().split())


def _outlook_block(lines: list[str], i: int, first: int) -> bool:
    """An Outlook header block starts at line ``i``: a From label, then another field within
    four, and it reads as a header: the From line holds an address or a field a date (digit).
    Never the mail's first line: a customer may begin "From: my neighbour / To: you guys"."""
    if i <= first or _label(lines[i]) not in FROM_LABELS:
        return False
    fields = [line for line in lines[i + 1 : i + 5] if _label(line) in NEXT_LABELS]
    return bool(fields) and ("@" in lines[i] or any(c.isdigit() for line in fields for c in line))


def _marker(line: str) -> bool:
    core = line.strip().strip("-_*= ").strip().lower()
    return core in HISTORY_MARKERS or core.startswith("begin forwarded message")


def _head_start(lines: list[str], j: int) -> int | None:
    """If a quote header ends at line ``j``, the line it starts on (wrapped over up to three)."""
    end = lines[j].strip()
    if not end or end.startswith(">") or not end.endswith((":", "：")):
        return None
    # The three lines that end here must end as a header does or hold a header's word: a
    # cheap test that turns away most lines ending in ':' (an 'a:' on every line stays fast).
    window = _compact(" ".join(lines[max(j - 2, 0) : j + 1]))
    if not window.endswith(_ENDS):
        for want in _WANTS:
            if want in window:
                break
        else:
            return None
    for k in range(3):
        if j - k < 0 or lines[j - k].lstrip().startswith(">"):
            return None
        if quote_head(" ".join(line.strip() for line in lines[j - k : j + 1])):
            start = j - k
            # A wrapped address ("… Support <" / "support@…> wrote:") starts a line before.
            while start > max(j - 2, 0) and _continues(lines[start - 1], lines[start]):
                start -= 1
            return start
    return None


def _continues(before: str, line: str) -> bool:
    """``line`` carries on ``before``: a header wrapped inside its name or address, or after
    its date ("Am 3. Juni 2025 um 10:00 Uhr schrieb" / "Fernway <" / "a@b>:"). A line that
    ends a sentence is the customer's."""
    b, first = before.strip(), line.strip()[:1]
    if not b or b.endswith((".", "!", "?", "。", "！", "？")) or len(b) > MAX_HEAD:
        return False
    return b.endswith(("<", "(")) or first in "<(" or first.islower() or any(c.isdigit() for c in b)


def _rule(line: str) -> bool:
    s = line.strip()
    return len(s) >= 10 and (s.strip("_") == "" or s.strip("-") == "")


def _ends_history(lines: list[str], i: int, first: int) -> bool:
    """History below here is not the customer's: an Outlook block, a forwarded or original
    message marker, or a signature delimiter."""
    line = lines[i]
    if line.rstrip() == "--" or _marker(line) or _outlook_block(lines, i, first):
        return True
    if _rule(line):
        after = next((k for k in range(i + 1, min(i + 4, len(lines))) if lines[k].strip()), None)
        return after is not None and _outlook_block(lines, after, first)
    return False


def _next_text(lines: list[str]) -> list[int]:
    """For each line, the index of the next non-blank line after it (``len(lines)``: none).
    One backward pass."""
    nxt = [len(lines)] * len(lines)
    for j in range(len(lines) - 2, -1, -1):
        nxt[j] = j + 1 if lines[j + 1].strip() else nxt[j + 1]
    return nxt


def _quote_heads(lines: list[str]) -> list[bool]:
    """Which lines are quote headers. A header naming no address is one only when quoted
    lines (or nothing) follow it: "On 3 June my neighbour said she wrote:" above the
    customer's own words is theirs."""
    drop = [False] * len(lines)
    nxt = _next_text(lines)
    for j in range(len(lines)):
        start = _head_start(lines, j) if lines[j].rstrip().endswith((":", "：")) else None
        if start is None:
            continue
        after = nxt[j]
        named = any("@" in lines[k] for k in range(start, j + 1))
        if named or after == len(lines) or lines[after].lstrip().startswith(">"):
            for k in range(start, j + 1):
                drop[k] = True
    return drop


def extract_reply(text: str) -> str:
    """The customer's new words in ``text``: quoted lines, quote headers, Outlook and forwarded
    history, a "-- " signature and device lines removed; answers written below or between
    quoted lines kept. When nothing is left, the whole text (tidied): the customer's words
    are never lost to a rule. Capped at ``MAX_TEXT`` after extraction."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").replace("\xa0", " ").split("\n")
    drop = _quote_heads(lines)
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    kept: list[str] = []
    for i, line in enumerate(lines):
        if _ends_history(lines, i, first):
            break
        stripped = line.strip()
        if drop[i] or stripped.startswith(">") or stripped.lower().rstrip(".") in DEVICE_LINES:
            continue
        kept.append(line)
    return _tidy(kept) or _tidy(lines)


def _tidy(lines: list[str]) -> str:
    """Blank runs become one blank line; capped with a visible mark."""
    out: list[str] = []
    for line in (raw.strip() for raw in lines):
        if line or (out and out[-1]):
            out.append(line)
    reply = "\n".join(out).strip()
    return reply if len(reply) <= MAX_TEXT else reply[: MAX_TEXT - 2].rstrip() + " …"


__all__ = ["MAX_TEXT", "QUOTE_HEADS", "extract_reply", "quote_head"]
