// The side panels: the simulator's status and KPIs, and the webhook's delivery status.
// Everything user-provided goes through textContent, never innerHTML.

import { clock, kpiLabel, kpiTitle, kpiValue } from "./format.js";
import { runOf } from "./runs.js";

/**
 * KPIs shown up front, in this order: two rows of three, so that the panel fits whole beside
 * a readable event feed on a 1280x720 screen. The rest (wait p95, ride time ÷ direct time, km
 * driven, vehicles on duty, offers...) are listed under "All indicators".
 */
const MAIN_KPIS = ["bookings", "served", "on_board", "rejected_rate", "wait_mean_s", "occupancy"];
/** Not shown: the page has one event count, the feed's (events received by this page). */
const HIDDEN_KPIS = ["events"];

const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "testid") node.dataset.testid = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
};

function kpiTile(name, value) {
  return el("div", { class: "kpi", testid: `kpi-${name}`, title: kpiTitle(name) || name },
    el("dt", {}, kpiLabel(name)), el("dd", {}, kpiValue(name, value)));
}

/**
 * Show ``entries`` ([name, value] pairs, in order) as the tiles of ``container``. A tile
 * already shown keeps its element and gets the new value: a poll that replaced every tile
 * would drop the hover title a reader is looking at, a selection, and the panel's scroll.
 * @param {HTMLElement} container
 * @param {Array<[string, *]>} entries
 */
function renderTiles(container, entries) {
  const shown = new Map([...container.children].map((tile) => [tile.dataset.testid, tile]));
  const tiles = entries.map(([name, value]) => {
    const tile = shown.get(`kpi-${name}`);
    if (!tile) return kpiTile(name, value);
    const text = kpiValue(name, value);
    const dd = tile.querySelector("dd");
    if (dd.textContent !== text) dd.textContent = text;
    return tile;
  });
  const same = tiles.length === container.children.length
    && tiles.every((tile, i) => container.children[i] === tile);
  if (!same) container.replaceChildren(...tiles);
}

/**
 * Render GET .../simulator into the KPI panel.
 * @param {object} parts {status, clock, run, kpis, more, error, buttons: {start, pause, resume}}
 * @param {object|null} answer the endpoint's JSON, or null when unavailable
 * @param {string} [problem] why it is unavailable
 */
export function renderSimulator(parts, answer, problem = "") {
  const status = answer ? answer.status : "unavailable";
  parts.status.textContent = status;
  parts.status.dataset.state = status;
  parts.clock.textContent = answer && answer.sim_ts ? clock(answer.sim_ts) : "";
  // What reproduces the run: its seed and its start (docs/simulator.md).
  const run = runOf(answer);
  parts.run.textContent = run ? `seed ${run.seed} · start ${clock(run.start)}` : "";
  parts.run.title = run ? `This run: seed ${run.seed}, start_ts ${run.start}. Set `
    + "data.simulator.start_ts to this start to run it again." : "";
  parts.run.dataset.start = run ? run.start : "";
  parts.buttons.start.hidden = !answer || !["idle", "stopped", "finished", "interrupted"].includes(status);
  parts.buttons.pause.hidden = status !== "running";
  parts.buttons.resume.hidden = status !== "paused";
  parts.error.textContent = (answer && answer.error) || problem;
  parts.error.hidden = !parts.error.textContent;
  const kpis = (answer && answer.kpis) || {};
  const scalar = Object.entries(kpis).filter(([, v]) => v === null || typeof v !== "object");
  // Punctuality is an object: its two headline figures as tiles of their own.
  if (kpis.punctuality && typeof kpis.punctuality === "object") {
    scalar.push(["punctual_share", kpis.punctuality.punctual_share],
      ["pickup_late_mean_s", kpis.punctuality.late_mean_s]);
  }
  const main = MAIN_KPIS.filter((name) => name in kpis).map((name) => [name, kpis[name]]);
  renderTiles(parts.kpis, main);
  const rest = scalar.filter(([name]) => !MAIN_KPIS.includes(name) && !HIDDEN_KPIS.includes(name));
  renderTiles(parts.more, rest);
  parts.more.closest("details").hidden = rest.length === 0;
}

/**
 * Render the webhook settings and the latest deliveries.
 * @param {HTMLElement} root
 * @param {object|null} simulation GET simulation/{id}
 * @param {object|null} deliveries {latest, pending, failed} list answers, or null
 * @param {string} [problem]
 */
export function renderWebhook(root, simulation, deliveries, problem = "") {
  const data = (simulation && simulation.data) || {};
  const url = data.messaging_webhook_url;
  const children = [];
  if (!url) {
    children.push(el("p", { class: "muted", testid: "webhook-status", "data-state": "none" },
      "No webhook set. ", el("code", {}, `ridecast webhook set ${simulation ? simulation.id : "SIM"} --url ...`)));
    root.replaceChildren(...children);
    return;
  }
  const disabled = simulation.messaging_webhook_disabled_at;
  const health = webhookHealth(simulation, deliveries);
  children.push(el("p", { class: "webhook-url", testid: "webhook-status", "data-state": health.state },
    el("span", { class: `badge ${health.state}` }, health.state), " ", el("code", {}, url)));
  if (disabled) {
    children.push(el("p", { class: "error" },
      `disabled ${clock(disabled)}: ${simulation.messaging_webhook_disabled_reason || ""}`));
  } else if (health.state === "failing") {
    children.push(el("p", { class: "webhook-error small", testid: "webhook-error" },
      `every recent delivery failed; last error: ${health.error}`));
  }
  const types = data.messaging_webhook_message_types;
  if (Array.isArray(types)) children.push(el("p", { class: "muted small" }, `types: ${types.join(", ") || "none"}`));
  if (!deliveries) {
    children.push(el("p", { class: "muted small" }, problem || "delivery log unavailable"));
    root.replaceChildren(...children);
    return;
  }
  const total = deliveries.latest.meta ? deliveries.latest.meta.total_count : deliveries.latest.objects.length;
  // Past a simulation's newest 10,000 deliveries the server's count is a lower bound
  // (meta.total_count_exact).
  const more = deliveries.latest.meta && deliveries.latest.meta.total_count_exact === false ? "+" : "";
  children.push(el("div", { class: "counts", testid: "webhook-counts" },
    el("span", {}, el("b", {}, `${total}${more}`), " deliveries"),
    el("span", { class: "pending" }, el("b", {}, String(deliveries.pending)), " pending"),
    el("span", { class: "failed" }, el("b", {}, String(deliveries.failed)), " failed")));
  // The simulation's deliveries still to send, and how old the oldest of their events is: an
  // ordered lane whose receiver cannot keep up shows here before it hurts.
  const meta = deliveries.latest.meta || {};
  if (typeof meta.backlog === "number") {
    const age = meta.oldest_undelivered_age_s;
    children.push(el("p", { class: "muted small", testid: "webhook-backlog",
      "data-backlog": String(meta.backlog) },
      `${meta.backlog} to send`, age === null || age === undefined ? "" : ` · oldest ${duration(age)} ago`));
  }
  const rows = deliveries.latest.objects.slice(0, 5).map((d) => {
    const last = d.attempts && d.attempts.length ? d.attempts[d.attempts.length - 1] : null;
    const outcome = last ? (last.status_code ? String(last.status_code) : last.error_class || "error") : "";
    return el("li", { testid: "webhook-delivery", "data-status": d.status },
      el("span", { class: `badge ${d.status}` }, d.status),
      el("span", { class: "type" }, d.message_type),
      el("span", { class: "muted" }, `${outcome}${last && last.latency_ms !== null ? ` · ${Math.round(last.latency_ms)} ms` : ""}`),
      el("span", { class: "muted" }, `×${d.attempt_count}`));
  });
  children.push(el("ol", { class: "deliveries" }, ...rows));
  root.replaceChildren(...children);
}

/** A number of seconds in a few characters: "42 s", "7 min", "3 h". */
export function duration(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

/** What a delivery's last attempt says went wrong, in a few words. */
export function attemptError(delivery) {
  const attempts = delivery.attempts || [];
  const last = attempts.length ? attempts[attempts.length - 1] : null;
  if (last) {
    const detail = last.error ? `: ${last.error}` : "";
    if (last.status_code) return `HTTP ${last.status_code}${detail}`;
    if (last.error_class || last.error) return `${last.error_class || "error"}${detail}`;
  }
  return delivery.last_error || "unknown error";
}

/**
 * The webhook's state: "disabled" (by the server); "failing" when the newest attempt on
 * record failed and no delivery succeeded since (with that attempt's error); else "active".
 * @param {object|null} simulation
 * @param {object|null} deliveries {recent: delivery rows being retried, failed or latest,
 *   lastSuccess: the newest succeeded delivery or null}
 */
export function webhookHealth(simulation, deliveries) {
  if (simulation && simulation.messaging_webhook_disabled_at) {
    return { state: "disabled", error: simulation.messaging_webhook_disabled_reason || "" };
  }
  const failures = ((deliveries && deliveries.recent) || [])
    .filter((d) => d.status !== "succeeded" && (d.attempt_count > 0 || (d.attempts || []).length))
    .sort((a, b) => String(b.updated_at).localeCompare(String(a.updated_at)));
  const success = deliveries && deliveries.lastSuccess;
  if (failures.length && (!success || String(success.updated_at) < String(failures[0].updated_at))) {
    return { state: "failing", error: attemptError(failures[0]) };
  }
  return { state: "active", error: "" };
}

/** Update the legend's counters ({vehicles, moving, disabled, pickups, dropoffs, waiting}). */
export function renderLegend(root, summary) {
  for (const [name, value] of Object.entries(summary)) {
    const node = root.querySelector(`[data-count="${name}"]`);
    if (node && node.textContent !== String(value)) node.textContent = String(value);
  }
}
