// The live event feed: newest first, filterable by type, at most FEED_ROWS rows in the DOM.
// Events are queued by `push` and drawn by `render`, which the page calls once per animation
// frame, so a burst of a thousand events costs one DOM update, not a thousand.

import { TYPES, TYPE_COLOR, clock, summarize } from "./format.js";

/** Rows kept in the DOM. */
export const FEED_ROWS = 200;
/** Events kept in memory, so that a filter change can refill the list. */
export const FEED_BUFFER = 1000;

export class Feed {
  constructor({ list, filters, total, rate, pauseButton }) {
    this.list = list;
    this.filters = filters;
    this.total = total;
    this.rate = rate;
    this.pauseButton = pauseButton;
    this.buffer = [];
    this.pending = [];
    this.counts = new Map();
    this.hidden = new Set();
    this.arrivals = []; // ms timestamps of the last 10 s, for the rate
    this.seen = 0;
    this.paused = false;
    this.rebuild = false;
    this.chipsDirty = true; // every type's chip from the first frame, before any event
    this.events = new WeakMap(); // row -> event, to show its JSON on demand
    filters.addEventListener("click", (click) => {
      const chip = click.target.closest("button[data-type]");
      if (!chip) return;
      const type = chip.dataset.type;
      if (this.hidden.has(type)) this.hidden.delete(type);
      else this.hidden.add(type);
      chip.setAttribute("aria-pressed", String(!this.hidden.has(type))); // at once, not next frame
      this.rebuild = true;
    });
    list.addEventListener("toggle", (toggle) => {
      const details = toggle.target;
      const pre = details.querySelector("pre");
      if (details.open && pre && !pre.textContent) {
        pre.textContent = JSON.stringify(this.events.get(details.closest("li")), null, 2);
      }
    }, true);
    if (pauseButton) {
      pauseButton.addEventListener("click", () => {
        this.paused = !this.paused;
        pauseButton.setAttribute("aria-pressed", String(this.paused));
        pauseButton.textContent = this.paused ? "Resume" : "Pause";
        if (!this.paused) this.rebuild = true;
      });
    }
  }

  clear() {
    this.buffer = [];
    this.pending = [];
    this.counts.clear();
    this.arrivals = [];
    this.seen = 0;
    this.rebuild = true;
    this.chipsDirty = true;
  }

  /** Queue an event; `replayed` ones (history sent on connect) do not count in the rate. */
  push(event, nowMs, replayed = false) {
    const type = event.message_type;
    this.buffer.push(event);
    if (this.buffer.length > FEED_BUFFER * 1.5) this.buffer = this.buffer.slice(-FEED_BUFFER);
    this.pending.push(event);
    if (this.pending.length > FEED_ROWS) this.pending = this.pending.slice(-FEED_ROWS);
    if (!this.counts.has(type)) this.chipsDirty = true;
    this.counts.set(type, (this.counts.get(type) || 0) + 1);
    if (!replayed) this.arrivals.push(nowMs);
    this.seen += 1;
  }

  row(event) {
    const li = document.createElement("li");
    li.className = "feed-item";
    li.dataset.testid = "feed-item";
    li.dataset.type = event.message_type;
    if (event.event_id !== undefined) li.dataset.eventId = String(event.event_id);
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    const time = document.createElement("time");
    time.textContent = clock(event.current_sim_ts);
    time.dateTime = event.current_sim_ts || "";
    const badge = document.createElement("span");
    badge.className = "type";
    badge.textContent = event.message_type;
    badge.style.setProperty("--type-color", TYPE_COLOR.get(event.message_type) || "#475569");
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = summarize(event);
    summary.append(time, badge, text);
    details.append(summary, document.createElement("pre"));
    li.append(details);
    this.events.set(li, event);
    return li;
  }

  renderChips() {
    // Every type of the interface, always in the same order (a booking's life), seen or not:
    // a chip does not appear, or move, when its first event arrives.
    const known = TYPES.map(([type]) => type);
    const extra = [...this.counts.keys()].filter((type) => !TYPE_COLOR.has(type)).sort();
    const fragment = document.createDocumentFragment();
    for (const type of [...known, ...extra]) {
      const chip = document.createElement("button");
      chip.type = "button";
      chip.className = "chip";
      chip.dataset.type = type;
      chip.dataset.testid = `feed-filter-${type}`;
      chip.setAttribute("aria-pressed", String(!this.hidden.has(type)));
      chip.style.setProperty("--type-color", TYPE_COLOR.get(type) || "#475569");
      const label = document.createElement("span");
      label.textContent = type.replaceAll("_", " ");
      const count = document.createElement("b");
      count.textContent = String(this.counts.get(type) || 0);
      chip.append(label, count);
      fragment.append(chip);
    }
    this.filters.replaceChildren(fragment);
  }

  updateCounts() {
    for (const chip of this.filters.children) {
      const count = chip.querySelector("b");
      const value = String(this.counts.get(chip.dataset.type) || 0);
      if (count && count.textContent !== value) count.textContent = value;
    }
  }

  render(nowMs) {
    while (this.arrivals.length && nowMs - this.arrivals[0] > 10000) this.arrivals.shift();
    if (this.rate) this.rate.textContent = `${(this.arrivals.length / 10).toFixed(1)}/s`;
    if (this.total) this.total.textContent = this.seen.toLocaleString();
    if (this.chipsDirty) {
      this.renderChips();
      this.chipsDirty = false;
    } else if (this.pending.length) {
      this.updateCounts();
    }
    if (this.paused) {
      this.pending = [];
      return;
    }
    const shown = (event) => !this.hidden.has(event.message_type);
    if (this.rebuild) {
      this.rebuild = false;
      this.pending = [];
      const rows = [];
      for (let i = this.buffer.length - 1; i >= 0 && rows.length < FEED_ROWS; i -= 1) {
        if (shown(this.buffer[i])) rows.push(this.row(this.buffer[i]));
      }
      this.list.replaceChildren(...rows);
      return;
    }
    if (!this.pending.length) return;
    const fragment = document.createDocumentFragment();
    for (let i = this.pending.length - 1; i >= 0; i -= 1) {
      if (shown(this.pending[i])) fragment.append(this.row(this.pending[i]));
    }
    this.pending = [];
    this.list.prepend(fragment);
    while (this.list.children.length > FEED_ROWS) this.list.lastElementChild.remove();
  }
}
