// The web page of `rag serve`: past conversations (side list), a collection picker limited to the API key's
// collections, the streamed answer with citations that open their passage, and the document library (paged,
// searchable, uploads with per-file progress). Plain script, no build step; text from the server is only ever set
// with textContent (answers, titles and passages are untrusted).
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("ask-form");
const input = $("question");
const button = $("send");
const log = $("log");
const conversationLabel = $("conversation");
const conversationList = $("conversations");
const moreConversations = $("more-conversations");
const picker = $("collection");

const KEY_ITEM = "triton-rag-api-key";
// the stored conversation this page asks in (POST /v1/conversations); kept across reloads, dropped by "New conversation"
const CONVERSATION_ITEM = "triton-rag-conversation";
const PAGE_SIZE = 50;

function authHeaders(headers) {
  const key = sessionStorage.getItem(KEY_ITEM);
  if (key) headers["Authorization"] = `Bearer ${key}`;
  return headers;
}

// one prompt for the key however many requests were refused at once
let keyPrompt = null;
function askForKey() {
  if (!keyPrompt) {
    keyPrompt = Promise.resolve().then(() => {
      const key = window.prompt("This server needs an API key:");
      if (key) sessionStorage.setItem(KEY_ITEM, key);
      return Boolean(key);
    }).finally(() => { setTimeout(() => { keyPrompt = null; }, 0); });
  }
  return keyPrompt;
}

// after a 401 of a request sent with `sentWith` (the key stored then, or null): retry at once with a key stored since
// (another refused request's prompt answered it), else ask for one
async function keyForRetry(sentWith) {
  const stored = sessionStorage.getItem(KEY_ITEM);
  return (stored !== null && stored !== sentWith) || askForKey();
}

// fetch with the API key; on a 401 (the server has an API key) ask for it once, keep it for this tab's session, retry
async function apiFetch(url, init = {}) {
  const send = () => fetch(url, { ...init, headers: authHeaders({ ...(init.headers || {}) }) });
  const sentWith = sessionStorage.getItem(KEY_ITEM);
  let response = await send();
  if (response.status === 401 && await keyForRetry(sentWith)) response = await send();
  return response;
}

async function errorText(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (response.status === 401) sessionStorage.removeItem(KEY_ITEM);
    return `${body.error}: ${body.detail}`;
  } catch (_) {
    return text;  // not JSON: show as is
  }
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;  // never innerHTML: answers and passages are untrusted text
  return node;
}

// --- collections: only the key's (GET /v1/collections) ---
async function loadCollections() {
  const response = await apiFetch("/v1/collections");
  if (!response.ok) return;
  const body = await response.json();
  picker.querySelectorAll("option[value]:not([value=''])").forEach((o) => o.remove());
  for (const c of body.collections) {
    const option = el("option", "", `${c.name} (${c.documents})`);
    option.value = c.name;
    picker.appendChild(option);
  }
  picker.firstElementChild.textContent = body.scoped ? "all my collections" : "all collections";
}

picker.addEventListener("change", () => { docState.offset = 0; refreshDocuments(); });

// --- conversations: the side list (GET /v1/conversations), open, continue, delete ---
function currentConversation() { return localStorage.getItem(CONVERSATION_ITEM); }

function showConversation(conversation) {
  conversationLabel.textContent = conversation ? `conversation: ${conversation.title || "(new)"}` : "";
  conversationLabel.dataset.id = conversation ? conversation.id : "";
  conversationLabel.dataset.title = conversation ? conversation.title : "";
  for (const item of conversationList.children)
    item.classList.toggle("current", Boolean(conversation) && item.dataset.id === conversation.id);
}

let conversationCursor = null;

function conversationItem(c) {
  const item = el("li", "conversation-item");
  item.dataset.id = c.id;
  if (c.id === currentConversation()) item.classList.add("current");
  const open = el("button", "open", c.title || "(untitled)");
  open.type = "button";
  open.title = `${c.title} — ${c.turn_count} turn(s), ${new Date(c.updated_at).toLocaleString()}`;
  open.addEventListener("click", () => openConversation(c.id));
  const remove = el("button", "delete-conversation", "×");
  remove.type = "button";
  remove.title = "delete this conversation";
  remove.setAttribute("aria-label", `delete conversation ${c.title}`);
  remove.addEventListener("click", () => deleteConversation(c.id));
  item.append(open, remove);
  return item;
}

async function loadConversations(more = false) {
  const url = more && conversationCursor ? `/v1/conversations?limit=50&cursor=${encodeURIComponent(conversationCursor)}`
    : "/v1/conversations?limit=50";
  const response = await apiFetch(url);
  if (!response.ok) return;
  const body = await response.json();
  if (!more) conversationList.replaceChildren();
  for (const c of body.conversations) conversationList.appendChild(conversationItem(c));
  conversationCursor = body.next_cursor;
  moreConversations.hidden = !body.next_cursor;
  conversationList.dataset.total = body.total;
}
moreConversations.addEventListener("click", () => loadConversations(true));

async function openConversation(id) {
  const response = await apiFetch(`/v1/conversations/${encodeURIComponent(id)}`);
  if (response.status === 404) {  // deleted meanwhile
    if (currentConversation() === id) localStorage.removeItem(CONVERSATION_ITEM);
    await loadConversations();
    return;
  }
  if (!response.ok) return;
  const conversation = await response.json();
  localStorage.setItem(CONVERSATION_ITEM, conversation.id);
  log.replaceChildren();
  showConversation(conversation);
  for (const stored of conversation.turns) {
    const { turn, answer } = newTurn(stored.question);
    turn.classList.add("stored");
    showResult(turn, answer, stored);
  }
  input.focus();
}

async function deleteConversation(id) {
  const response = await apiFetch(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  if (!response.ok && response.status !== 404) return;
  if (currentConversation() === id) startAfresh();
  await loadConversations();
}

function startAfresh() {
  localStorage.removeItem(CONVERSATION_ITEM);
  log.replaceChildren();
  showConversation(null);
}

$("new-conversation").addEventListener("click", () => { startAfresh(); input.focus(); });

// the id of the page's conversation, created on the first question
async function conversationId() {
  const stored = currentConversation();
  if (stored) return stored;
  const response = await apiFetch("/v1/conversations", { method: "POST" });
  if (!response.ok) throw new Error(`cannot start a conversation: HTTP ${response.status} ${await response.text()}`);
  const conversation = await response.json();
  localStorage.setItem(CONVERSATION_ITEM, conversation.id);
  showConversation(conversation);
  return conversation.id;
}

// --- answers and citations ---
const dialog = $("passage");
dialog.addEventListener("close", () => { pageRequest += 1; clearPageImage(); });

let pageImageUrl = null;  // the object URL of the page image shown, revoked when another replaces it
let pageRequest = 0;  // the latest citation opened: an image that arrives for an earlier one is dropped

// the doc id as one path segment, "/" sent as %2F (the server decodes it): a doc id with "." or ".." segments
// ("a/../b.pdf") would otherwise be resolved by the browser into another document's path
function documentPath(docId) {
  return encodeURIComponent(docId);
}

function clearPageImage() {
  const figure = $("passage-page");
  figure.hidden = true;
  $("passage-image").removeAttribute("src");
  $("passage-page-note").textContent = "";
  if (pageImageUrl) URL.revokeObjectURL(pageImageUrl);
  pageImageUrl = null;
}

// the cited page rendered by the server with the passage's lines highlighted (GET /v1/documents/{id}/pages/{n}):
// fetched with the API key, shown from an object URL
async function showPageImage(c, request) {
  const url = `/v1/documents/${documentPath(c.doc_id)}/pages/${c.page}?chunk=${encodeURIComponent(c.chunk_id)}`;
  const figure = $("passage-page");
  figure.hidden = false;
  $("passage-page-note").textContent = `page ${c.page}, loading…`;
  const response = await apiFetch(url);
  if (request !== pageRequest) return;
  if (!response.ok) {
    $("passage-page-note").textContent = `page image unavailable (${await errorText(response)})`;
    return;
  }
  const blob = await response.blob();
  if (request !== pageRequest) return;
  pageImageUrl = URL.createObjectURL(blob);
  const image = $("passage-image");
  image.alt = `page ${c.page} of ${c.doc_id}, the cited passage highlighted`;
  image.src = pageImageUrl;
  $("passage-page-note").textContent = `page ${c.page}, the cited passage highlighted`;
}

function openPassage(c) {
  $("passage-title").textContent = c.title || c.doc_id;
  const where = [`doc ${c.doc_id}`];
  if (c.page !== null && c.page !== undefined) where.push(`page ${c.page}`);
  if (c.section && c.section.length) where.push(`section ${c.section.join(" › ")}`);
  where.push(`passage [${c.passage}]`);
  if (c.span) where.push(`characters ${c.span[0]}–${c.span[1]}`);
  $("passage-where").textContent = where.join(" · ");
  const text = $("passage-text");
  text.replaceChildren();
  if (c.text) text.appendChild(el("mark", "passage-span", c.text));  // the cited span, highlighted
  else text.textContent = "(the passage text was not recorded for this answer)";
  dialog.dataset.docId = c.doc_id;
  pageRequest += 1;
  clearPageImage();
  if (c.boxes && c.boxes.length && c.page !== null && c.page !== undefined) {
    showPageImage(c, pageRequest).catch((error) => {
      $("passage-page-note").textContent = `page image unavailable (${error.message})`;
    });
  }
  dialog.showModal();
}

function showResult(turn, answer, result) {
  answer.textContent = result.answer;
  if (result.refused) answer.classList.add("refused");
  if (result.truncated) turn.appendChild(el("div", "meta truncated", "answer cut short: the model reached its output limit"));
  if (result.dropped_passages && result.dropped_passages.length)
    turn.appendChild(el("div", "meta", `${result.dropped_passages.length} lower-ranked passages left out to fit the model's context window`));
  if (result.citations.length) {
    const list = el("ol", "citations");
    for (const c of result.citations) {
      const where = c.location ? ` — ${c.location}` : "";
      const score = typeof c.score === "number" ? `, score ${c.score.toFixed(4)}` : "";
      const item = el("li", "citation", `[${c.passage}] doc ${c.doc_id} (${c.chunk_id}${score}) ${c.title}${where}`);
      item.dataset.docId = c.doc_id;
      item.tabIndex = 0;
      item.title = "show the cited passage";
      item.addEventListener("click", () => openPassage(c));
      item.addEventListener("keydown", (event) => { if (event.key === "Enter") openPassage(c); });
      list.appendChild(item);
    }
    turn.appendChild(list);
  } else {
    turn.appendChild(el("div", "meta", result.refused ? "no sources: the documents do not cover this" : "no sources cited"));
  }
  const t = result.timings_ms;
  if (t) turn.appendChild(el("div", "meta", Object.keys(t).map((k) => `${k} ${Math.round(t[k])} ms`).join(", ")));
}

function newTurn(question) {
  const turn = el("div", "turn");
  turn.appendChild(el("div", "question", question));
  const activity = el("div", "activities");
  const answer = el("div", "answer");
  turn.append(activity, answer);
  log.appendChild(turn);
  return { turn, activity, answer };
}

// after a reload: the stored turns of the page's conversation (question, answer, sources)
async function restoreConversation() {
  const id = currentConversation();
  if (id) await openConversation(id);
}

async function ask(question, policy) {
  const { turn, activity, answer } = newTurn(question);
  const body = { question, conversation_id: await conversationId() };
  if (policy) body.policy = policy;
  if (picker.value) body.collections = [picker.value];
  const send = () => apiFetch("/v1/ask/stream", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
    body: JSON.stringify(body),
  });
  let response = await send();
  if (response.status === 404) {  // the conversation was deleted elsewhere: go on in a new one
    localStorage.removeItem(CONVERSATION_ITEM);
    body.conversation_id = await conversationId();
    response = await send();
  }
  if (!response.ok) {
    answer.appendChild(el("div", "error", `error: HTTP ${response.status} ${await errorText(response)}`));
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (!data.length) continue;
      const payload = JSON.parse(data.join("\n"));
      if (event === "text") answer.textContent += payload.text;
      else if (event === "restart") answer.textContent = "";
      else if (event === "tool_call") activity.appendChild(el("div", "activity", `→ ${payload.tool} ${JSON.stringify(payload.args)}`));
      else if (event === "tool_result") activity.appendChild(el("div", "activity", `← ${payload.tool}: ${payload.summary}`));
      else if (event === "result") {
        showResult(turn, answer, payload);
        if (!conversationLabel.dataset.title)  // the server names a new conversation after its first question
          showConversation({ id: payload.conversation_id, title: question.slice(0, 80) });
        loadConversations();
      }
      else if (event === "error") answer.appendChild(el("div", "error", `error (${payload.error}): ${payload.detail}`));
    }
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = input.value.trim();
  if (!question) return;
  input.value = "";
  button.disabled = true;
  try {
    await ask(question, $("policy").value);
  } catch (err) {
    log.appendChild(el("div", "turn error", `error: ${err}`));
  } finally {
    button.disabled = false;
    input.focus();
  }
});

// --- documents: paged (50 a page) and searchable by title or id, with delete ---
const docsBody = document.querySelector("#docs tbody");
const search = $("doc-search");
const pageInfo = $("page-info");
const docState = { offset: 0, total: 0, q: "" };
let docsRequest = 0;

function documentsUrl() {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(docState.offset) });
  if (docState.q) params.set("q", docState.q);
  if (picker.value) params.set("collection", picker.value);
  return `/v1/documents?${params}`;
}

async function refreshDocuments() {
  const mine = ++docsRequest;  // a slower earlier answer never overwrites a later one
  const response = await apiFetch(documentsUrl());
  if (!response.ok || mine !== docsRequest) return;
  const body = await response.json();
  if (mine !== docsRequest) return;
  docState.total = body.total;
  if (docState.offset > 0 && docState.offset >= body.total) {  // the last page emptied (a delete): step back
    docState.offset = Math.max(0, Math.floor((body.total - 1) / PAGE_SIZE) * PAGE_SIZE);
    return refreshDocuments();
  }
  docsBody.replaceChildren();
  for (const d of body.documents) {
    const row = document.createElement("tr");
    row.className = "doc";
    row.dataset.docId = d.doc_id;
    row.appendChild(el("td", "doc-id", d.doc_id));
    row.appendChild(el("td", "doc-title", d.title));
    row.appendChild(el("td", "", `${d.chunks} chunks`));
    const cell = document.createElement("td");
    const remove = el("button", "delete", "Delete");
    remove.addEventListener("click", async () => {
      const params = new URLSearchParams({ collection: d.collection });
      await apiFetch(`/v1/documents/${encodeURIComponent(d.doc_id)}?${params}`, { method: "DELETE" });
      await refreshDocuments();
    });
    cell.appendChild(remove);
    row.appendChild(cell);
    docsBody.appendChild(row);
  }
  const pages = Math.max(1, Math.ceil(body.total / PAGE_SIZE));
  const page = Math.floor(docState.offset / PAGE_SIZE) + 1;
  const first = body.total ? docState.offset + 1 : 0;
  pageInfo.textContent = `${first}–${docState.offset + body.documents.length} of ${body.total} (page ${page}/${pages})`;
  pageInfo.dataset.page = page;
  pageInfo.dataset.pages = pages;
  $("first-page").disabled = $("prev-page").disabled = docState.offset === 0;
  $("next-page").disabled = $("last-page").disabled = docState.offset + PAGE_SIZE >= body.total;
}

function goToOffset(offset) {
  docState.offset = Math.max(0, offset);
  refreshDocuments();
}
$("first-page").addEventListener("click", () => goToOffset(0));
$("prev-page").addEventListener("click", () => goToOffset(docState.offset - PAGE_SIZE));
$("next-page").addEventListener("click", () => goToOffset(docState.offset + PAGE_SIZE));
$("last-page").addEventListener("click", () => goToOffset(Math.floor((docState.total - 1) / PAGE_SIZE) * PAGE_SIZE));

let searchTimer = null;
search.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { docState.q = search.value.trim(); goToOffset(0); }, 200);
});

// --- uploads: one ingestion job per drop or pick, its progress and each file's result ---
const drop = $("drop");
const filePicker = $("files");
const jobs = $("jobs");

function sendFiles(data, onProgress) {  // XMLHttpRequest: fetch reports no upload progress
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/documents/files");
    const headers = authHeaders({});
    for (const name of Object.keys(headers)) xhr.setRequestHeader(name, headers[name]);
    xhr.upload.addEventListener("progress", (event) => { if (event.lengthComputable) onProgress(event.loaded / event.total); });
    xhr.addEventListener("load", () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (_) { body = { detail: xhr.responseText }; }
      resolve({ status: xhr.status, body });
    });
    xhr.addEventListener("error", () => reject(new Error("the upload failed (network)")));
    xhr.send(data);
  });
}

function describeJob(job) {
  const errors = job.errors.map((e) => `${e.file}: ${e.error}`).join("; ");
  return `job ${job.id}: ${job.status}, ${job.files_done}/${job.files_total} files, ${job.chunks} chunks` +
    (errors ? ` — errors: ${errors}` : "");
}

// each file's state: its error if it has one, done once the job has got past it (files are ingested in order)
function showFiles(list, names, job) {
  const finished = job.status === "done" || job.status === "failed";
  names.forEach((name, i) => {
    const item = list.children[i];
    const error = job.errors.find((e) => e.file === name || name.endsWith(`/${e.file}`) || name === `${job.prefix}${e.file}`);
    let state = "queued";
    if (error) state = "error";
    else if (i < job.files_done || (finished && job.status === "done")) state = "done";
    else if (job.status === "running" && i === job.files_done) state = "indexing";
    else if (finished) state = "error";
    item.dataset.state = state;
    item.textContent = `${name}: ${error ? `error — ${error.error}` : state}`;
  });
}

async function upload(fileList) {
  const files = Array.from(fileList);
  if (!files.length) return;
  const data = new FormData();
  for (const f of files) data.append("files", f, f.name);
  if (picker.value) data.append("collection", picker.value);
  const box = el("div", "job");
  const line = el("div", "job-line", `uploading ${files.length} file(s)…`);
  const bar = el("progress", "job-progress");
  bar.max = 1;
  bar.value = 0;
  const list = el("ul", "job-files");
  for (const f of files) {
    const item = el("li", "job-file", `${f.name}: uploading`);
    item.dataset.state = "uploading";
    list.appendChild(item);
  }
  box.append(line, bar, list);
  jobs.prepend(box);
  let response;
  const sentWith = sessionStorage.getItem(KEY_ITEM);
  try {
    response = await sendFiles(data, (fraction) => { bar.value = fraction * 0.1; });
  } catch (err) {
    box.classList.add("error");
    line.textContent = `upload failed: ${err.message}`;
    return;
  }
  if (response.status === 401 && await keyForRetry(sentWith)) response = await sendFiles(data, () => {});
  if (response.status !== 202) {
    box.classList.add("error");
    box.dataset.status = "refused";
    line.textContent = `upload refused: HTTP ${response.status} ${response.body.detail || ""}`;
    return;
  }
  const accepted = response.body;
  for (;;) {
    const reply = await apiFetch(accepted.status_url);
    if (reply.ok) {
      const status = await reply.json();
      line.textContent = describeJob(status);
      box.dataset.status = status.status;
      bar.max = Math.max(1, status.files_total);
      bar.value = status.files_done;
      showFiles(list, accepted.files, status);
      if (status.status === "done" || status.status === "failed") break;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await Promise.all([refreshDocuments(), loadCollections()]);
}

filePicker.addEventListener("change", () => { upload(filePicker.files); filePicker.value = ""; });
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  upload(event.dataTransfer.files);
});

// settled: every first read answered and drawn (the page-settle benchmark reads `window.pageSettledMs`)
Promise.all([loadCollections(), loadConversations(), refreshDocuments(), restoreConversation()])
  .catch(() => {})
  .finally(() => {
    window.pageSettledMs = performance.now();
    document.body.dataset.settled = "true";
  });
