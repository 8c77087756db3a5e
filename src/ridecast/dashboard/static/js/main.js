// The dashboard page: sign-in, the simulation picker, and the loop that turns queued events
// into map, feed and legend updates once per animation frame.

import { Api, ApiError, exchangeKey } from "./api.js";
import { Feed } from "./feed.js";
import { FleetMap } from "./map.js";
import { renderLegend, renderSimulator, renderWebhook } from "./panels.js";
import { RunTracker, isRunStart } from "./runs.js";
import { FleetState } from "./state.js";
import { EventStream } from "./stream.js";

const config = JSON.parse(document.getElementById("ridecast-config").textContent);
const $ = (id) => document.getElementById(id);

/** Events replayed on opening a simulation, so that the map starts with the current fleet. */
const REPLAY_EVENTS = 5000;
const STATUS_EVERY_MS = 3000;
const DELIVERIES_EVERY_MS = 5000;
// The session (user name and token, never the API key) lives in this tab's sessionStorage.
const SESSION_KEY = "ridecast.session";

const app = {
  api: null,
  simulationId: null,
  simulation: null,
  stream: null,
  queue: [],
  replayUntil: 0, // events up to this id were history when the stream opened
  state: new FleetState(),
  runs: new RunTracker(), // the simulator's run on screen: a new run clears the view
  timers: [],
  map: new FleetMap($("map"), { tileUrl: config.tile_url, tileAttribution: config.tile_attribution,
    roads: config.map_roads, assetPrefix: config.asset_prefix }),
  feed: new Feed({ list: $("feed"), filters: $("feed-filters"), total: $("feed-total"),
    rate: $("feed-rate"), pauseButton: $("feed-pause") }),
};

const simulatorParts = {
  status: $("sim-status"), clock: $("sim-clock"), run: $("sim-run"), kpis: $("kpis"),
  more: $("kpis-more"),
  error: $("sim-error"),
  buttons: { start: $("sim-start"), pause: $("sim-pause"), resume: $("sim-resume") },
};

function toast(message) {
  const node = $("toast");
  node.textContent = message;
  node.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { node.hidden = true; }, 6000);
}

function showConnection({ state, detail, retryInMs }) {
  const pill = $("connection-status");
  pill.dataset.state = state;
  const text = {
    connecting: "connecting…",
    live: "live",
    reconnecting: `reconnecting in ${Math.ceil((retryInMs || 0) / 1000)} s`,
    error: "disconnected",
    stopped: "offline",
  }[state] || state;
  pill.textContent = text;
  pill.title = detail || "";
  if (state === "error") toast(`Stream closed: ${detail}`);
}

// ---- the frame loop ------------------------------------------------------------------

function drain(nowMs, draw) {
  const queue = app.queue;
  app.queue = [];
  for (const event of queue) {
    // A run starts with its snapshot at its start time: what came before (an earlier run's
    // stops, bookings and counts) is not this run's, so the view starts over.
    if (isRunStart(event, app.runs.start)) {
      app.state.clear();
      app.feed.clear();
    }
    app.state.apply(event, nowMs);
    app.feed.push(event, nowMs, Number(event.event_id) <= app.replayUntil);
  }
  if (!draw) return;
  app.state.prune(nowMs);
  app.map.sync(app.state, nowMs);
  app.feed.render(nowMs);
}

let lastLegend = 0;
function frame() {
  const now = Date.now();
  drain(now, true);
  app.map.animate(now);
  if (now - lastLegend > 500) {
    lastLegend = now;
    renderLegend($("map-legend"), app.state.summary(now));
    $("map-empty").hidden = app.state.vehicles.size > 0 || !app.simulationId;
  }
  requestAnimationFrame(frame);
}

// Animation frames stop in a hidden tab; keep the model current without drawing.
setInterval(() => { if (document.hidden) drain(Date.now(), false); }, 1000);

// ---- polling -------------------------------------------------------------------------

function every(ms, work) {
  const run = async () => {
    if (!document.hidden) await work().catch((exc) => console.error(exc));
  };
  run();
  app.timers.push(setInterval(run, ms));
}

/** Show a simulator answer; when it is another run than the one on screen, show that one. */
function showSimulator(id, answer) {
  renderSimulator(simulatorParts, answer);
  if (app.runs.observe(answer) && id === app.simulationId) openSimulation(id);
}

async function refreshSimulator(id) {
  try {
    const answer = await app.api.simulator(id);
    if (id !== app.simulationId) return;
    showSimulator(id, answer);
    if (answer.settings && answer.settings.area) app.map.showArea(answer.settings.area);
    app.map.showRoads(answer.settings || null);
  } catch (exc) {
    if (id !== app.simulationId) return;
    renderSimulator(simulatorParts, null,
      exc.status === 404 ? "this server has no simulator" : exc.message);
  }
}

async function refreshWebhook(id) {
  let simulation;
  try {
    simulation = await app.api.simulation(id);
  } catch (exc) {
    if (id === app.simulationId) renderWebhook($("webhook"), null, null, exc.message);
    return;
  }
  if (id !== app.simulationId) return;
  app.simulation = simulation;
  if (!(simulation.data || {}).messaging_webhook_url) {
    renderWebhook($("webhook"), simulation, null);
    return;
  }
  try {
    const base = `/api/v2/simulation/${id}/webhook_deliveries`;
    const [latest, pending, failed, succeeded] = await Promise.all([
      app.api.get(`${base}?limit=20`),
      app.api.get(`${base}?status=pending&limit=1`),
      app.api.get(`${base}?status=failed&limit=1`),
      app.api.get(`${base}?status=succeeded&limit=1`),
    ]);
    // The list is newest first; the oldest pending deliveries are the ones being retried
    // (ordered delivery holds the rest behind them), so they tell whether sending works.
    const pendingTotal = pending.meta.total_count;
    const oldestPending = pendingTotal > 1
      ? await app.api.get(`${base}?status=pending&limit=5&offset=${Math.max(0, pendingTotal - 5)}`)
      : pending;
    if (id !== app.simulationId) return;
    renderWebhook($("webhook"), simulation, {
      latest, pending: pendingTotal, failed: failed.meta.total_count,
      recent: [...oldestPending.objects, ...failed.objects, ...latest.objects],
      lastSuccess: succeeded.objects[0] || null,
    });
  } catch (exc) {
    if (id === app.simulationId) {
      renderWebhook($("webhook"), simulation, null,
        exc.status === 404 ? "this server keeps no delivery log" : exc.message);
    }
  }
}

// ---- opening a simulation --------------------------------------------------------------

async function getToken(fresh) {
  // The stream uses the session's own token; when the server refuses it (expired, revoked),
  // the session is over: a 401 here makes the stream stop and the page ask to sign in again.
  if (fresh || !app.api) throw new ApiError(401, "token_expired", "the session has ended");
  return app.api.sessionToken;
}

function closeSimulation() {
  if (app.stream) app.stream.stop();
  app.stream = null;
  for (const timer of app.timers) clearInterval(timer);
  app.timers = [];
  app.queue = [];
  app.replayUntil = 0;
  app.state.clear();
  app.map.sync(app.state, Date.now());
  app.map.showArea(null);
  app.map.reset();
  app.feed.clear();
  app.runs = new RunTracker();
}

async function replayCursor() {
  // Event ids are one sequence across simulations: start a few thousand back (within what is
  // retained) and let the replay rebuild the fleet; the feed keeps only the newest rows.
  try {
    const health = await app.api.health();
    const last = Number(health.last_event_id);
    const oldest = Number(health.oldest_event_id);
    if (!Number.isFinite(last) || last <= 0) return null;
    app.replayUntil = last;
    // since=N replays the events after N: oldest - 1 still includes the oldest one.
    return String(Math.max(Number.isFinite(oldest) ? oldest - 1 : 0, last - REPLAY_EVENTS, 0));
  } catch {
    return null;
  }
}

async function openSimulation(id) {
  closeSimulation();
  app.simulationId = id;
  history.replaceState(null, "", `#sim=${id}`);
  // The run's start first: the replay below clears the view where the current run began.
  await refreshSimulator(id);
  if (id !== app.simulationId) return;
  every(STATUS_EVERY_MS, () => refreshSimulator(id));
  every(DELIVERIES_EVERY_MS, () => refreshWebhook(id));
  const since = await replayCursor();
  if (id !== app.simulationId) return;
  const stream = new EventStream({
    path: `/simulation_events/${id}`,
    getToken,
    since,
    // A stopped stream's socket may still hand over what it had received: not this view's.
    onEvent: (event) => { if (app.stream === stream) app.queue.push(event); },
    onStatus: (status) => {
      showConnection(status);
      if (status.fatal === "credentials") signOut("Your session has ended (expired or revoked); sign in again.");
    },
  });
  app.stream = stream;
  stream.start();
}

async function control(action) {
  try {
    const answer = await app.api.control(app.simulationId, action);
    showSimulator(app.simulationId, answer);
  } catch (exc) {
    toast(`${action}: ${exc.message}`);
  }
}

// ---- signing in and out ------------------------------------------------------------------

function fillPicker(simulations, wanted) {
  const select = $("sim-select");
  select.replaceChildren(...simulations.map((s) => {
    const option = document.createElement("option");
    option.value = String(s.id);
    option.textContent = `#${s.id} ${s.name}`;
    return option;
  }));
  $("no-simulation").hidden = simulations.length > 0;
  const chosen = simulations.find((s) => s.id === wanted) || simulations[0];
  if (chosen) {
    select.value = String(chosen.id);
    openSimulation(chosen.id);
  }
}

/** Sign in with a user name and API key: the key buys a session token and is then dropped. */
async function signIn(user, key, wanted) {
  const session = await exchangeKey(user, key); // 401 here means wrong name or key
  await startSession({ user, ...session }, wanted);
}

async function startSession(session, wanted) {
  const api = new Api(session.user, session.token);
  const simulations = await api.simulations(); // 401 here: the session is no longer valid
  api.onUnauthorized = () => signOut("Your session has ended (expired or revoked); sign in again.");
  app.api = api;
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(session));
  $("whoami").textContent = session.user;
  $("whoami").title = session.expiresAt ? `session until ${session.expiresAt}` : "";
  $("login").hidden = true;
  $("app").inert = false;
  fillPicker(simulations, wanted);
}

function signOut(message = "") {
  if (!app.api && !$("login").hidden) return; // already signed out
  closeSimulation();
  app.api = null;
  app.simulationId = null;
  sessionStorage.removeItem(SESSION_KEY);
  showConnection({ state: "stopped", detail: "" });
  $("login").hidden = false;
  $("app").inert = true;
  $("login-error").textContent = message;
  $("login-key").value = "";
  $("login-key").focus();
}

$("login-form").addEventListener("submit", async (submit) => {
  submit.preventDefault();
  const button = $("login-submit");
  button.disabled = true;
  $("login-error").textContent = "";
  try {
    await signIn($("login-user").value.trim(), $("login-key").value.trim(), wantedSimulation());
  } catch (exc) {
    $("login-error").textContent = exc.status === 401
      ? "Unknown user name or API key." : exc.message;
  } finally {
    button.disabled = false;
  }
});

$("sim-select").addEventListener("change", (change) => openSimulation(Number(change.target.value)));
$("logout").addEventListener("click", () => signOut());
$("sim-start").addEventListener("click", () => control("start"));
$("sim-pause").addEventListener("click", () => control("pause"));
$("sim-resume").addEventListener("click", () => control("resume"));

function hashParams() {
  return new URLSearchParams(window.location.hash.slice(1));
}

function wantedSimulation() {
  const sim = Number(hashParams().get("sim"));
  return Number.isInteger(sim) && sim > 0 ? sim : null;
}

async function boot() {
  requestAnimationFrame(frame);
  const params = hashParams();
  const wanted = wantedSimulation();
  // Links carry at most the user name and simulation (`ridecast demo` prints #user=...&sim=...).
  // A key in an old-style link is removed from the address bar and history, and not used.
  if (params.has("key")) {
    history.replaceState(null, "", wanted ? `#sim=${wanted}` : "#");
    $("login-error").textContent = "Links no longer carry API keys: paste the key here.";
  }
  sessionStorage.removeItem("ridecast.credentials"); // what older versions kept: the key
  let session = null;
  try {
    session = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
  } catch {
    session = null;
  }
  if (params.get("user")) $("login-user").value = params.get("user");
  if (session && session.user && session.token) {
    try {
      await startSession(session, wanted);
      return;
    } catch (exc) {
      sessionStorage.removeItem(SESSION_KEY);
      $("login-user").value = session.user;
      $("login-error").textContent = exc.status === 401
        ? "Your session has ended; sign in again." : exc.message;
    }
  }
  $("login").hidden = false;
  $("app").inert = true;
  ($("login-user").value ? $("login-key") : $("login-user")).focus();
}

boot();
