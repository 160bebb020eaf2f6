// The playground: lists the served models, streams one response over SSE (fetch, no
// EventSource: that one cannot POST) and shows its reasoning and answer as they arrive.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "spate.playground.apiKey";

let running = null; // the AbortController of the response being streamed

function headers() {
  const result = { "content-type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) result.authorization = `Bearer ${key}`;
  return result;
}

async function errorMessage(reply) {
  try {
    const body = await reply.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (_) {
    // not JSON: fall through to the status line
  }
  return `${reply.status} ${reply.statusText}`;
}

function showError(message) {
  $("error").textContent = message || "";
}

async function loadModels() {
  const select = $("model");
  const chosen = select.value;
  let reply;
  try {
    reply = await fetch("/v1/models", { headers: headers() });
  } catch (error) {
    $("server-status").textContent = `the server cannot be reached: ${error}`;
    return false;
  }
  if (reply.status === 401) {
    $("server-status").textContent = "this server needs an API key";
    $("api-key").focus();
    return false;
  }
  if (!reply.ok) {
    $("server-status").textContent = await errorMessage(reply);
    return false;
  }
  const models = (await reply.json()).data;
  select.replaceChildren(
    ...models.map((model) => {
      const option = new Option(model.id, model.id);
      option.dataset.reasoning = String(Boolean(model.reasoning));
      return option;
    }),
  );
  if (models.some((model) => model.id === chosen)) select.value = chosen;
  $("server-status").textContent = models.length
    ? `${models.length} model${models.length === 1 ? "" : "s"} served`
    : "no model is served right now (no live worker)";
  updateThinkingControls();
  return models.length > 0;
}

// The list is read again every two seconds until a model is served (a worker still
// loading its model, a server starting), then every thirty: workers come and go.
async function watchModels() {
  const served = await loadModels();
  setTimeout(watchModels, served ? 30_000 : 2_000);
}

function modelReasons() {
  const option = $("model").selectedOptions[0];
  return Boolean(option) && option.dataset.reasoning === "true";
}

function updateThinkingControls() {
  const reasons = modelReasons();
  $("thinking").disabled = !reasons;
  $("thinking-budget").disabled = !reasons || !$("thinking").checked;
}

function requestBody() {
  const body = { model: $("model").value, input: $("prompt").value, stream: true };
  const maxTokens = $("max-output-tokens").value;
  if (maxTokens !== "") body.max_output_tokens = Number(maxTokens);
  const temperature = $("temperature").value;
  if (temperature !== "") body.temperature = Number(temperature);
  if (modelReasons()) {
    const thinking = $("thinking").checked;
    body.reasoning = { effort: thinking ? "medium" : "none" };
    const budget = $("thinking-budget").value;
    if (thinking && budget !== "") body.thinking_token_budget = Number(budget);
  }
  return body;
}

// One SSE event from its lines: `event:`, `data:` (joined by newlines), `id:`; a line
// that starts with `:` is a keep-alive comment.
function parseEvent(block) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
  }
  // A stream ends with `data: [DONE]` after its terminal event.
  if (!data.length || data.join("\n") === "[DONE]") return null;
  return { type, data: JSON.parse(data.join("\n")) };
}

async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) yield event;
    }
  }
}

function setStat(name, value) {
  $(`stat-${name}`).textContent = value === undefined || value === null ? "–" : String(value);
}

function milliseconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

function resetOutput() {
  $("reasoning").textContent = "";
  $("answer").textContent = "";
  showError("");
  for (const name of ["ttft", "total", "input-tokens", "output-tokens", "reasoning-tokens",
                      "response-id"]) setStat(name, null);
  setStat("status", "sending");
}

function finish(response) {
  setStat("status", response.status);
  const usage = response.usage || {};
  setStat("input-tokens", usage.input_tokens);
  setStat("output-tokens", usage.output_tokens);
  const details = usage.output_tokens_details || {};
  setStat("reasoning-tokens", details.reasoning_tokens);
  if (response.error && response.error.message) showError(response.error.message);
  if (response.incomplete_details && response.incomplete_details.reason) {
    setStat("status", `${response.status} (${response.incomplete_details.reason})`);
  }
}

async function send(event) {
  event.preventDefault();
  if (running) return;
  resetOutput();
  running = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  const started = performance.now();
  let firstToken = null;
  try {
    const reply = await fetch("/v1/responses", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(requestBody()),
      signal: running.signal,
    });
    if (!reply.ok) {
      setStat("status", `HTTP ${reply.status}`);
      showError(await errorMessage(reply));
      return;
    }
    for await (const { type, data } of sseEvents(reply.body)) {
      const pane = type === "response.reasoning_text.delta" ? $("reasoning")
        : type === "response.output_text.delta" ? $("answer") : null;
      if (pane) {
        if (firstToken === null) {
          firstToken = performance.now();
          setStat("ttft", milliseconds(firstToken - started));
        }
        pane.textContent += data.delta;
        pane.scrollTop = pane.scrollHeight;
      } else if (type === "response.created" || type === "response.in_progress") {
        setStat("response-id", data.response.id);
        setStat("status", data.response.status);
      } else if (type === "response.completed" || type === "response.incomplete"
                 || type === "response.failed") {
        finish(data.response);
      } else if (type === "error") {
        showError(data.message);
      }
    }
  } catch (error) {
    if (error.name === "AbortError") setStat("status", "stopped");
    else showError(String(error));
  } finally {
    setStat("total", milliseconds(performance.now() - started));
    running = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

function init() {
  $("api-key").value = sessionStorage.getItem(KEY_STORAGE) || "";
  $("api-key").addEventListener("change", () => {
    sessionStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    loadModels();
  });
  $("model").addEventListener("change", updateThinkingControls);
  $("thinking").addEventListener("change", updateThinkingControls);
  $("request-form").addEventListener("submit", send);
  $("stop").addEventListener("click", () => running && running.abort());
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("send").click();
  });
  watchModels();
}

init();
