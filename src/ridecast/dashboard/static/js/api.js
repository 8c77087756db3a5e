// The REST calls the dashboard makes. Signing in exchanges the user name and API key (HTTP
// Basic, once) for a token of GET /api/v2/user/token/; every later call, and the websocket,
// carries only that token (Authorization: Bearer), so the page never keeps the API key.

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

/**
 * Exchange a user name and API key for a session token: {token, expiresAt}.
 * The key is sent once, here, and kept nowhere.
 */
export async function exchangeKey(user, key, base = "") {
  const api = new Api(user, "", base);
  api.authorization = `Basic ${base64Utf8(`${user}:${key}`)}`;
  const { json, headers } = await api.request("GET", "/api/v2/user/token/", { withHeaders: true });
  return { token: json.token, expiresAt: headers.get("X-Token-Expires-At") || "" };
}

export class Api {
  /**
   * @param {string} user the signed-in user's name (shown on the page)
   * @param {string} token a token of GET /api/v2/user/token/ (the session)
   * @param {string} [base] origin of the server; default: this page's
   */
  constructor(user, token, base = "") {
    this.user = user;
    this.base = base;
    this.sessionToken = token;
    this.authorization = `Bearer ${token}`;
    this.onUnauthorized = null; // called when the server no longer accepts the session
  }

  async request(method, path, { body, timeoutMs = 10000, withHeaders = false } = {}) {
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
      const error = new ApiError(response.status, err.code || `http_${response.status}`,
        err.message || `${method} ${path} answered ${response.status}`);
      if (response.status === 401 && this.onUnauthorized) this.onUnauthorized(error);
      throw error;
    }
    return withHeaders ? { json, headers: response.headers } : json;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body) {
    return this.request("POST", path, { body });
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
