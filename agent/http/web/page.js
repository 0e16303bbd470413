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
async function showPageImage(c, request, evidence = null) {
  let url = `/v1/documents/${documentPath(c.doc_id)}/pages/${c.page}?chunk=${encodeURIComponent(c.chunk_id)}`;
  if (evidence && evidence.passage_span) url += `&span=${evidence.passage_span[0]},${evidence.passage_span[1]}`;
  const what = evidence ? "the supporting sentence" : "the cited passage";
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
  image.alt = `page ${c.page} of ${c.doc_id}, ${what} highlighted`;
  image.src = pageImageUrl;
  $("passage-page-note").textContent = `page ${c.page}, ${what} highlighted`;
}

// the passage of citation `c` in the dialog; with `evidence` (a support sentence's), opened on that sentence: it alone
// highlighted in the passage text (its `passage_span`) and on the page image (`span=` of the page route)
function openPassage(c, evidence = null) {
  $("passage-title").textContent = c.title || c.doc_id;
  const where = [`doc ${c.doc_id}`];
  if (c.page !== null && c.page !== undefined) where.push(`page ${c.page}`);
  if (c.section && c.section.length) where.push(`section ${c.section.join(" › ")}`);
  where.push(`passage [${c.passage}]`);
  const span = evidence ? evidence.span : c.span;
  if (span) where.push(`characters ${span[0]}–${span[1]}`);
  $("passage-where").textContent = where.join(" · ");
  const text = $("passage-text");
  text.replaceChildren();
  if (c.text && evidence && evidence.passage_span) {  // the supporting sentence highlighted inside its passage
    const [start, end] = evidence.passage_span;
    text.append(c.text.slice(0, start), el("mark", "passage-span sentence-span", c.text.slice(start, end)), c.text.slice(end));
  } else if (c.text) text.appendChild(el("mark", "passage-span", c.text));  // the cited span, highlighted
  else text.textContent = "(the passage text was not recorded for this answer)";
  dialog.dataset.docId = c.doc_id;
  pageRequest += 1;
  clearPageImage();
  const boxes = evidence ? evidence.boxes : c.boxes;
  if (boxes && boxes.length && c.page !== null && c.page !== undefined) {
    showPageImage(c, pageRequest, evidence).catch((error) => {
      $("passage-page-note").textContent = `page image unavailable (${error.message})`;
    });
  }
  dialog.showModal();
  text.focus();  // not the close button: the key that opened the dialog must not close it
  const mark = text.querySelector(".sentence-span");
  if (mark) mark.scrollIntoView({ block: "nearest" });
}

// a control that acts on a click, Enter and Space (the keys never reach the dialog it opens)
function activate(node, action) {
  node.addEventListener("click", (event) => { event.stopPropagation(); action(); });
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      event.stopPropagation();
      action();
    }
  });
}

const MARKER = /\[(\d+)\]/g;

// `text` into `parent` with each `[n]` marker of a cited passage as a chip that opens it (on `evidence` when it is that
// passage's). Inside a focusable sentence the chips are not focusable themselves (the sentence is the control).
function appendMarked(parent, text, ctx, evidence = null, inSentence = false) {
  let at = 0;
  for (const match of text.matchAll(MARKER)) {
    const c = ctx.byNumber.get(Number(match[1]));
    if (!c) continue;
    if (match.index > at) parent.append(text.slice(at, match.index));
    const opensOn = evidence && evidence.passage === c.passage ? evidence : null;
    const chip = el(inSentence ? "span" : "button", "chip", match[0]);
    if (!inSentence) chip.type = "button";
    chip.dataset.passage = c.passage;
    chip.title = `open passage ${match[0]}: ${c.title || c.doc_id}`;
    if (!inSentence) chip.setAttribute("aria-label", chip.title);
    activate(chip, () => openPassage(c, opensOn));
    parent.appendChild(chip);
    at = match.index + match[0].length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

const LABELS = { SUPPORT: "supported", CONTRADICT: "contradicted", NOT_ENOUGH_INFO: "unsupported" };

// what a sentence's mark says (its tooltip and accessible name)
function sentenceNote(s) {
  const passage = s.evidence ? ` [${s.evidence.passage}]` : "";
  if (s.quote) return `quoted from the documents${passage}`;
  if (s.label === "CONTRADICT") return `contradicted by${passage || " the documents"}`;
  if (s.label === "NOT_ENOUGH_INFO") return "not supported by the documents";
  return `supported by${passage || " the documents"}`;
}

// one sentence of the answer, marked with its support label; with evidence, it opens the dialog on that sentence
function sentenceNode(text, s, ctx) {
  const node = el("span", `sentence ${LABELS[s.label] || ""}${s.quote ? " quote" : ""}`);
  node.dataset.label = s.label;
  const note = sentenceNote(s);
  node.title = note;
  const c = s.evidence ? ctx.byNumber.get(s.evidence.passage) : null;
  appendMarked(node, text, ctx, s.evidence, Boolean(c));
  if (c) {
    node.tabIndex = 0;
    node.setAttribute("role", "button");
    node.setAttribute("aria-label", `${text.replace(MARKER, "").trim()} (${note}; open the evidence)`);
    activate(node, () => openPassage(c, s.evidence));
  } else if (s.label !== "SUPPORT") {
    node.appendChild(el("span", "sr-only", ` (${note})`));
  }
  return node;
}

// "3 of 4 sentences supported", with contradictions, removals, repeats and quotes
function supportSummary(report) {
  const sentences = report.sentences;
  if (report.extractive) {
    return `no sentence of the generated answer is supported: ${sentences.filter((s) => s.quote).length} quote(s) from the documents instead`;
  }
  const supported = sentences.filter((s) => s.supported).length;
  const parts = [`${supported} of ${sentences.length} sentence${sentences.length === 1 ? "" : "s"} supported`];
  const contradicted = sentences.filter((s) => s.label === "CONTRADICT").length;
  if (contradicted) parts.push(`${contradicted} contradicted`);
  if (report.removed) parts.push(`${report.removed} unsupported removed`);
  if (report.repeated) parts.push(`${report.repeated} repeated collapsed`);
  if (report.repointed) parts.push(`${report.repointed} citation(s) re-pointed`);
  return parts.join(", ");
}

// the answer: its sentences marked by the support report when there is one, its `[n]` markers as chips
function renderAnswer(answer, result) {
  answer.replaceChildren();
  const ctx = { byNumber: new Map((result.citations || []).map((c) => [c.passage, c])) };
  const text = result.answer;
  const report = result.support;
  if (!report || !report.sentences || !report.sentences.length) {
    appendMarked(answer, text, ctx);
    return;
  }
  let at = 0;
  for (const s of report.sentences) {
    const [start, end] = s.span;
    if (start < at || end > text.length) continue;  // not an offset of this text: leave it unmarked
    if (start > at) appendMarked(answer, text.slice(at, start), ctx);
    answer.appendChild(sentenceNode(text.slice(start, end), s, ctx));
    at = end;
  }
  if (at < text.length) appendMarked(answer, text.slice(at), ctx);
}

function showResult(turn, answer, result) {
  renderAnswer(answer, result);
  if (result.refused) answer.classList.add("refused");
  if (result.support && result.support.sentences && result.support.sentences.length) {
    const summary = el("div", "support-summary", supportSummary(result.support));
    summary.dataset.supported = result.support.sentences.filter((s) => s.supported).length;
    answer.after(summary);
  }
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
      activate(item, () => openPassage(c));
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
