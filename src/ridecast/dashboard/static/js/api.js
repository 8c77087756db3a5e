// The REST calls the dashboard makes, with HTTP Basic (user name and API key), as any client.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** base64 of UTF-8 text (btoa alone only takes Latin-1). */
export function base64Utf8(text) {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

export class Api {
  /**
   * @param {string} user
   * @param {string} key
   * @param {string} [base] origin of the server; default: this page's
   */
  constructor(user, key, base = "") {
    this.user = user;
    this.base = base;
    this.authorization = `Basic ${base64Utf8(`${user}:${key}`)}`;
  }

  async request(method, path, { body, timeoutMs = 10000 } = {}) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    let response;
    try {
      response = await fetch(this.base + path, {
        method,
        headers: {
          Authorization: this.authorization,
          Accept: "application/json",
          ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
        cache: "no-store",
        credentials: "omit",
      });
    } catch (exc) {
      throw new ApiError(0, "network_error", controller.signal.aborted
        ? "the server did not answer in time" : `cannot reach the server (${exc.message})`);
    } finally {
      clearTimeout(timer);
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (!response.ok) {
      const err = (json && json.error) || {};
      throw new ApiError(response.status, err.code || `http_${response.status}`,
        err.message || `${method} ${path} answered ${response.status}`);
    }
    return json;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body) {
    return this.request("POST", path, { body });
  }

  /** A websocket token: GET /api/v2/user/token/. */
  async token() {
    const answer = await this.get("/api/v2/user/token/");
    return answer.token;
  }

  /** The simulations this user can see, newest first. */
  async simulations() {
    const answer = await this.get("/api/v2/simulation?limit=1000");
    return [...answer.objects].sort((a, b) => b.id - a.id);
  }

  simulation(id) {
    return this.get(`/api/v2/simulation/${id}`);
  }

  simulator(id) {
    return this.get(`/api/v2/simulation/${id}/simulator`);
  }

  control(id, action) {
    return this.post(`/api/v2/simulation/${id}/simulator/${action}`);
  }

  deliveries(id, limit = 50) {
    return this.get(`/api/v2/simulation/${id}/webhook_deliveries?limit=${limit}`);
  }

  /** {oldest_event_id, last_event_id} of the whole log, to replay recent history. */
  health() {
    return this.request("GET", "/healthz");
  }
}
