// The AsyncAPI viewer of /docs/streams: renders the server's /asyncapi.json (channels, their
// parameters, and each message's payload fields) as plain HTML. Every value is written as
// text, never as markup. It loads nothing but /asyncapi.json, so it works offline.
"use strict";

const REF_PREFIX = "#/components/";
const MAX_DEPTH = 6;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function refName(ref) {
  return ref.split("/").pop();
}

function resolve(doc, schema) {
  // Follow "#/components/..." references (a chain of them, never a loop).
  let current = schema || {};
  for (let hops = 0; current && current.$ref && hops < 20; hops += 1) {
    if (!current.$ref.startsWith(REF_PREFIX)) return current;
    const path = current.$ref.slice(2).split("/");
    current = path.reduce((node, key) => (node ? node[key] : undefined), doc) || {};
  }
  return current;
}

function typeLabel(doc, schema) {
  if (!schema) return "any";
  if (schema.$ref) return refName(schema.$ref);
  const union = schema.anyOf || schema.oneOf;
  if (union) return union.map((option) => typeLabel(doc, option)).join(" | ");
  if (schema.allOf && schema.allOf.length === 1) return typeLabel(doc, schema.allOf[0]);
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.type === "array") return `array of ${typeLabel(doc, schema.items)}`;
  const type = Array.isArray(schema.type) ? schema.type.join(" | ") : schema.type || "any";
  return schema.format ? `${type} (${schema.format})` : type;
}

function objectOf(doc, schema) {
  // The object schema whose fields a row expands into: the schema itself, its array items,
  // or the one non-null option of a union.
  const resolved = resolve(doc, schema);
  if (resolved.properties) return resolved;
  if (resolved.type === "array" && resolved.items) return objectOf(doc, resolved.items);
  if (resolved.allOf && resolved.allOf.length === 1) return objectOf(doc, resolved.allOf[0]);
  const union = (resolved.anyOf || resolved.oneOf || []).filter((o) => o.type !== "null");
  if (union.length === 1) return objectOf(doc, union[0]);
  return null;
}

function fieldsTable(doc, schema, depth, seen) {
  const object = objectOf(doc, schema);
  if (!object) return el("p", { class: "rc-type" }, typeLabel(doc, schema));
  const required = new Set(object.required || []);
  const body = el("tbody");
  for (const [name, property] of Object.entries(object.properties || {})) {
    const resolved = resolve(doc, property);
    const description = property.description || resolved.description || "";
    const row = el("tr", { "data-field": name },
      el("td", {}, el("code", {}, name)),
      el("td", { class: "rc-type" }, typeLabel(doc, property)),
      el("td", {}, required.has(name) ? "required" : ""),
      el("td", {}, description));
    body.append(row);
    const nested = objectOf(doc, property);
    const key = property.$ref || (property.items && property.items.$ref) || name;
    if (nested && depth < MAX_DEPTH && !seen.has(key)) {
      const inner = fieldsTable(doc, property, depth + 1, new Set([...seen, key]));
      body.append(el("tr", { class: "rc-nested" }, el("td", { colspan: "4" }, inner)));
    }
  }
  return el("table", { class: "rc-fields" },
    el("thead", {}, el("tr", {}, el("th", {}, "field"), el("th", {}, "type"),
      el("th", {}, ""), el("th", {}, "description"))),
    body);
}

function messageNames(channel) {
  // AsyncAPI 3: a channel's messages are a map keyed by message id (here the event type).
  return Object.entries(channel.messages || {}).map(
    ([key, message]) => (message.$ref ? refName(message.$ref) : message.name || key));
}

function parameterType(doc, parameter) {
  // AsyncAPI 3 parameters carry no schema: values are strings, some from an enum.
  return parameter.enum ? typeLabel(doc, { enum: parameter.enum }) : "string";
}

function renderChannel(doc, id, channel) {
  // A channel without an address (the webhook: each simulation's own URL) shows its id.
  const path = channel.address || id;
  const params = Object.entries(channel.parameters || {});
  const query = Object.entries(
    ((channel.bindings || {}).ws || {}).query ? channel.bindings.ws.query.properties || {} : {});
  const rows = [
    ...params.map(([name, p]) => ["path", name, parameterType(doc, p), p.description || ""]),
    ...query.map(([name, s]) => ["query", name, typeLabel(doc, s), s.description || ""]),
  ];
  const section = el("section", { class: "rc-channel", "data-testid": "channel",
                                  "data-channel": path },
    el("h3", {}, el("code", {}, path)),
    el("p", {}, channel.description || ""));
  if (rows.length) {
    section.append(el("table", { class: "rc-fields" },
      el("thead", {}, el("tr", {}, el("th", {}, "in"), el("th", {}, "parameter"),
        el("th", {}, "type"), el("th", {}, "description"))),
      el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c, i) =>
        el("td", {}, i === 1 ? el("code", {}, c) : c)))))));
  }
  const names = messageNames(channel);
  section.append(el("p", { class: "rc-messages" }, `delivers ${names.length} message type(s): `,
    names.map((name, i) => [i ? ", " : "", el("a", { href: `#message-${name}` }, name)])));
  return section;
}

function renderMessage(doc, name, message) {
  const payload = message.payload || {};
  const details = el("details", { class: "rc-message", id: `message-${name}`,
                                  "data-testid": "message", "data-message": name },
    el("summary", {}, el("code", {}, name), " ", el("span", {}, message.summary || "")),
    el("p", {}, `${message.title || ""} · ${message.contentType || doc.defaultContentType || ""}`),
    fieldsTable(doc, payload, 0, new Set([payload.$ref || name])));
  return details;
}

function render(doc) {
  const info = doc.info || {};
  const channels = Object.entries(doc.channels || {});
  const messages = Object.entries((doc.components || {}).messages || {});
  const main = el("main", { id: "asyncapi", "data-testid": "asyncapi", "data-ready": "true" },
    el("h1", {}, info.title || "AsyncAPI", " ", el("small", {}, info.version || "")),
    el("p", {}, info.description || ""),
    el("p", { class: "rc-meta" }, `AsyncAPI ${doc.asyncapi || "?"}, `,
      `${channels.length} channels, ${messages.length} messages`),
    el("h2", {}, "Channels"),
    channels.map(([id, channel]) => renderChannel(doc, id, channel)),
    el("h2", {}, "Messages"),
    el("p", {}, "Click a message for its payload's fields."),
    messages.map(([name, message]) => renderMessage(doc, name, message)));
  document.getElementById("asyncapi").replaceWith(main);
  if (location.hash) {
    const target = document.getElementById(location.hash.slice(1));
    if (target && target.tagName === "DETAILS") target.open = true;
  }
}

function fail(message) {
  document.getElementById("asyncapi").replaceChildren(
    el("p", { class: "rc-error", "data-testid": "asyncapi-error" }, message));
}

fetch(document.body.dataset.asyncapiUrl, { headers: { Accept: "application/json" } })
  .then((response) => {
    if (!response.ok) throw new Error(`${response.url} answered ${response.status}`);
    return response.json();
  })
  .then(render)
  .catch((error) => fail(`Could not load the AsyncAPI document: ${error.message}`));
