// One websocket stream of events that reconnects on its own: exponential back-off with jitter,
// a fresh token when the server says the old one is no good, and `since=<last event_id>` so
// that nothing is missed or repeated across a reconnect.

/**
 * What to do after the server closed the stream with `code` (see errors.py: 4000-4099 means
 * "fix the request first", 4100-4199 "reconnect with back-off").
 * @returns {"reauth"|"reset"|"fatal"|"retry"}
 */
export function closeAction(code) {
  if (code >= 4001 && code <= 4004) return "reauth"; // no, malformed, unknown or expired token
  if (code === 4008 || code === 4010) return "reset"; // the cursor is bad or too old: go live
  if (code >= 4000 && code < 4100) return "fatal"; // bad path, not visible, forbidden
  return "retry"; // 1001 going away, 1006 dropped, 1011, 41xx slow consumer / unavailable
}

/** Delay before reconnect number `attempt` (0-based): 0.5 s doubling to 15 s, jittered. */
export function backoffMs(attempt, random = Math.random) {
  const ceiling = Math.min(15000, 500 * 2 ** Math.min(attempt, 10));
  return Math.round(ceiling * (0.5 + 0.5 * random()));
}

/** A connection that stayed open this long resets the back-off. */
const STABLE_MS = 10000;

export class EventStream {
  /**
   * @param {object} options
   * @param {string} options.path e.g. "/simulation_events/3"
   * @param {(fresh: boolean) => Promise<string>} options.getToken
   * @param {(event: object) => void} options.onEvent called for every parsed frame
   * @param {(status: object) => void} options.onStatus {state, detail, retryInMs}
   * @param {string|null} [options.since] replay after this event_id on the first connect
   */
  constructor({ path, getToken, onEvent, onStatus, since = null }) {
    this.path = path;
    this.getToken = getToken;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.lastEventId = since;
    this.attempt = 0;
    this.socket = null;
    this.timer = null;
    this.stopped = false;
    this.freshToken = false;
  }

  url(token) {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const query = new URLSearchParams({ token });
    if (this.lastEventId !== null) query.set("since", String(this.lastEventId));
    return `${scheme}://${window.location.host}${this.path}?${query}`;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.socket) {
      this.socket.onclose = null;
      this.socket.close(1000, "bye");
      this.socket = null;
    }
    this.onStatus({ state: "stopped", detail: "" });
  }

  schedule(detail) {
    if (this.stopped) return;
    const delay = backoffMs(this.attempt);
    this.attempt += 1;
    this.onStatus({ state: "reconnecting", detail, retryInMs: delay });
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  async connect() {
    if (this.stopped) return;
    this.onStatus({ state: "connecting", detail: "" });
    let token;
    try {
      token = await this.getToken(this.freshToken);
      this.freshToken = false;
    } catch (exc) {
      if (exc && exc.status === 401) {
        this.stopped = true;
        this.onStatus({ state: "error", detail: exc.message, fatal: "credentials" });
      } else {
        this.schedule(`token: ${exc && exc.message}`);
      }
      return;
    }
    if (this.stopped) return;
    let socket;
    try {
      socket = new WebSocket(this.url(token));
    } catch (exc) {
      this.schedule(String(exc));
      return;
    }
    this.socket = socket;
    let openedAt = 0;
    socket.onopen = () => {
      openedAt = Date.now();
      this.onStatus({ state: "live", detail: "" });
    };
    socket.onmessage = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return; // not an event frame; nothing to show
      }
      if (event && event.event_id !== undefined) this.lastEventId = event.event_id;
      this.onEvent(event);
    };
    socket.onclose = (close) => {
      if (this.socket === socket) this.socket = null;
      if (this.stopped) return;
      if (openedAt && Date.now() - openedAt > STABLE_MS) this.attempt = 0;
      const reason = close.reason ? `${close.code} ${close.reason}` : `closed (${close.code})`;
      const action = closeAction(close.code);
      if (action === "fatal") {
        this.stopped = true;
        this.onStatus({ state: "error", detail: reason, fatal: "stream" });
        return;
      }
      if (action === "reset") this.lastEventId = null;
      if (action === "reauth") this.freshToken = true;
      this.schedule(reason);
    };
  }
}
