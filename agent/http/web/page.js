// The web page of `rag serve`: past conversations (side list), a collection picker limited to the API key's
// collections, the streamed answer (Markdown, sanitised: built node by node, never from HTML) with its support labels
// and `[n]` chips that open their passage, thumbs to rate it (with a comment and the right source), and the document
// library (a drawer: paged, searchable, uploads with per-file progress, deletes confirmed), signed in with an API key
// or through an OpenID Connect issuer (authorization code + PKCE). Plain script, no build step; text from the server
// is only ever set with textContent (answers, titles and passages are untrusted).
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("ask-form");
const input = $("question");
const button = $("send");
const stopButton = $("stop");
const log = $("log");
const conversationLabel = $("conversation");
const conversationList = $("conversations");
const moreConversations = $("more-conversations");
const picker = $("collection");

const KEY_ITEM = "triton-rag-api-key";
const TOKEN_ITEM = "triton-rag-id-token";  // the issuer's ID token of this tab's sign-in (its audience: the client id)
const PENDING_ITEM = "triton-rag-sign-in";  // {state, nonce, verifier} of a sign-in sent to the issuer
// the stored conversation this page asks in (POST /v1/conversations); kept across reloads, dropped by "New conversation"
const CONVERSATION_ITEM = "triton-rag-conversation";
const COLLECTIONS_ITEM = "triton-rag-conversation-collections";  // conversation id -> the collection it searched
const CREATED_ITEM = "triton-rag-created-collections";  // collections made on this page, not yet holding a document
const DEVELOPER_ITEM = "triton-rag-developer";
const PAGE_SIZE = 50;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;  // never innerHTML: answers and passages are untrusted text
  return node;
}

function readJson(storage, item, fallback) {
  try { return JSON.parse(storage.getItem(item)) || fallback; } catch (_) { return fallback; }
}

// --- sign-in through an OpenID Connect issuer (GET /auth/config): authorization code with PKCE (S256) ---
// The page asks the issuer for a code (its authorize page, then back here with ?code=&state=), has the server
// exchange it (POST /auth/token: the issuer's token endpoint need not answer this origin) and keeps the ID token in
// sessionStorage until it expires or "Sign out"; the API verifies it on every request.
let issuer = { enabled: false };

function base64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(bytes = 32) {  // 32 bytes: 43 characters, the shortest PKCE verifier (RFC 7636)
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

async function s256(text) {
  return base64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

// the claims of a JWT (not verified: the server does that), or null when it is not one
function tokenClaims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0))));
    return claims && typeof claims === "object" ? claims : null;
  } catch (_) {
    return null;
  }
}

// the ID token while it is valid; an expired one (or one that is not a JWT) is dropped
function signedInToken() {
  const token = sessionStorage.getItem(TOKEN_ITEM);
  if (!token) return null;
  const claims = tokenClaims(token);
  if (claims && typeof claims.exp === "number" && claims.exp * 1000 > Date.now()) return token;
  sessionStorage.removeItem(TOKEN_ITEM);
  return null;
}

// once the token expires: dropped, and the Sign in button shown again
function expireAt(token) {
  const ms = tokenClaims(token).exp * 1000 - Date.now();
  setTimeout(() => showAccount(), Math.min(Math.max(ms, 0) + 50, 2 ** 31 - 1));
}

function redirectUri() { return `${location.origin}/`; }

// to the issuer's authorize page with a fresh verifier, state and nonce (kept for the way back)
async function startSignIn() {
  if (!window.isSecureContext) return showAccount("Sign-in needs this page over HTTPS (or on localhost).");
  let endpoints;
  try {
    const response = await fetch("/auth/discovery");
    if (!response.ok) return showAccount(`Sign-in failed: ${await errorText(response)}`);
    endpoints = await response.json();
  } catch (_) {
    return showAccount("Sign-in failed: the server cannot be reached.");
  }
  const pending = { state: randomText(16), nonce: randomText(16), verifier: randomText() };
  sessionStorage.setItem(PENDING_ITEM, JSON.stringify(pending));
  const url = new URL(endpoints.authorization_endpoint);
  const query = {
    response_type: "code",
    client_id: issuer.client_id,
    redirect_uri: redirectUri(),
    scope: issuer.scopes,
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: await s256(pending.verifier),
    code_challenge_method: "S256",
  };
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  location.assign(url.href);
}

// back from the issuer (?code=&state= or ?error=&state=): the state checked, the code exchanged, the URL cleaned;
// resolves to a sentence when the sign-in failed, else ""
async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  if (!params.has("state") || !(params.has("code") || params.has("error"))) return "";
  const pending = readJson(sessionStorage, PENDING_ITEM, null);
  sessionStorage.removeItem(PENDING_ITEM);
  const back = new URL(location.href);
  for (const name of ["code", "state", "session_state", "iss", "error", "error_description", "error_uri"]) {
    back.searchParams.delete(name);
  }
  history.replaceState(history.state, "", back.pathname + back.search + back.hash);
  if (!pending || params.get("state") !== pending.state) {
    return "Sign-in failed: the answer is not for this tab's request.";
  }
  if (params.has("error")) return `Sign-in refused: ${params.get("error_description") || params.get("error")}`;
  const response = await fetch("/auth/token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: params.get("code"), code_verifier: pending.verifier, redirect_uri: redirectUri() }),
  });
  if (!response.ok) return `Sign-in failed: ${await errorText(response)}`;
  const token = (await response.json()).id_token;
  const claims = tokenClaims(token || "");
  const audience = claims && [].concat(claims.aud);
  if (!claims || claims.nonce !== pending.nonce || !audience.includes(issuer.client_id)) {
    return "Sign-in failed: the issuer's ID token is not for this page's request.";
  }
  sessionStorage.setItem(TOKEN_ITEM, token);
  return "";
}

// how this server signs in, then the way back from the issuer; before the page's first reads
async function startAuth() {
  try {
    const response = await fetch("/auth/config");
    if (response.ok) issuer = await response.json();
  } catch (_) { /* an older server: API keys only */ }
  const unreachable = () => "Sign-in failed: the server cannot be reached.";
  const problem = issuer.enabled ? await finishSignIn().catch(unreachable) : "";
  const token = signedInToken();
  if (token) expireAt(token);
  showAccount(problem);
}

// --- the API key: a sign-in panel (masked), kept for this tab's session ---
// what the page sends as `Authorization: Bearer`: the issuer's ID token while it is valid, else the API key
function bearer() {
  return signedInToken() || sessionStorage.getItem(KEY_ITEM);
}

function authHeaders(headers) {
  const token = bearer();
  if (token) headers["Authorization"] = `Bearer ${token}`;
  return headers;
}

// forget a credential the server refused (the ID token or the API key, whichever it was)
function forget(credential) {
  for (const item of [TOKEN_ITEM, KEY_ITEM]) {
    if (sessionStorage.getItem(item) === credential) sessionStorage.removeItem(item);
  }
}

const signIn = $("sign-in");
const keyInput = $("api-key");
const signInMessage = $("sign-in-message");
const account = $("account");
const who = $("who");
let signInWait = null;  // one panel however many requests were refused at once: resolves true when a key was accepted

function showAccount(problem = "") {
  const claims = signedInToken() && tokenClaims(sessionStorage.getItem(TOKEN_ITEM));
  account.textContent = claims || sessionStorage.getItem(KEY_ITEM) ? "Sign out" : "Sign in";
  who.classList.toggle("error", Boolean(problem));
  who.textContent = problem || (claims ? `Signed in as ${claims.email || claims.name || claims.sub}` : "");
  who.hidden = !who.textContent;
  $("issuer-sign-in").hidden = !issuer.enabled;
  $("key-note").textContent = issuer.enabled
    ? "Or an API key: it is kept in this tab only, until you close it."
    : "This server needs an API key. It is kept in this tab only, until you close it.";
}

// the panel; resolves true once the server accepted the key typed, false when dismissed
function askForKey(message = "") {
  if (!signInWait) {
    signInWait = new Promise((resolve) => {
      signInMessage.textContent = message;
      keyInput.value = "";
      const finish = (accepted) => {
        signIn.removeEventListener("close", onClose);
        if (signIn.open) signIn.close();
        signInWait = null;
        showAccount();
        resolve(accepted);
      };
      const onClose = () => finish(false);
      signIn.addEventListener("close", onClose);
      $("sign-in-form").onsubmit = async (event) => {
        event.preventDefault();
        const key = keyInput.value.trim();
        if (!key) return;
        signInMessage.textContent = "Checking the key…";
        let response;
        try {
          response = await fetch("/v1/collections", { headers: { Authorization: `Bearer ${key}` } });
        } catch (_) {
          signInMessage.textContent = "The server cannot be reached; try again.";
          return;
        }
        if (response.status === 401) {
          signInMessage.textContent = "That key was not accepted. Check it (keys are case-sensitive) and try again.";
          keyInput.select();
          return;
        }
        sessionStorage.setItem(KEY_ITEM, key);
        finish(true);
      };
      $("sign-in-cancel").onclick = () => finish(false);
      signIn.showModal();
      (issuer.enabled ? $("sign-in-issuer") : keyInput).focus();
    });
  }
  return signInWait;
}

// the issuer's end-session endpoint for a sign-out (OpenID Connect RP-Initiated Logout 1.0), or null: none named,
// or the server cannot read the issuer's discovery document (then only this tab forgets the token)
async function endSessionUrl(idToken) {
  try {
    const response = await fetch("/auth/discovery");
    const endpoint = response.ok ? (await response.json()).end_session_endpoint : null;
    if (!endpoint) return null;
    const url = new URL(endpoint);
    const query = { id_token_hint: idToken, client_id: issuer.client_id, post_logout_redirect_uri: redirectUri() };
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
    return url.href;
  } catch (_) {
    return null;
  }
}

account.addEventListener("click", async () => {
  if (bearer()) {
    const idToken = issuer.enabled ? sessionStorage.getItem(TOKEN_ITEM) : null;
    for (const item of [TOKEN_ITEM, KEY_ITEM, PENDING_ITEM]) sessionStorage.removeItem(item);
    showAccount();
    const endSession = idToken ? await endSessionUrl(idToken) : null;
    if (endSession) location.assign(endSession);  // the issuer's session ends too, then back here signed out
    else location.reload();
  } else if (issuer.enabled) startSignIn();
  else if (await askForKey()) reloadAll();
});
$("sign-in-issuer").addEventListener("click", () => startSignIn());

// after a 401 of a request sent with `sentWith` (the credential sent then, or null): retry at once with one stored
// since (another refused request's panel got one), else open the panel
async function keyForRetry(sentWith) {
  const stored = bearer();
  if (stored !== null && stored !== sentWith) return true;
  if (sentWith) forget(sentWith);
  return askForKey(sentWith ? "The sign-in of this tab is no longer accepted: sign in again." : "");
}

// fetch with the ID token or API key; on a 401 (the server has an API key) ask for it once, keep it for this tab's
// session, retry
async function apiFetch(url, init = {}) {
  const send = () => fetch(url, { ...init, headers: authHeaders({ ...(init.headers || {}) }) });
  const sentWith = bearer();
  let response = await send();
  if (response.status === 401 && await keyForRetry(sentWith)) response = await send();
  return response;
}

// a refusal as a sentence: the server's error kind and detail, never raw JSON
async function errorText(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (response.status === 401) return issuer.enabled ? "sign in to read here" : "this server needs an API key: sign in";
    return `${body.detail || body.error}`;
  } catch (_) {
    return text.slice(0, 300);
  }
}

// --- developer detail (tool calls, timings, ids, scores): behind a toggle, remembered ---
const developer = $("developer");
function showDeveloper() { document.body.classList.toggle("dev", developer.checked); }
developer.checked = localStorage.getItem(DEVELOPER_ITEM) === "true";
showDeveloper();
developer.addEventListener("change", () => { localStorage.setItem(DEVELOPER_ITEM, String(developer.checked)); showDeveloper(); });

// --- collections: only the key's (GET /v1/collections), and those created here until they hold a document ---
let serverCollections = new Set();
async function loadCollections() {
  const response = await apiFetch("/v1/collections");
  if (!response.ok) return;
  const body = await response.json();
  const chosen = picker.value;
  serverCollections = new Set(body.collections.map((c) => c.name));
  const created = readJson(localStorage, CREATED_ITEM, []).filter((name) => !serverCollections.has(name));
  localStorage.setItem(CREATED_ITEM, JSON.stringify(created));
  picker.querySelectorAll("option:not([value=''])").forEach((o) => o.remove());
  const entries = [...body.collections.map((c) => [c.name, `${c.name} (${c.documents})`]), ...created.map((n) => [n, `${n} (new)`])];
  entries.sort((a, b) => a[0].localeCompare(b[0]));
  for (const [name, label] of entries) {
    const option = el("option", "", label);
    option.value = name;
    picker.appendChild(option);
  }
  picker.firstElementChild.textContent = body.scoped ? "all my collections" : "all collections";
  if (chosen && entries.some(([name]) => name === chosen)) picker.value = chosen;
  showTarget();
}

function showTarget() {
  $("target-name").textContent = picker.value || "default";
}

function rememberCollection() {
  const id = currentConversation();
  if (!id) return;
  const map = readJson(localStorage, COLLECTIONS_ITEM, {});
  map[id] = picker.value;
  localStorage.setItem(COLLECTIONS_ITEM, JSON.stringify(map));
}

picker.addEventListener("change", () => {
  docState.offset = 0;
  showTarget();
  rememberCollection();
  refreshDocuments();
});

$("new-collection-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const field = $("new-collection");
  const name = field.value.trim();
  if (!/^[a-z0-9][a-z0-9_.-]{0,62}$/.test(name)) {
    field.setCustomValidity("1-63 characters of a-z, 0-9, _ . -, starting with a letter or digit");
    field.reportValidity();
    return;
  }
  field.setCustomValidity("");
  const created = readJson(localStorage, CREATED_ITEM, []);
  if (!created.includes(name) && !serverCollections.has(name)) created.push(name);
  localStorage.setItem(CREATED_ITEM, JSON.stringify(created));
  field.value = "";
  loadCollections().then(() => {
    picker.value = name;
    picker.dispatchEvent(new Event("change"));
  });
});
$("new-collection").addEventListener("input", (event) => event.target.setCustomValidity(""));

// --- conversations: the side list (GET /v1/conversations), open, continue, delete (confirmed) ---
function currentConversation() { return localStorage.getItem(CONVERSATION_ITEM); }

function showConversation(conversation) {
  conversationLabel.textContent = conversation ? `Conversation: ${conversation.title || "(new)"}` : "";
  conversationLabel.dataset.id = conversation ? conversation.id : "";
  conversationLabel.dataset.title = conversation ? conversation.title : "";
  for (const item of conversationList.children)
    item.classList.toggle("current", Boolean(conversation) && item.dataset.id === conversation.id);
}

// a confirmation for something that cannot be undone; resolves true only on the button named after it
const confirmDialog = $("confirm");
function confirmDelete(title, text, action) {
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = action;
  confirmDialog.returnValue = "";
  return new Promise((resolve) => {
    confirmDialog.addEventListener("close", () => resolve(confirmDialog.returnValue === "ok"), { once: true });
    confirmDialog.showModal();
    $("confirm-cancel").focus();  // Enter or Space typed on by mistake cancels
  });
}

let conversationCursor = null;

function conversationItem(c) {
  const item = el("li", "conversation-item");
  item.dataset.id = c.id;
  if (c.id === currentConversation()) item.classList.add("current");
  const open = el("button", "open", c.title || "(untitled)");
  open.type = "button";
  open.title = `${c.title} — ${c.turn_count} turn(s), ${new Date(c.updated_at).toLocaleString()}`;
  open.addEventListener("click", () => { openConversation(c.id); document.body.classList.remove("sidebar-open"); });
  const remove = el("button", "delete-conversation", "×");
  remove.type = "button";
  remove.title = `Delete conversation “${c.title}”`;
  remove.setAttribute("aria-label", `Delete conversation “${c.title}”`);
  remove.addEventListener("click", async () => {
    const ok = await confirmDelete("Delete this conversation?", `“${c.title || "(untitled)"}” and its ${c.turn_count} turn(s) will be deleted. This cannot be undone.`, "Delete conversation");
    if (ok) await deleteConversation(c.id);
  });
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
  $("no-conversations").hidden = conversationList.children.length > 0;
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
  clearLog();
  showConversation(conversation);
  const remembered = readJson(localStorage, COLLECTIONS_ITEM, {})[conversation.id];
  if (remembered !== undefined && remembered !== picker.value &&
      (remembered === "" || [...picker.options].some((o) => o.value === remembered))) {
    picker.value = remembered;
    showTarget();
    docState.offset = 0;
    refreshDocuments();
  }
  for (const stored of conversation.turns) {
    const parts = newTurn(stored.question);
    parts.turn.classList.add("stored");
    showResult(parts, stored);
  }
  scrollToEnd(true);
  input.focus();
}

async function deleteConversation(id) {
  const response = await apiFetch(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  if (!response.ok && response.status !== 404) return;
  if (currentConversation() === id) startAfresh();
  await loadConversations();
}

function clearLog() {
  log.querySelectorAll(".turn").forEach((t) => t.remove());
  $("empty-chat").hidden = false;
}

function startAfresh() {
  localStorage.removeItem(CONVERSATION_ITEM);
  clearLog();
  showConversation(null);
}

$("new-conversation").addEventListener("click", () => { startAfresh(); input.focus(); });
$("toggle-sidebar").addEventListener("click", (event) => {
  const open = document.body.classList.toggle("sidebar-open");
  event.currentTarget.setAttribute("aria-expanded", String(open));
});

// the id of the page's conversation, created on the first question
async function conversationId() {
  const stored = currentConversation();
  if (stored) return stored;
  const response = await apiFetch("/v1/conversations", { method: "POST" });
  if (!response.ok) throw new Error(`cannot start a conversation: ${await errorText(response)}`);
  const conversation = await response.json();
  localStorage.setItem(CONVERSATION_ITEM, conversation.id);
  rememberCollection();
  showConversation(conversation);
  return conversation.id;
}

// --- the log: follows a streaming answer while the reader is at the bottom, stops when they scroll up ---
let following = true;
const jump = $("jump");
function atBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 40; }
log.addEventListener("scroll", () => {
  following = atBottom();
  jump.hidden = following;
});
function scrollToEnd(force = false) {
  if (force) following = true;
  if (following) log.scrollTop = log.scrollHeight;
  jump.hidden = following;
}
jump.addEventListener("click", () => { scrollToEnd(true); });

// --- the citation dialog: the passage, its sentence highlighted, and its page image ---
const dialog = $("passage");
dialog.addEventListener("close", () => { pageRequest += 1; clearPageImage(); });

let pageImageUrl = null;  // the object URL of the page image shown, revoked when another replaces it
let pageRequest = 0;  // the latest citation opened: an image that arrives for an earlier one is dropped
let zoom = 1;

// the doc id as one path segment, "/" sent as %2F (the server decodes it): a doc id with "." or ".." segments
// ("a/../b.pdf") would otherwise be resolved by the browser into another document's path
function documentPath(docId) {
  return encodeURIComponent(docId);
}

function setZoom(value) {
  zoom = Math.min(4, Math.max(0.5, value));
  $("passage-image").style.setProperty("--zoom", String(zoom));
}
$("zoom-in").addEventListener("click", () => setZoom(zoom * 1.25));
$("zoom-out").addEventListener("click", () => setZoom(zoom / 1.25));
$("zoom-fit").addEventListener("click", () => setZoom(1));

function clearPageImage() {
  const figure = $("passage-page");
  figure.hidden = true;
  $("passage-image").removeAttribute("src");
  $("open-page").removeAttribute("href");
  $("passage-page-note").textContent = "";
  if (pageImageUrl) URL.revokeObjectURL(pageImageUrl);
  pageImageUrl = null;
  setZoom(1);
}

// the cited page rendered by the server with the passage's (or only the supporting sentence's) lines highlighted
// (GET /v1/documents/{id}/pages/{n}, `span=` for a sentence): fetched with the API key, shown from an object URL
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
  $("open-page").href = pageImageUrl;
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

// --- answers: Markdown (a safe subset, built as DOM nodes), support labels, `[n]` chips ---
const MARKER = /\[(\d+)\]/g;
const INLINE = /(\*\*[^*\n]+?\*\*|__[^_\n]+?__|\*[^*\s][^*\n]*?\*|`[^`\n]+`|\[\d+\])/g;

// `text` into `parent`: **bold**, *italic*, `code`, and each `[n]` marker of a cited passage as a chip that opens it
// (on `evidence` when it is that passage's). Inside a focusable sentence the chips are not focusable themselves (the
// sentence is the control). Everything else is text.
function appendInline(parent, text, ctx, evidence = null, inSentence = false) {
  let at = 0;
  for (const match of text.matchAll(INLINE)) {
    const token = match[0];
    let node = null;
    if (token.startsWith("[")) {
      const c = ctx.byNumber.get(Number(token.slice(1, -1)));
      if (c) node = chip(c, token, evidence && evidence.passage === c.passage ? evidence : null, inSentence);
    } else if (token.startsWith("`")) node = el("code", "", token.slice(1, -1));
    else if (token.startsWith("**") || token.startsWith("__")) {
      node = el("strong");
      appendInline(node, token.slice(2, -2), ctx, evidence, inSentence);
    } else {
      node = el("em");
      appendInline(node, token.slice(1, -1), ctx, evidence, inSentence);
    }
    if (!node) continue;
    if (match.index > at) parent.append(text.slice(at, match.index));
    parent.appendChild(node);
    at = match.index + token.length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

function chip(c, token, opensOn, inSentence) {
  const node = el(inSentence ? "span" : "button", "chip", token);
  if (!inSentence) node.type = "button";
  node.dataset.passage = c.passage;
  node.title = `open passage ${token}: ${c.title || c.doc_id}`;
  if (!inSentence) node.setAttribute("aria-label", node.title);
  activate(node, () => openPassage(c, opensOn));
  return node;
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

// one sentence (or the part of it inside one Markdown block), marked with its support label; the first part of a
// sentence with evidence opens the dialog on that sentence
function sentenceNode(text, s, ctx, first) {
  const node = el("span", `sentence ${LABELS[s.label] || ""}${s.quote ? " quote" : ""}`);
  node.dataset.label = s.label;
  node.dataset.index = s.index;
  const note = sentenceNote(s);
  node.title = note;
  const c = s.evidence ? ctx.byNumber.get(s.evidence.passage) : null;
  appendInline(node, text, ctx, s.evidence, Boolean(c) && first);
  if (c && first) {  // named by its own text and the note (read by screen readers, drawn by ::after for the eye)
    node.tabIndex = 0;
    node.setAttribute("role", "button");
    node.appendChild(el("span", "sr-only", ` (${note}; open the evidence)`));
    activate(node, () => openPassage(c, s.evidence));
  } else if (s.label !== "SUPPORT" && first) {
    node.appendChild(el("span", "sr-only", ` (${note})`));
  }
  return node;
}

// the characters [a, b) of the answer into `parent`, cut by the support report's sentences
function appendRange(parent, text, a, b, ctx) {
  let at = a;
  for (const s of ctx.sentences) {
    const start = Math.max(s.span[0], a);
    const end = Math.min(s.span[1], b);
    if (end <= start || start < at) continue;
    if (start > at) appendInline(parent, text.slice(at, start), ctx);
    const first = !ctx.shown.has(s.index);
    ctx.shown.add(s.index);
    parent.appendChild(sentenceNode(text.slice(start, end), s, ctx, first));
    at = end;
  }
  if (at < b) appendInline(parent, text.slice(at, b), ctx);
}

// the answer's Markdown blocks: paragraphs, headings, bullet and numbered lists, fenced code; each with the offsets
// of its text in the answer (so that support spans still point into it)
function blocks(text) {
  const out = [];
  let paragraph = null;
  let code = null;
  let at = 0;
  for (const line of text.split("\n")) {
    const start = at;
    const end = at + line.length;
    at = end + 1;
    if (code) {
      if (/^\s*```/.test(line)) { out.push(code); code = null; } else code.lines.push(line);
      continue;
    }
    if (/^\s*```/.test(line)) { paragraph = null; code = { type: "code", lines: [] }; continue; }
    if (!line.trim()) { paragraph = null; continue; }
    let m;
    if ((m = /^(#{1,6})\s+/.exec(line))) {
      paragraph = null;
      out.push({ type: "h", start: start + m[0].length, end });
    } else if ((m = /^\s*([-*+]|\d{1,3}[.)])\s+/.exec(line))) {
      paragraph = null;
      const type = /\d/.test(m[1]) ? "ol" : "ul";
      const last = out[out.length - 1];
      const item = { start: start + m[0].length, end, number: parseInt(m[1], 10) };
      if (last && last.type === type && last.open) last.items.push(item);
      else out.push({ type, open: true, items: [item] });
    } else if (paragraph) {
      paragraph.end = end;
    } else {
      const last = out[out.length - 1];
      if (last && (last.type === "ul" || last.type === "ol") && last.open && /^\s+/.test(line)) {
        last.items[last.items.length - 1].end = end;  // a list item's continuation line
        continue;
      }
      if (last) last.open = false;
      paragraph = { type: "p", start, end };
      out.push(paragraph);
    }
  }
  if (code) out.push(code);
  return out;
}

// the answer: Markdown blocks, its sentences marked by the support report when there is one, `[n]` markers as chips
function renderAnswer(answer, result) {
  answer.replaceChildren();
  answer.classList.remove("streaming");
  const report = result.support;
  const text = result.answer || "";
  const ctx = {
    byNumber: new Map((result.citations || []).map((c) => [c.passage, c])),
    sentences: report && report.sentences ? report.sentences.filter((s) => s.span[1] <= text.length) : [],
    shown: new Set(),
  };
  for (const block of blocks(text)) {
    if (block.type === "code") {
      const pre = el("pre");
      pre.appendChild(el("code", "", block.lines.join("\n")));
      answer.appendChild(pre);
    } else if (block.type === "ul" || block.type === "ol") {
      const list = el(block.type);
      if (block.type === "ol" && block.items[0].number > 1) list.start = block.items[0].number;
      for (const item of block.items) {
        const li = el("li");
        appendRange(li, text, item.start, item.end, ctx);
        list.appendChild(li);
      }
      answer.appendChild(list);
    } else {
      const node = el(block.type === "h" ? "h4" : "p");
      appendRange(node, text, block.start, block.end, ctx);
      answer.appendChild(node);
    }
  }
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

// the sources: one line per document (in order of first citation), its passages as chips that open them
function sourcesList(citations) {
  const list = el("ul", "sources");
  list.setAttribute("aria-label", "Sources");
  const byDoc = new Map();
  for (const c of citations) {
    if (!byDoc.has(c.doc_id)) byDoc.set(c.doc_id, []);
    byDoc.get(c.doc_id).push(c);
  }
  for (const [docId, passages] of byDoc) {
    const item = el("li", "source");
    item.dataset.docId = docId;
    item.appendChild(el("span", "source-title", passages[0].title || docId));
    const pages = [...new Set(passages.map((c) => c.page).filter((p) => p !== null && p !== undefined))];
    if (pages.length) item.appendChild(el("span", "where", `p. ${pages.join(", ")}`));
    for (const c of passages) {
      const button = el("button", "citation", `[${c.passage}]`);
      button.type = "button";
      button.dataset.docId = c.doc_id;
      button.dataset.passage = c.passage;
      button.setAttribute("aria-label", `open passage [${c.passage}] of ${c.title || c.doc_id}`);
      activate(button, () => openPassage(c));
      item.appendChild(button);
      const score = typeof c.score === "number" ? ` score ${c.score.toFixed(3)}` : "";
      item.appendChild(el("span", "meta dev-only", `${c.chunk_id}${score}`));
    }
    item.appendChild(el("span", "sr-only dev-only", `doc ${docId}`));
    list.appendChild(item);
  }
  return list;
}

async function copyText(text, note) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {  // no clipboard permission (an insecure origin): a hidden text area and the copy command
    const area = el("textarea");
    area.value = text;
    area.setAttribute("aria-hidden", "true");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  note.textContent = "Copied";
  setTimeout(() => { note.textContent = "Copy"; }, 1500);
}

// --- rating an answer (POST /v1/feedback): thumbs up or down, then an optional comment and the right source ---
const RATED = { up: "rated up", down: "rated down" };
let rateForms = 0;  // ids of the right-source suggestion lists

// a thumb drawn in SVG (an emoji may lack a font): Material Icons' "thumb_up" (Apache-2.0), turned for down
const THUMB = "M1 21h4V9H1v12zm22-11c0-1.1-.9-2-2-2h-6.31l.95-4.57.03-.32c0-.41-.17-.79-.44-1.06L14.17 1 7.59 " +
  "7.59C7.22 7.95 7 8.45 7 9v10c0 1.1.9 2 2 2h9c.83 0 1.54-.5 1.84-1.22l3.02-7.05c.09-.23.14-.47.14-.73v-2z";
function thumbIcon(down) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  if (down) svg.setAttribute("transform", "rotate(180)");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", THUMB);
  path.setAttribute("fill", "currentColor");
  svg.appendChild(path);
  return svg;
}

// a labelled field of the rating form
function rateField(labelText, control, id) {
  const wrap = el("div", "rate-field");
  control.id = id;
  const label = el("label", "", labelText);
  label.htmlFor = id;
  wrap.append(label, control);
  return wrap;
}

// the thumbs of a finished answer in `actions`, and below them the form for its details
function rating(turn, actions, result) {
  const n = ++rateForms;
  turn.dataset.answerId = result.answer_id;
  const state = { rating: null, busy: false };
  const group = el("div", "rate");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Rate this answer");
  const thumb = (value, name) => {
    const b = el("button", `rate-${value}`);
    b.appendChild(thumbIcon(value === "down"));
    b.type = "button";
    b.dataset.rating = value;
    b.setAttribute("aria-label", name);
    b.setAttribute("aria-pressed", "false");
    b.title = name;
    return b;
  };
  const up = thumb("up", "Good answer");
  const down = thumb("down", "Bad answer");
  group.append(up, down);
  actions.appendChild(group);

  const details = el("form", "rate-form");
  details.hidden = true;
  details.setAttribute("aria-label", "Tell us more about this answer");
  const comment = el("textarea", "rate-comment");
  comment.rows = 2;
  comment.maxLength = 2000;
  const source = el("input", "rate-source");
  source.type = "text";
  source.maxLength = 1000;
  source.autocomplete = "off";
  source.placeholder = "a document id or chunk id";
  const docs = [...new Map(result.citations.map((c) => [c.doc_id, c.title || c.doc_id])).entries()];
  if (docs.length) {
    const list = el("datalist");
    list.id = `rate-sources-${n}`;
    for (const [docId, title] of docs) {
      const option = el("option");
      option.value = docId;
      option.label = title;
      list.appendChild(option);
    }
    source.setAttribute("list", list.id);
    details.appendChild(list);
  }
  const send = el("button", "rate-send", "Send");
  send.type = "submit";
  details.append(
    rateField("Comment (optional)", comment, `rate-comment-${n}`),
    rateField("The right source was (optional)", source, `rate-source-${n}`),
    send,
  );
  const status = el("p", "rate-status");
  status.setAttribute("role", "status");
  turn.append(details, status);

  const show = () => {
    for (const b of [up, down]) b.setAttribute("aria-pressed", String(b.dataset.rating === state.rating));
  };
  // sends the rating (with the details when given); the thumbs show what the server stored
  const rate = async (value, withDetails) => {
    if (state.busy) return;
    state.busy = true;  // the buttons stay enabled (a disabled button loses the keyboard focus)
    group.setAttribute("aria-busy", "true");
    status.classList.remove("error");
    status.textContent = "Sending…";
    const body = { answer_id: result.answer_id, rating: value };
    if (withDetails) {
      if (comment.value.trim()) body.comment = comment.value;
      if (source.value.trim()) body.right_source = source.value.trim();
    }
    try {
      const response = await apiFetch("/v1/feedback", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (response.ok) {
        const stored = await response.json();
        state.rating = stored.rating;
        const extra = [body.comment !== undefined && "your comment", body.right_source !== undefined && "the right source"]
          .filter(Boolean).join(" and ");
        status.textContent = `Thanks — ${RATED[stored.rating] || "rated"}${extra ? `, with ${extra}` : ""}`;
        details.hidden = false;
      } else if (response.status === 404) {
        status.classList.add("error");
        status.textContent = "This answer can no longer be rated (it is not kept on the server).";
      } else {
        status.classList.add("error");
        status.textContent = `The rating was not saved: ${await errorText(response)}`;
      }
    } catch (_) {
      status.classList.add("error");
      status.textContent = "The rating was not saved: the server cannot be reached; try again.";
    } finally {
      state.busy = false;
      group.removeAttribute("aria-busy");
      show();
    }
  };
  up.addEventListener("click", () => rate("up", false));
  down.addEventListener("click", () => rate("down", false));
  details.addEventListener("submit", (event) => {
    event.preventDefault();
    if (state.rating) rate(state.rating, true);
  });
}

function showResult(parts, result) {
  const { turn, answer } = parts;
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
  if (result.citations.length) turn.appendChild(sourcesList(result.citations));
  else turn.appendChild(el("div", "meta", result.refused ? "no sources: the documents do not cover this" : "no sources cited"));
  const actions = el("div", "turn-actions");
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  copy.setAttribute("aria-label", "Copy the answer");
  copy.addEventListener("click", () => copyText(result.answer, copy));
  const again = el("button", "regenerate", "Regenerate");
  again.type = "button";
  again.setAttribute("aria-label", "Regenerate the answer");
  again.addEventListener("click", () => submit(parts.question));
  actions.append(copy, again);
  turn.appendChild(actions);
  if (result.answer_id) rating(turn, actions, result);  // a restored answer may have no id: nothing to rate
  const t = result.timings_ms;
  const ids = result.conversation_id ? ` · conversation ${result.conversation_id}` : "";
  if (t) turn.appendChild(el("div", "meta timings dev-only", Object.keys(t).map((k) => `${k} ${Math.round(t[k])} ms`).join(", ") + ids));
}

function newTurn(question) {
  $("empty-chat").hidden = true;
  const turn = el("div", "turn");
  turn.appendChild(el("div", "question", question));
  const activity = el("div", "activities dev-only");
  const answer = el("div", "answer");
  turn.append(activity, answer);
  log.appendChild(turn);
  return { turn, activity, answer, question };
}

// after a reload: the stored turns of the page's conversation (question, answer, sources)
// reopens the remembered conversation, unless a question was asked on this page meanwhile: its first reads may end
// after the reader's first answer, and reopening then would replace that answer with the stored turns
async function restoreConversation() {
  const id = currentConversation();
  if (id && !askedHere) await openConversation(id);
}
let askedHere = false;  // a question was asked on this page

let running = null;  // the AbortController of the answer streaming now

// blocks of a `text/event-stream` body as (event, payload) pairs
async function* events(response) {
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
      if (data.length) yield [event, JSON.parse(data.join("\n"))];
    }
  }
}

async function ask(question, policy, signal) {
  const parts = newTurn(question);
  const { turn, activity, answer } = parts;
  scrollToEnd(true);
  const body = { question, conversation_id: await conversationId() };
  if (policy) body.policy = policy;
  if (picker.value) body.collections = [picker.value];
  const send = () => apiFetch("/v1/ask/stream", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
  let response;
  try {
    response = await send();
    if (response.status === 404) {  // the conversation was deleted elsewhere: go on in a new one
      localStorage.removeItem(CONVERSATION_ITEM);
      body.conversation_id = await conversationId();
      response = await send();
    }
    if (!response.ok) {
      answer.appendChild(el("div", "error", `The server refused the question: ${await errorText(response)}`));
      return;
    }
    let streamed = "";
    answer.classList.add("streaming");
    for await (const [event, payload] of events(response)) {
      if (event === "text") { streamed += payload.text; answer.textContent = streamed; }
      else if (event === "restart") { streamed = ""; answer.textContent = ""; }
      else if (event === "tool_call") activity.appendChild(el("div", "activity", `→ ${payload.tool} ${JSON.stringify(payload.args)}`));
      else if (event === "tool_result") activity.appendChild(el("div", "activity", `← ${payload.tool}: ${payload.summary}`));
      else if (event === "result") {
        showResult(parts, payload);
        if (!conversationLabel.dataset.title)  // the server names a new conversation after its first question
          showConversation({ id: payload.conversation_id, title: question.slice(0, 80) });
        loadConversations();
      }
      else if (event === "error") answer.appendChild(el("div", "error", `error (${payload.error}): ${payload.detail}`));
      scrollToEnd();
    }
  } catch (err) {
    if (err.name !== "AbortError") throw err;
    answer.classList.remove("streaming");
    turn.classList.add("stopped-turn");
    turn.appendChild(el("div", "stopped", "Stopped: the answer was cancelled."));
    const actions = el("div", "turn-actions");
    const again = el("button", "regenerate", "Regenerate");
    again.type = "button";
    again.addEventListener("click", () => submit(question));
    actions.appendChild(again);
    turn.appendChild(actions);
  }
  scrollToEnd();
}

async function submit(question) {
  if (running || !question) return;
  askedHere = true;
  running = new AbortController();
  button.hidden = true;
  stopButton.hidden = false;
  try {
    await ask(question, $("policy").value, running.signal);
  } catch (err) {
    log.appendChild(el("div", "turn error", `error: ${err.message || err}`));
  } finally {
    running = null;
    stopButton.hidden = true;
    button.hidden = false;
    input.focus();
  }
}

stopButton.addEventListener("click", () => { if (running) running.abort(); });
form.addEventListener("submit", (event) => {
  event.preventDefault();
  const question = input.value.trim();
  if (!question || running) return;
  input.value = "";
  fitQuestion();
  submit(question);
});
// Enter asks, Shift+Enter starts a new line; the box grows with its text
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});
function fitQuestion() {
  input.style.height = "auto";
  input.style.height = `${input.scrollHeight + 2}px`;
}
input.addEventListener("input", fitQuestion);

// --- documents: a drawer, paged (50 a page) and searchable by title or id, deletes confirmed ---
const library = $("library");
const openLibrary = $("open-library");
function showLibrary(open) {
  library.hidden = !open;
  openLibrary.setAttribute("aria-expanded", String(open));
  if (open) $("close-library").focus(); else openLibrary.focus();
}
openLibrary.addEventListener("click", () => showLibrary(library.hidden));
$("close-library").addEventListener("click", () => showLibrary(false));
library.addEventListener("keydown", (event) => { if (event.key === "Escape") showLibrary(false); });

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

async function deleteDocument(d) {
  const title = d.title || d.doc_id;
  const ok = await confirmDelete(
    "Delete this document?",
    `“${title}” (${d.doc_id}) will be deleted from collection ${d.collection} for everyone who searches it, with its ${d.chunks} chunk(s). This cannot be undone.`,
    "Delete document",
  );
  if (!ok) return;
  const params = new URLSearchParams({ collection: d.collection });
  await apiFetch(`/v1/documents/${encodeURIComponent(d.doc_id)}?${params}`, { method: "DELETE" });
  await Promise.all([refreshDocuments(), loadCollections()]);
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
  const rows = document.createDocumentFragment();
  for (const d of body.documents) {
    const row = document.createElement("tr");
    row.className = "doc";
    row.dataset.docId = d.doc_id;
    row.appendChild(el("td", "doc-title", d.title || d.doc_id));
    row.appendChild(el("td", "doc-id", d.doc_id));
    row.appendChild(el("td", "chunks", String(d.chunks)));
    const cell = document.createElement("td");
    const remove = el("button", "delete", "Delete…");
    remove.type = "button";
    remove.setAttribute("aria-label", `Delete document “${d.title || d.doc_id}”`);
    remove.addEventListener("click", () => deleteDocument(d));
    cell.appendChild(remove);
    row.appendChild(cell);
    rows.appendChild(row);
  }
  docsBody.replaceChildren(rows);
  $("no-documents").hidden = body.total > 0;
  $("no-documents").textContent = docState.q ? `No document matches “${docState.q}”.` : "No documents here yet: drop files above to add some.";
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

// --- uploads: one ingestion job per drop or pick, its progress and each file's result; running jobs after a reload ---
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
  const into = job.collection ? ` into ${job.collection}` : "";
  return `job ${job.id}${into}: ${job.status}, ${job.files_done}/${job.files_total} files, ${job.chunks} chunks` +
    (errors ? ` — errors: ${errors}` : "");
}

// each file's state: its error if it has one, done once the job has got past it (files are ingested in order)
function showFiles(list, names, job) {
  const finished = job.status === "done" || job.status === "failed";
  names.forEach((name, i) => {
    const item = list.children[i] || list.appendChild(el("li", "job-file"));
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

function jobBox(text) {
  const box = el("div", "job");
  const line = el("div", "job-line", text);
  const bar = el("progress", "job-progress");
  bar.max = 1;
  bar.value = 0;
  bar.setAttribute("aria-label", "progress");
  const list = el("ul", "job-files");
  box.append(line, bar, list);
  jobs.prepend(box);
  return { box, line, bar, list };
}

// polls a job until it ends, drawing its progress into `view`
async function follow(view, statusUrl, names) {
  for (;;) {
    const reply = await apiFetch(statusUrl);
    if (reply.ok) {
      const status = await reply.json();
      view.line.textContent = describeJob(status);
      view.box.dataset.status = status.status;
      view.box.dataset.job = status.id;
      view.bar.max = Math.max(1, status.files_total);
      view.bar.value = status.files_done;
      if (names) showFiles(view.list, names, status);
      if (status.status === "done" || status.status === "failed") break;
    } else if (reply.status === 404) break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await Promise.all([refreshDocuments(), loadCollections()]);
}

async function upload(fileList) {
  const files = Array.from(fileList);
  if (!files.length) return;
  const data = new FormData();
  for (const f of files) data.append("files", f, f.name);
  if (picker.value) data.append("collection", picker.value);
  const groups = $("upload-groups").value.trim();  // who may read them (POST /v1/documents/files `groups`)
  if (groups) data.append("groups", groups);
  const readers = groups ? `, readable by ${groups}` : "";
  const view = jobBox(`uploading ${files.length} file(s) to ${picker.value || "default"}${readers}…`);
  for (const f of files) {
    const item = el("li", "job-file", `${f.name}: uploading`);
    item.dataset.state = "uploading";
    view.list.appendChild(item);
  }
  let response;
  const sentWith = bearer();
  try {
    response = await sendFiles(data, (fraction) => { view.bar.value = fraction * 0.1; });
  } catch (err) {
    view.box.classList.add("error");
    view.line.textContent = `upload failed: ${err.message}`;
    return;
  }
  if (response.status === 401 && await keyForRetry(sentWith)) response = await sendFiles(data, () => {});
  if (response.status !== 202) {
    view.box.classList.add("error");
    view.box.dataset.status = "refused";
    view.line.textContent = `upload refused: ${response.body.detail || `HTTP ${response.status}`}`;
    return;
  }
  await follow(view, response.body.status_url, response.body.files);
}

// after a reload: the jobs still queued or running (GET /v1/jobs), followed to their end
async function resumeJobs() {
  const response = await apiFetch("/v1/jobs?limit=20");
  if (!response.ok) return;
  const body = await response.json();
  for (const job of (body.jobs || []).reverse()) {
    if (job.status !== "queued" && job.status !== "running") continue;
    if (jobs.querySelector(`.job[data-job="${CSS.escape(String(job.id))}"]`)) continue;
    const view = jobBox(describeJob(job));
    view.box.dataset.job = job.id;
    follow(view, `/v1/jobs/${job.id}`, null);
  }
}

filePicker.addEventListener("change", () => { upload(filePicker.files); filePicker.value = ""; });
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  upload(event.dataTransfer.files);
});

function reloadAll() {
  return Promise.all([loadCollections(), loadConversations(), refreshDocuments(), restoreConversation()]);
}

showAccount();
// settled: every first read answered and drawn (the page-settle benchmark reads `window.pageSettledMs`); after the
// sign-in (the way back from the issuer), so the first reads carry its token
startAuth().finally(() => {
  const collectionsLoaded = loadCollections();
  Promise.all([collectionsLoaded, loadConversations(), refreshDocuments(), collectionsLoaded.then(restoreConversation)])
    .catch(() => {})
    .finally(() => {
      window.pageSettledMs = performance.now();
      document.body.dataset.settled = "true";
      resumeJobs().catch(() => {});
    });
});
