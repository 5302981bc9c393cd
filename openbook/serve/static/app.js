// The openbook web page: asks POST /v1/ask with "stream": true and reads its server-sent events with fetch
// (EventSource cannot POST), then shows the passages, their posteriors and, for RAG-Token, the per-token
// document heat map. Plain modern JS, no dependencies, so the page works offline.
"use strict";

const $ = (id) => document.getElementById(id);
let inFlight = null; // the AbortController of the question being answered

// -- errors ---------------------------------------------------------------------------------------------

class ApiError extends Error {}

function errorText(body, status) {
  const err = body && body.error;
  if (err && err.message) return (err.field ? `${err.field}: ` : "") + err.message;
  return `the server answered ${status}`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message ? `Error: ${message}` : "";
  box.hidden = !message;
}

async function readJson(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: fall through to the status code
  }
  if (!response.ok) throw new ApiError(errorText(body, response.status));
  return body;
}

function messageOf(err) {
  return err instanceof ApiError ? err.message : `could not reach the server (${err.message})`;
}

// -- server-sent events over fetch ----------------------------------------------------------------------

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comments are keep-alive pings
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return data.length ? { event, data: data.join("\n") } : null;
}

async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffer = (buffer + value).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const parsed = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (parsed) yield parsed;
    }
    if (done) break;
  }
  const last = parseEvent(buffer.trim());
  if (last) yield last;
}

// -- the options: their choices and defaults are the API's own (/openapi.json), so the page keeps no copy --

function variants(property) {
  // a pydantic Literal is {"enum": [...]}; an optional field is {"anyOf": [{...}, {"type": "null"}]}
  return [property, ...(property.anyOf || [])];
}

function fillSelect(select, property) {
  const choices = variants(property).find((v) => Array.isArray(v.enum));
  select.append(...(choices ? choices.enum : []).map((value) =>
    el("option", { value, selected: value === property.default }, value)));
}

async function loadOptions() {
  try {
    const api = await readJson(await fetch("/openapi.json"));
    const fields = api.components.schemas.AskRequest.properties;
    fillSelect($("model"), fields.model); // after "server default": the field's default is null
    fillSelect($("retriever"), fields.retriever);
    const k = variants(fields.k).find((v) => v.type === "integer") || {};
    if (k.minimum != null) $("k").min = String(k.minimum);
    if (k.maximum != null) $("k").max = String(k.maximum);
    if (fields.k.default != null) $("k").value = String(fields.k.default);
    if (fields.abstain) $("abstain").checked = fields.abstain.default !== false;
  } catch (err) {
    showError(messageOf(err));
  }
}

// -- asking ---------------------------------------------------------------------------------------------

function askBody(question) {
  const body = { question, stream: true };
  if ($("retriever").value) body.retriever = $("retriever").value;
  const k = $("k").value.trim();
  if (k) body.k = Number(k);
  if ($("model").value) body.model = $("model").value;
  body.abstain = $("abstain").checked;
  return body;
}

async function ask(question) {
  if (inFlight) inFlight.abort();
  const controller = new AbortController();
  inFlight = controller;
  showError("");
  clearResults();
  $("answer").setAttribute("aria-busy", "true");
  $("answer-meta").textContent = "Retrieving and generating…";
  try {
    const response = await fetch("/v1/ask", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(askBody(question)),
      signal: controller.signal,
    });
    if (!response.ok || !(response.headers.get("content-type") || "").includes("text/event-stream")) {
      showResult(await readJson(response)); // an error, or a server that answered without streaming
      return;
    }
    let finished = false;
    for await (const { event, data } of serverEvents(response)) {
      const payload = JSON.parse(data);
      if (event === "token") {
        $("answer").textContent = payload.text;
      } else if (event === "done") {
        showResult(payload);
        finished = true;
      } else if (event === "error") {
        throw new ApiError(errorText(payload, "an error"));
      }
    }
    if (!finished) throw new ApiError("the answer stream ended early");
  } catch (err) {
    if (err.name === "AbortError") return;
    showError(messageOf(err));
    $("answer-meta").textContent = "";
  } finally {
    if (inFlight === controller) {
      inFlight = null;
      $("answer").removeAttribute("aria-busy");
    }
  }
}

// -- showing a result -----------------------------------------------------------------------------------

function clearResults() {
  $("answer").textContent = "";
  $("answer").classList.remove("abstained");
  $("passages").replaceChildren();
  $("heatmap").replaceChildren();
  $("heatmap-section").hidden = true;
}

const fmt = (p) => (p == null || Number.isNaN(p) ? "–" : p.toFixed(3));

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children.filter((c) => c != null));
  return node;
}

function bar(label, value, kind) {
  const fill = el("span", { className: `fill ${kind}` });
  fill.style.width = `${Math.max(0, Math.min(1, value || 0)) * 100}%`;
  const track = el("span", { className: "bar" }, fill);
  track.setAttribute("aria-hidden", "true"); // the label says the number
  return el("div", { className: "bar-row" }, el("span", { className: "bar-label" }, `${label} ${fmt(value)}`), track);
}

// the readers' metadata keys first, in this order; the fields a user kept follow in the API's order
const META_ORDER = ["source", "section", "page", "type", "modified"];

function metaLine(meta) {
  // one compact line "source: a.md · page: 3 · …", every key and value as text (the values are user data)
  const rank = (key) => (META_ORDER.includes(key) ? META_ORDER.indexOf(key) : META_ORDER.length);
  const entries = Object.entries(meta || {}).filter(([, value]) => value != null && value !== "")
    .sort(([a], [b]) => rank(a) - rank(b));
  if (!entries.length) return null;
  const items = entries.map(([key, value]) => el("span", { className: "meta-item" },
    el("span", { className: "meta-key" }, `${key}:`), ` ${value}`));
  return el("p", { className: "passage-meta muted small" }, ...items.flatMap((item, i) => (i ? [" · ", item] : [item])));
}

function showPassages(passages) {
  const list = $("passages");
  list.replaceChildren(...passages.map((p) => el("li", { className: "passage" },
    el("h3", { className: "passage-title" }, p.title || p.id),
    el("p", { className: "passage-text" }, p.text),
    metaLine(p.meta),
    bar("p(z|x)", p.prob, "prior"),
    bar("posterior", p.posterior, "posterior"),
    el("p", { className: "muted small" }, `id ${p.id} · score ${p.score == null ? "–" : p.score.toFixed(2)}`),
  )));
}

function showHeatmap(passages, tokens, posteriors) {
  const section = $("heatmap-section");
  if (!posteriors || !posteriors.length) {
    section.hidden = true;
    return;
  }
  const table = $("heatmap");
  const caption = el("caption", { className: "sr-only" },
    "Posterior of each passage (rows) after each answer token (columns)");
  const head = el("tr", {}, el("th", { scope: "col" }, "Passage"),
    ...posteriors.map((_, t) => el("th", { scope: "col", className: "token" }, tokens[t] ?? `#${t + 1}`)));
  const rows = passages.map((p, z) => el("tr", {},
    el("th", { scope: "row", className: "doc", title: p.title }, `${z + 1}. ${p.title || p.id}`),
    ...posteriors.map((perToken, t) => {
      const value = perToken[z];
      const cell = el("td", { className: "cell", title: fmt(value) },
        el("span", { className: "sr-only" }, fmt(value)));
      cell.dataset.p = String(value);
      cell.setAttribute("aria-label",
        `passage ${z + 1} (${p.title || p.id}), token ${t + 1} (${tokens[t] ?? ""}): ${fmt(value)}`);
      cell.style.setProperty("--p", String(Math.max(0, Math.min(1, value || 0))));
      return cell;
    })));
  table.replaceChildren(caption, el("thead", {}, head), el("tbody", {}, ...rows));
  section.hidden = false;
}

function showKb(kb) {
  if (!kb) return;
  $("kb-name").textContent = kb.name;
  $("kb-version").textContent = String(kb.version);
}

function showResult(result) {
  const answer = result.answers[0];
  $("answer").textContent = answer.abstained
    ? `The knowledge base does not seem to hold the answer (score ${fmt(answer.abstain_score)} below ` +
      `${fmt(answer.abstain_threshold)}; its best guess was "${answer.answer}").`
    : answer.answer || "(empty answer)";
  $("answer").classList.toggle("abstained", Boolean(answer.abstained));
  const t = result.timings || {};
  $("answer-meta").textContent = [
    answer.model,
    `knowledge base ${result.kb.name} v${result.kb.version}`,
    t.total_ms != null ? `${Math.round(t.total_ms)} ms` : null,
    result.batch_size > 1 ? `batched with ${result.batch_size - 1} other question(s)` : null,
    answer.truncated ? "cut at the token limit" : null,
  ].filter(Boolean).join(" · ");
  showKb(result.kb);
  showPassages(answer.passages);
  // token_texts are the words as read (" Bard"), tokens the tokenizer's pieces ("ĠBard")
  showHeatmap(answer.passages, (answer.token_texts || answer.tokens || []).map((t) => t.trim() || "·"),
    answer.token_posteriors);
}

// -- the knowledge base and the admin swap --------------------------------------------------------------

async function loadKb() {
  try {
    const kb = await readJson(await fetch("/v1/kb"));
    showKb(kb);
    $("kb-count").textContent = `(${kb.num_passages} passages)`;
    const select = $("kb-select");
    const names = kb.swappable && kb.swappable.length ? kb.swappable : [kb.name];
    select.replaceChildren(...names.map((name) => el("option", { value: name, selected: name === kb.name }, name)));
    $("swap").disabled = !(kb.swappable && kb.swappable.length);
    if ($("swap").disabled) $("admin-status").textContent = "This server has no other knowledge bases to swap to.";
  } catch (err) {
    showError(messageOf(err));
  }
}

async function swap() {
  const status = $("admin-status");
  const version = $("kb-version-input").value.trim();
  status.textContent = "Swapping…";
  try {
    const result = await readJson(await fetch("/v1/kb/swap", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${$("admin-token").value}` },
      body: JSON.stringify({ name: $("kb-select").value, version: version ? Number(version) : null }),
    }));
    status.textContent = `Now answering from ${result.kb.name} v${result.kb.version}. Ask again to use it.`;
    await loadKb();
  } catch (err) {
    status.textContent = `Swap failed: ${messageOf(err)}`;
  }
}

// -- wiring ---------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if (question) ask(question);
    else showError("question: type a question first");
  });
  $("swap-form").addEventListener("submit", (event) => {
    event.preventDefault();
    swap();
  });
  loadOptions();
  loadKb();
});
