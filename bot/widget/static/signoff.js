/* signoff chat widget — one tag: <script src="https://HOST/widget/signoff.js" async></script>
 *
 * A Web Component (<signoff-chat>) in a Shadow DOM, no framework, no third-party request.
 * Everything the server sends is rendered with text nodes (textContent), never as HTML, and no
 * link is ever made from it. Confirm / Decline are drawn from the runtime's confirmation record
 * (id, version, summary), never from the model's words. The session secret is an httpOnly
 * cookie on the widget's own origin, or held in this closure's memory (cross-site, app proxy):
 * never in localStorage, never in a URL.
 */
(() => {
  "use strict";

  /* Every string a person reads, in one place. */
  const STRINGS = {
    launcher: "Chat with us",
    title: "Support",
    close: "Close chat",
    person: "Talk to a person",
    personMessage: "I'd like to talk to a person, please.",
    log: "Conversation",
    inputLabel: "Your message",
    placeholder: "Ask about an order, a return, our policies…",
    send: "Send",
    you: "You",
    agent: "Support",
    says: (who, text) => `${who}: ${text}`,
    sending: "Sending…",
    working: "Support is writing…",
    offline: "Connection lost. Reconnecting…",
    failed: "Your message was not sent. Please try again.",
    tooMany: "You are sending messages too fast. Please wait a minute.",
    busy: "We are very busy. Please try again in a moment.",
    confirmTitle: "Please confirm",
    confirm: "Confirm",
    decline: "Decline",
    confirmation: {
      pending: "Waiting for your answer.",
      confirmed: "You confirmed this.",
      consumed: "You confirmed this.",
      declined: "You declined this.",
      superseded: "This request was replaced by a newer one.",
    },
    approvalTitle: "A teammate needs to approve this",
    approval: {
      pending: "Waiting for a teammate…",
      approved: "A teammate approved this.",
      rejected: "A teammate declined this.",
      expired: "No teammate decided in time; nothing was done.",
      superseded: "This request was replaced by a newer one.",
    },
    verifyTitle: "See your orders",
    verifyIntro: "To see or change an order, tell us the order number and the email on it.",
    order: "Order number",
    email: "Email",
    verify: "Verify",
    useCode: "Email me a code instead",
    useOrder: "Use my order number instead",
    sendCode: "Email me a code",
    code: "Code from the email",
    enterCode: "Enter code",
    verifyOutcome: {
      verified: "Thank you, you are verified.",
      already: "You are already verified.",
      not_verified: "We could not match that order and email. Please check both.",
      limit: "Too many tries. Please try again in an hour.",
      code_sent: "If that email is on file, a code is on its way.",
      code_bad: "That code is not right, or it expired.",
      code_locked: "Too many wrong codes. Please ask for a new one later.",
    },
    aPerson: "A person from our team",
    handoff: {
      waiting: () => "A person from our team will join this chat.",
      taken: (name) => `${name} has joined the chat.`,
      returned: (name) => `${name} has left the chat; Support will answer again.`,
      closed: () => "This conversation is closed. Write again any time.",
    },
    notice: {
      verified: "You are verified. You can now ask about your orders.",
      limit: "You have reached today's limit for this chat. A person can still help by email.",
    },
  };

  const CSS = `
    :host { all: initial; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111827; }
    * { box-sizing: border-box; }
    .sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
    button, input, textarea { font: inherit; }
    button { cursor: pointer; border-radius: 8px; border: 2px solid transparent; padding: 8px 12px; min-height: 44px; }
    :focus-visible { outline: 3px solid #1d4ed8; outline-offset: 2px; }
    .launcher { position: fixed; right: 16px; bottom: 16px; z-index: 2147483000; background: #1d4ed8; color: #fff;
      border-radius: 999px; padding: 12px 20px; box-shadow: 0 2px 8px rgba(0,0,0,.3); }
    .panel { position: fixed; right: 8px; bottom: 80px; z-index: 2147483000; width: min(400px, calc(100vw - 16px));
      height: min(600px, calc(100vh - 96px)); display: flex; flex-direction: column; background: #fff;
      border: 1px solid #6b7280; border-radius: 12px; box-shadow: 0 4px 24px rgba(0,0,0,.25); overflow: hidden; }
    .panel[hidden] { display: none; }
    header { display: flex; align-items: center; gap: 8px; padding: 8px 12px; background: #111827; color: #fff; }
    header h2 { flex: 1; font-size: 16px; margin: 0; }
    header button { background: #fff; color: #111827; }
    .log { flex: 1; overflow-y: auto; padding: 12px; display: flex; flex-direction: column; gap: 8px; }
    .msg { max-width: 85%; padding: 8px 12px; border-radius: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
    .msg .who { display: block; font-size: 13px; font-weight: 600; }
    .msg.user { align-self: flex-end; background: #1d4ed8; color: #fff; }
    .msg.answer, .msg.person, .msg.notice { align-self: flex-start; background: #f3f4f6; color: #111827; }
    .msg.person { border-left: 4px solid #166534; }
    .msg.notice { font-style: italic; }
    .card { align-self: stretch; border: 2px solid #374151; border-radius: 10px; padding: 10px; background: #fff; }
    .card h3 { font-size: 14px; margin: 0 0 4px; }
    .card p { margin: 4px 0; white-space: pre-wrap; overflow-wrap: anywhere; }
    .card .state { color: #374151; font-size: 14px; }
    .card .actions { display: flex; gap: 8px; flex-wrap: wrap; }
    .yes { background: #166534; color: #fff; }
    .no { background: #fff; color: #991b1b; border-color: #991b1b; }
    .status { min-height: 1.4em; padding: 0 12px; color: #374151; font-size: 14px; }
    .verify { border-top: 1px solid #d1d5db; padding: 8px 12px; }
    .verify[hidden] { display: none; }
    .verify summary { cursor: pointer; font-weight: 600; min-height: 32px; }
    .verify form { display: grid; gap: 6px; margin-top: 6px; }
    .verify form[hidden] { display: none; }
    .verify .link { background: none; color: #1d4ed8; text-decoration: underline; padding: 4px 0; min-height: 32px; justify-self: start; }
    input, textarea { border: 1px solid #4b5563; border-radius: 8px; padding: 8px; color: #111827; background: #fff; width: 100%; }
    .composer { display: flex; gap: 8px; padding: 8px 12px 12px; border-top: 1px solid #d1d5db; }
    .composer textarea { resize: none; height: 44px; }
    .send { background: #1d4ed8; color: #fff; }
    @media (prefers-reduced-motion: no-preference) { .panel { transition: opacity .15s ease-out; } }
    @media (prefers-reduced-motion: reduce) { * { transition: none !important; animation: none !important; scroll-behavior: auto !important; } }
  `;

  const me = document.currentScript;
  const src = me && me.src ? new URL(me.src, location.href) : new URL("/widget/signoff.js", location.href);
  const API = src.href.replace(/\/signoff\.js(?:[?#].*)?$/, "") + "/api";
  const SAME_ORIGIN = new URL(API).origin === location.origin;
  let token = me ? me.getAttribute("data-token") : null; // a site's short-lived JWT for its logged-in customer

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  function newId() {
    if (crypto.randomUUID) return crypto.randomUUID();
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  class SignoffChat extends HTMLElement {
    constructor() {
      super();
      this.sid = null; // page-held session secret (memory only)
      this.last = { seq: 0, k: null }; // the last frame shown: resumes the stream after it
      this.msgs = new Map(); // message id -> { node, body, text }
      this.pendingUser = new Map(); // client id -> bubble shown before its echo
      this.cards = new Map(); // confirmation / approval id -> card
      this.root = this.attachShadow({ mode: "open" });
      const sheet = new CSSStyleSheet();
      sheet.replaceSync(CSS);
      this.root.adoptedStyleSheets = [sheet];
      this.build();
    }

    build() {
      const r = this.root;
      this.launcher = el("button", { class: "launcher", type: "button", "aria-expanded": "false", "aria-controls": "panel", text: STRINGS.launcher });
      this.closeBtn = el("button", { type: "button", text: "×", "aria-label": STRINGS.close });
      this.personBtn = el("button", { type: "button", class: "person", text: STRINGS.person });
      this.log = el("div", { class: "log", tabindex: "0", role: "region", "aria-label": STRINGS.log });
      this.live = el("div", { class: "sr", role: "status", "aria-live": "polite" });
      this.status = el("div", { class: "status", "aria-live": "polite" });
      this.input = el("textarea", { id: "msg", rows: "1", placeholder: STRINGS.placeholder, maxlength: "4000" });
      const label = el("label", { for: "msg", class: "sr", text: STRINGS.inputLabel });
      this.composer = el("form", { class: "composer" }, label, this.input, el("button", { class: "send", type: "submit", text: STRINGS.send }));
      this.verifyBox = this.buildVerify();
      this.panel = el("section", { id: "panel", class: "panel", role: "dialog", "aria-labelledby": "title", hidden: "" },
        el("header", {}, el("h2", { id: "title", text: STRINGS.title }), this.personBtn, this.closeBtn),
        this.log, this.live, this.status, this.verifyBox, this.composer);
      r.append(this.launcher, this.panel);
      this.launcher.addEventListener("click", () => this.toggle(true));
      this.closeBtn.addEventListener("click", () => this.toggle(false));
      this.panel.addEventListener("keydown", (e) => { if (e.key === "Escape") this.toggle(false); });
      this.personBtn.addEventListener("click", () => this.send(STRINGS.personMessage, true));
      this.composer.addEventListener("submit", (e) => { e.preventDefault(); this.submit(); });
      this.input.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); this.submit(); }
      });
    }

    field(id, labelText, type, autocomplete) {
      return [el("label", { for: id, text: labelText }), el("input", { id, type, autocomplete, required: "" })];
    }

    buildVerify() {
      const orderForm = el("form", { class: "by-order" }, el("p", { text: STRINGS.verifyIntro }),
        ...this.field("v-order", STRINGS.order, "text", "off"), ...this.field("v-email", STRINGS.email, "email", "email"),
        el("button", { type: "submit", class: "send", text: STRINGS.verify }), el("button", { type: "button", class: "link to-code", text: STRINGS.useCode }));
      const codeForm = el("form", { class: "by-code", hidden: "" },
        ...this.field("c-email", STRINGS.email, "email", "email"),
        el("button", { type: "button", class: "send ask-code", text: STRINGS.sendCode }),
        ...this.field("c-code", STRINGS.code, "text", "one-time-code"),
        el("button", { type: "submit", class: "send", text: STRINGS.enterCode }), el("button", { type: "button", class: "link to-order", text: STRINGS.useOrder }));
      const box = el("details", { class: "verify", hidden: "" }, el("summary", { text: STRINGS.verifyTitle }), orderForm, codeForm);
      const value = (id) => box.querySelector(`#${id}`).value;
      orderForm.addEventListener("submit", (e) => { e.preventDefault(); this.verify({ order: value("v-order"), email: value("v-email") }); });
      codeForm.addEventListener("submit", (e) => { e.preventDefault(); this.verify({ code: value("c-code") }); });
      codeForm.querySelector(".ask-code").addEventListener("click", () => this.verify({ email: value("c-email") }));
      const swap = (show, hide) => { hide.hidden = true; show.hidden = false; show.querySelector("input").focus(); };
      orderForm.querySelector(".to-code").addEventListener("click", () => swap(codeForm, orderForm));
      codeForm.querySelector(".to-order").addEventListener("click", () => swap(orderForm, codeForm));
      return box;
    }

    connectedCallback() { this.start(); }

    /* Sign a logged-in customer in with a JWT from the site's backend (kept in memory only). */
    async signin(jwt) { token = jwt; await this.open(); }

    toggle(open) {
      this.panel.hidden = !open;
      this.launcher.setAttribute("aria-expanded", String(open));
      if (open) this.input.focus(); else this.launcher.focus();
      if (open) this.scroll();
    }

    headers(extra) {
      const h = Object.assign({}, extra || {});
      if (this.sid) h["X-Signoff-Session"] = this.sid;
      return h;
    }

    call(path, body, extraHeaders) {
      return fetch(API + path, {
        method: "POST",
        headers: this.headers(Object.assign({ "Content-Type": "application/json" }, extraHeaders || {})),
        body: JSON.stringify(body || {}),
        credentials: SAME_ORIGIN ? "same-origin" : "omit",
        cache: "no-store",
      });
    }

    async start() {
      if (this.started) return;
      this.started = true;
      await this.open();
      this.follow();
    }

    async open() {
      const auth = token ? { Authorization: `Bearer ${token}` } : {};
      for (let wait = 500; ; wait = Math.min(wait * 2, 10000)) {
        try {
          const r = await this.call("/session", {}, auth);
          if (r.ok) {
            const s = await r.json();
            if (s.session) this.sid = s.session;
            this.verifyBox.hidden = Boolean(s.customer);
            return;
          }
        } catch (_) { /* offline: try again */ }
        this.say(STRINGS.offline);
        await new Promise((res) => setTimeout(res, wait));
      }
    }

    /* The event stream: resumed after the last frame shown, so nothing shows twice. */
    async follow() {
      for (;;) {
        try {
          const h = this.headers({ Accept: "text/event-stream" });
          if (this.last.seq) h["Last-Event-ID"] = this.last.k === null ? `${this.last.seq}` : `${this.last.seq}.${this.last.k}`;
          const r = await fetch(API + "/stream", { headers: h, credentials: SAME_ORIGIN ? "same-origin" : "omit", cache: "no-store" });
          if (r.status === 401) { await this.open(); continue; }
          if (!r.ok || !r.body) throw new Error(String(r.status));
          this.say("");
          await this.read(r.body.getReader());
        } catch (_) {
          this.say(STRINGS.offline);
        }
        await new Promise((res) => setTimeout(res, 1000));
      }
    }

    async read(reader) {
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let id = null;
          let name = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (id !== null && data.length) this.frame(id, name, JSON.parse(data.join("\n")));
        }
      }
    }

    seen(seq, k) {
      const l = this.last;
      if (seq !== l.seq) return seq < l.seq;
      return l.k === null || (k !== null && k <= l.k);
    }

    /* One frame: its SSE id is "seq" (a whole event) or "seq.k" (piece k of a message). */
    frame(id, name, f) {
      const [head, tail] = id.split(".");
      const seq = Number(head);
      const k = tail === undefined ? null : Number(tail);
      if (this.seen(seq, k)) return;
      this.last = { seq, k };
      switch (name) {
        case "delta": this.piece(f); break;
        case "message": this.message(f); break;
        case "confirmation": this.confirmation(f); break;
        case "approval": this.approval(f); break;
        case "handoff": this.handoff(f); break;
        case "notice": this.bubble("notice", null, (STRINGS.notice[f.code] || "")); break;
        default: break;
      }
      this.scroll();
    }

    bubble(kind, who, text) {
      const body = el("span", { class: "text" });
      body.append(document.createTextNode(text));
      const node = el("div", { class: `msg ${kind}` });
      if (who) node.append(el("span", { class: "who", text: who }));
      node.append(body);
      this.log.append(node);
      return { node, body };
    }

    who(f) { return f.from === "person" ? (f.name || STRINGS.aPerson) : f.from === "customer" ? STRINGS.you : STRINGS.agent; }

    /* A piece of a message still arriving: shown as it comes. */
    piece(f) {
      let m = this.msgs.get(f.id);
      if (!m) { m = this.bubble(f.from === "person" ? "person" : "answer", null, ""); m.text = ""; this.msgs.set(f.id, m); }
      m.text += f.text;
      m.body.textContent = m.text; // text only: markup in it stays characters
    }

    /* A whole message: completes its pieces, or is shown at once. */
    message(f) {
      if (f.from === "customer") {
        const shown = this.pendingUser.get(f.id);
        if (shown) { this.pendingUser.delete(f.id); return; }
        this.bubble("user", STRINGS.you, f.text);
        return;
      }
      const who = this.who(f);
      const kind = f.from === "person" ? "person" : "answer";
      let m = this.msgs.get(f.id);
      if (!m) { m = this.bubble(kind, who, ""); this.msgs.set(f.id, m); }
      else if (!m.node.querySelector(".who")) m.node.prepend(el("span", { class: "who", text: who }));
      m.text = f.text;
      m.body.textContent = f.text;
      this.announce(STRINGS.says(who, f.text));
      this.say("");
    }

    handoff(f) {
      const text = STRINGS.handoff[f.state] ? STRINGS.handoff[f.state](f.name || STRINGS.aPerson) : "";
      if (text) { this.bubble("notice", null, text); this.announce(text); }
    }

    card(id, title) {
      let c = this.cards.get(id);
      if (!c) {
        c = el("div", { class: "card", role: "group", "aria-label": title });
        this.cards.set(id, c);
        this.log.append(c);
      }
      c.replaceChildren(el("h3", { text: title }));
      return c;
    }

    confirmation(f) {
      const c = this.card(f.id, STRINGS.confirmTitle);
      c.append(el("p", { text: f.summary }));
      const state = el("p", { class: "state", text: STRINGS.confirmation[f.state] || f.state });
      c.append(state);
      if (f.state === "pending") {
        const yes = el("button", { type: "button", class: "yes", text: STRINGS.confirm });
        const no = el("button", { type: "button", class: "no", text: STRINGS.decline });
        const answer = async (verb) => {
          yes.disabled = no.disabled = true;
          const r = await this.call(`/confirmations/${encodeURIComponent(f.id)}/${verb}`, { version: f.version }).catch(() => null);
          if (!r || !r.ok) { yes.disabled = no.disabled = false; this.say(STRINGS.failed); }
        };
        yes.addEventListener("click", () => answer("confirm"));
        no.addEventListener("click", () => answer("decline"));
        c.append(el("div", { class: "actions" }, yes, no));
      }
      this.announce(`${STRINGS.confirmTitle}: ${f.summary}`);
    }

    approval(f) {
      const c = this.card(f.id, STRINGS.approvalTitle);
      const text = STRINGS.approval[f.state] || f.state;
      c.append(el("p", { class: "state", text }));
      this.announce(text);
    }

    announce(text) { this.live.textContent = text; }
    say(text) { this.status.textContent = text; }
    scroll() { this.log.scrollTop = this.log.scrollHeight; }

    submit() {
      const text = this.input.value.trim();
      if (!text) return;
      this.input.value = "";
      this.send(text, false);
    }

    async send(text, person) {
      const id = newId();
      const shown = this.bubble("user", STRINGS.you, text);
      this.pendingUser.set(id, shown);
      this.say(STRINGS.sending);
      for (let attempt = 0; attempt < 4; attempt++) {
        try {
          const r = await this.call("/messages", { clientId: id, text, person });
          if (r.status === 202) { this.say(STRINGS.working); return; }
          if (r.status === 401) { await this.open(); continue; }
          this.say(r.status === 429 ? STRINGS.tooMany : r.status === 503 ? STRINGS.busy : STRINGS.failed);
          break;
        } catch (_) {
          await new Promise((res) => setTimeout(res, 1000 * (attempt + 1))); // the same id: stored once
        }
      }
      this.pendingUser.delete(id);
      shown.node.remove();
      if (!this.status.textContent) this.say(STRINGS.failed);
    }

    async verify(body) {
      const r = await this.call("/verify", body).catch(() => null);
      const outcome = r ? (await r.json().catch(() => ({}))).outcome : null;
      this.say(STRINGS.verifyOutcome[outcome] || STRINGS.failed);
      if (outcome === "verified" || outcome === "already") this.verifyBox.hidden = true;
      if (outcome === "code_sent") this.verifyBox.querySelector("#c-code").focus();
    }
  }

  if (!customElements.get("signoff-chat")) customElements.define("signoff-chat", SignoffChat);
  const mount = () => { if (!document.querySelector("signoff-chat")) document.body.append(document.createElement("signoff-chat")); };
  if (document.body) mount(); else document.addEventListener("DOMContentLoaded", mount);
})();
