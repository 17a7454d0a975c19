// The feed's item kinds: one entry of `KINDS` each, saying which events
// make or change an item of the kind (`on`: event kind → handler) and how
// the item shows (`render`). A new kind of feed item is one entry here.
//
// A handler gets the feed (its model: `addItem`, `touch`, `items`, `tools`,
// `perms`, ...) and the event as {ev, d: its data, seq, span}; the handlers
// of one event run in the table's order. A renderer gets the feed, the item
// and the item's <li>, and draws the item into it (again on each change).

import { h, clear } from './dom.js';
import { auth } from './api.js';
import { renderMarkdown } from './markdown.js';
import { stopWords, exitWords, TOOL_WORDS } from './feedwords.js';
import { renderPlan, renderDiff, renderWrite, safeJson } from './feedparts.js';

const MD_LIMIT = 64 * 1024;      // above this, a message renders as plain text
const TEXT_LIMIT = 256 * 1024;   // above this, only the tail is shown until expanded
// A message or thought keeps at most this much at each end: a session's
// one long message (a million chunks) does not fill the tab's memory.
const KEEP_CHARS = 256 * 1024;

/**
 * Drops the middle of a long message's text, keeping `KEEP_CHARS` at each
 * end: `it.cut` is where the kept head ends, `it.elided` counts what went.
 * A cut made before lies inside what is dropped again (the tail after it
 * is never shorter than `KEEP_CHARS`).
 */
export function clipText(it) {
  if (it.text.length <= 3 * KEEP_CHARS) return;
  it.elided = (it.elided || 0) + it.text.length - 2 * KEEP_CHARS;
  it.text = it.text.slice(0, KEEP_CHARS) + it.text.slice(it.text.length - KEEP_CHARS);
  it.cut = KEEP_CHARS;
}

export function requestIdText(id) {
  return typeof id === 'string' ? id : JSON.stringify(id);
}

function updateOf(ev) {
  const p = ev.raw && typeof ev.raw === 'object' ? ev.raw.params : null;
  if (!p || typeof p !== 'object') return {};
  return (p.update && typeof p.update === 'object' ? p.update : null)
    || (p.data && typeof p.data === 'object' ? p.data : null) || {};
}

const toAgent = (ev, d, method) => ev.direction === 'to_agent' && d.method === method;

// ---- message and thought: chunks merged into one item ----

/** Consecutive chunks of one role and message id make one `kind` item. */
function chunk(kind) {
  return (feed, { d, seq, span }) => {
    if (feed.replaying) { feed.replayCount++; return; }
    const role = d.role || 'agent';
    const text = d.text != null ? d.text : d.content_type && d.content_type !== 'text' ? `[${d.content_type}]` : '';
    const last = feed.last();
    if (last && last.kind === kind && last.role === role && !last.closed
        && (last.messageId == null || d.message_id == null || last.messageId === d.message_id)) {
      last.text += text;
      clipText(last);
      if (d.message_id != null) last.messageId = d.message_id;
      feed.touch(last, seq, span);
    } else {
      feed.addItem({ kind, seq, span, role, text, messageId: d.message_id ?? null });
    }
  };
}

function renderMessage(feed, it, el) {
  el.classList.toggle('from-user', it.role === 'user');
  let body = el.querySelector('.msg-body');
  if (!body) {
    el.append(h('div', { class: 'item-label' }, it.role === 'user' ? 'You' : 'Agent'), body = h('div', { class: 'msg-body md' }));
  }
  let text = it.text;
  if (it.elided) {
    const gone = `\n\n[… ${it.elided.toLocaleString()} characters of this message are not shown …]\n\n`;
    text = text.slice(0, it.cut) + gone + text.slice(it.cut);
  }
  if (text.length > TEXT_LIMIT && !it.expanded) {
    const cut = text.length - TEXT_LIMIT;
    text = text.slice(cut);
    if (!el.querySelector('.msg-expand')) {
      el.insertBefore(h('button', { type: 'button', class: 'btn btn-small msg-expand', onclick: () => { it.expanded = true; el.querySelector('.msg-expand').remove(); feed.dirty.add(it); feed.schedule(); } },
        'Show the whole message'), body);
    }
  }
  if (text.length > MD_LIMIT) { body.classList.add('plain'); body.textContent = text; }
  else { body.classList.remove('plain'); body.innerHTML = renderMarkdown(text); } // escaped by renderMarkdown
}

function renderThought(feed, it, el) {
  let det = el.querySelector('details');
  if (!det) {
    det = h('details', { class: 'thought' }, h('summary', null, 'Thinking…'), h('div', { class: 'thought-body plain' }));
    el.append(det);
  }
  det.querySelector('.thought-body').textContent = it.text;
  det.querySelector('summary').textContent = 'Thinking';
}

// ---- prompt: what was sent to the agent ----

function promptText(ev) {
  const p = ev.raw && ev.raw.params;
  if (!p) return '';
  if (Array.isArray(p.prompt)) {
    return p.prompt.map((b) => (b && b.type === 'text' ? b.text : b && b.uri ? `[${b.uri}]` : '')).filter(Boolean).join('\n');
  }
  return typeof p.message === 'string' ? p.message : '';
}

function applyPrompt(feed, { ev, d, seq }) {
  if (!toAgent(ev, d, 'session/prompt')) return;
  const text = promptText(ev);
  feed.closeOpen();
  if (text) feed.addItem({ kind: 'prompt', seq, text });
}

function renderPrompt(feed, it, el) {
  clear(el).append(h('div', { class: 'item-label' }, 'Prompt'), h('div', { class: 'msg-body plain' }, it.text));
}

// ---- tool call: one card per tool_call_id, patched by its updates ----

function applyTool(feed, { ev, d, seq }) {
  const id = d.tool_call_id || `tool-${seq}`;
  const u = updateOf(ev);
  let item = feed.tools.get(id);
  if (!item) {
    item = feed.addItem({ kind: 'tool_call', seq, toolCallId: id, title: '', toolKind: '', status: '', locations: [], content: [] });
    feed.tools.set(id, item);
  } else feed.touch(item, seq);
  if (d.title != null) item.title = d.title;
  if (d.tool_kind != null) item.toolKind = d.tool_kind;
  if (d.status != null) item.status = d.status;
  if (Array.isArray(u.locations)) item.locations = u.locations;
  if (Array.isArray(u.content)) item.content = u.content;
  if (u.rawInput !== undefined) item.rawInput = u.rawInput;
  if (u.rawOutput !== undefined) item.rawOutput = u.rawOutput;
}

/** A tool call's content blocks: diffs, text output, terminals. */
function toolContent(content) {
  const parts = [];
  for (const c of content) {
    if (!c || typeof c !== 'object') continue;
    if (c.type === 'diff') parts.push(renderDiff(c));
    else if (c.type === 'content' && c.content) {
      const t = c.content.type === 'text' ? c.content.text : `[${c.content.type}]`;
      if (t) parts.push(h('pre', { class: 'tool-output' }, t.length > 4000 ? `${t.slice(0, 4000)}\n… (${t.length - 4000} more characters)` : t));
    } else if (c.type === 'terminal') parts.push(h('p', { class: 'muted' }, `Terminal ${c.terminalId || ''}`));
  }
  return parts;
}

function renderTool(feed, it, el) {
  const open = el.querySelector('details.tool-raw')?.open;
  const status = it.status || 'pending';
  el.dataset.status = status;
  el.dataset.toolCallId = it.toolCallId;
  const head = h('div', { class: 'tool-head' },
    h('span', { class: `tool-kind kind-${(it.toolKind || 'other').replace(/\W/g, '')}` }, it.toolKind || 'tool'),
    h('span', { class: 'tool-title' }, it.title || it.toolCallId),
    h('span', { class: `badge status-${status.replace(/\W/g, '')}`, testid: 'tool-status', dataset: { status } }, TOOL_WORDS[status] || status));
  const parts = [head];
  if (it.locations.length) {
    parts.push(h('ul', { class: 'tool-locations', testid: 'tool-locations' },
      it.locations.map((l) => h('li', null, h('code', null, `${l.path || ''}${l.line != null ? `:${l.line}` : ''}`)))));
  }
  parts.push(...toolContent(it.content));
  if (it.rawInput !== undefined || it.rawOutput !== undefined) {
    const det = h('details', { class: 'tool-raw' }, h('summary', null, 'Input / output'),
      it.rawInput !== undefined ? h('pre', null, `input: ${safeJson(it.rawInput)}`) : null,
      it.rawOutput !== undefined ? h('pre', null, `output: ${safeJson(it.rawOutput)}`) : null);
    if (open) det.open = true;
    parts.push(det);
  }
  clear(el).append(...parts);
}

// ---- plan: one item, replaced by each new plan ----

function applyPlan(feed, { d, seq }) {
  const entries = Array.isArray(d.entries) ? d.entries : [];
  if (!feed.plan) feed.plan = feed.addItem({ kind: 'plan', seq, entries });
  else { feed.plan.entries = entries; feed.touch(feed.plan, seq); }
}

function renderPlanItem(feed, it, el) {
  clear(el).append(h('div', { class: 'item-label' }, 'Plan'), renderPlan(it.entries));
}

// ---- permission request: a question, its answer, the write it asks for ----

/**
 * The file a permission request asks to write, as {path, oldText, newText}
 * (oldText null: a new file; undefined: not known), or null. From the tool
 * call's ACP `diff` content (in the request, else in the tool call's own
 * updates), its rawInput (path + content, or old_string/new_string), or
 * the agent's `fs/write_text_file` the client asks about itself.
 */
function writeOf(ev, d, feed) {
  const raw = ev.raw && typeof ev.raw === 'object' ? ev.raw : {};
  const call = (raw.params && raw.params.toolCall) || raw.toolCall || {};
  const tool = feed.tools.get(d.tool_call_id);
  const content = Array.isArray(call.content) ? call.content : tool ? tool.content : [];
  const diff = content.find((c) => c && c.type === 'diff' && typeof c.path === 'string');
  if (diff) return { path: diff.path, oldText: diff.oldText ?? null, newText: String(diff.newText ?? '') };
  const input = call.rawInput && typeof call.rawInput === 'object' ? call.rawInput : {};
  const path = input.path ?? input.file_path;
  const text = input.content ?? input.new_string ?? input.newText;
  if (typeof path === 'string' && typeof text === 'string') {
    return { path, oldText: typeof input.old_string === 'string' ? input.old_string : undefined, newText: text };
  }
  return feed.writes.get(requestIdText(d.request_id)) || null;
}

function applyQuestion(feed, { ev, d, seq }) {
  const rid = requestIdText(d.request_id);
  const item = feed.addItem({ kind: 'permission_request', seq, requestId: rid, toolCallId: d.tool_call_id,
    title: d.title || (feed.tools.get(d.tool_call_id) || {}).title || d.tool_call_id || 'a tool call',
    options: Array.isArray(d.options) ? d.options : [], answered: null, sent: null, expired: false,
    write: writeOf(ev, d, feed) });
  feed.perms.set(rid, item);
}

function applyAnswer(feed, { d, seq }) {
  const rid = requestIdText(d.request_id);
  const answer = { outcome: d.outcome, optionId: d.option_id, by: d.answered_by || d.by || null };
  const item = feed.perms.get(rid);
  if (item) { item.answered = answer; feed.touch(item, seq); } else feed.orphanAnswers.set(rid, answer);
}

/** The agent's own `fs/write_text_file`, kept for the question about it. */
function applyWrite(feed, { ev, d }) {
  if (!(ev.direction === 'from_agent' && d.method === 'fs/write_text_file' && d.id != null)) return;
  const p = ev.raw && ev.raw.params;
  if (p && typeof p.path === 'string' && typeof p.content === 'string') {
    feed.writes.set(requestIdText(d.id), { path: p.path, oldText: undefined, newText: p.content });
  }
}

/**
 * Who answered a permission request: {who: you|person|policy|turn|unknown,
 * text}. The answer event names the person who answered (answered_by):
 * the logged-in user is "you", anyone else by name.
 */
function answeredBy(feed, it) {
  const a = it.answered;
  if (a.by) return a.by === auth.user ? { who: 'you', text: 'by you' } : { who: 'person', text: `by ${a.by}` };
  if (it.sent) return { who: 'you', text: 'by you' };
  if (a.outcome !== 'selected') return { who: 'turn', text: 'the turn ended before an answer' };
  if (feed.policy && feed.policy !== 'ask') {
    const name = feed.policy === 'auto_approve' ? 'auto-approve' : feed.policy;
    return { who: 'policy', text: `automatically, by the agent type’s ${name} policy (nobody was asked)` };
  }
  if (feed.policy === 'ask') return { who: 'unknown', text: 'by someone Kandev did not record' };
  return null;
}

/** Sends the answer `optionId`; the question says so until the answer comes back. */
function answer(feed, it, optionId) {
  if (it.answered || it.sent) return;
  it.sent = optionId;
  it.error = '';
  feed.dirty.add(it);
  feed.schedule();
  Promise.resolve(feed.onPermission(it.requestId, optionId)).then((ok) => {
    if (ok === false) { it.sent = null; feed.dirty.add(it); feed.schedule(); }
  }, (e) => {
    it.sent = null;
    it.error = e && e.message ? e.message : String(e);
    feed.dirty.add(it);
    feed.schedule();
  });
}

/** The question's status line: answered (and by whom), expired, sent, refused. */
function questionStatus(feed, it, el) {
  if (it.answered) {
    const opt = it.options.find((o) => o.option_id === it.answered.optionId);
    const by = answeredBy(feed, it);
    if (by) el.dataset.answeredBy = by.who;
    return { by, status: it.answered.outcome === 'selected' ? `Answered: ${opt ? opt.name : it.answered.optionId}` : 'Answered: cancelled' };
  }
  if (it.expired) return { status: 'No longer pending.' };
  if (it.sent) return { status: 'Answer sent…' };
  return { status: it.error ? `Could not answer: ${it.error}` : '' };
}

function renderQuestion(feed, it, el) {
  const state = it.answered ? 'answered' : it.expired ? 'expired' : it.sent ? 'sent' : 'open';
  el.dataset.state = state;
  el.dataset.requestId = it.requestId;
  const buttons = it.options.map((o) => h('button', {
    type: 'button',
    class: `btn ${/^allow/.test(o.option_kind) ? 'btn-primary' : /^reject/.test(o.option_kind) ? 'btn-danger' : ''}`,
    testid: 'permission-option',
    dataset: { optionId: o.option_id, optionKind: o.option_kind },
    disabled: state !== 'open',
    'aria-pressed': (it.answered?.optionId || it.sent) === o.option_id ? 'true' : undefined,
    onclick: () => answer(feed, it, o.option_id),
  }, o.name || o.option_id));
  const { status, by } = questionStatus(feed, it, el);
  clear(el).append(
    h('div', { class: 'item-label' }, 'Permission requested'),
    h('p', { class: 'perm-title' }, it.title),
    it.write ? renderWrite(it.write) : null,
    h('div', { class: 'perm-options', role: 'group', 'aria-label': 'Permission options' }, buttons),
    h('p', { class: 'perm-status', testid: 'permission-status', hidden: !status }, status,
      by ? h('span', { class: 'perm-by', testid: 'permission-by' }, ` — ${by.text}`) : null));
}

// ---- turn end: how the agent's turn ended; open questions expire ----

function applyTurnEnd(feed, { d, seq }) {
  for (const p of feed.perms.values()) if (!p.answered && !p.expired) { p.expired = true; feed.dirty.add(p); }
  feed.sawEnd = true;
  feed.closeOpen();
  feed.addItem({ kind: 'turn_end', seq, stopReason: d.stop_reason || 'unknown', message: d.message || '' });
}

function renderTurnEnd(feed, it, el) {
  el.dataset.stopReason = it.stopReason;
  clear(el).append(
    h('div', { class: 'item-label' }, 'End of the agent’s turn'),
    h('p', null, h('span', { class: `badge stop-${it.stopReason.replace(/\W/g, '')}`, testid: 'stop-reason', title: `Stop reason: ${it.stopReason}` }, stopWords(it.stopReason)),
      it.message ? ' ' : '', it.message ? h('span', { class: 'turn-message' }, it.message) : null));
}

// ---- errors, notes and one-line items ----

function renderError(feed, it, el) {
  clear(el).append(h('div', { class: 'item-label' }, 'Error'),
    h('p', { class: 'plain', title: it.code != null ? `Error code ${it.code}` : undefined }, it.message));
}

/** One muted line: `message`, the `detail` as its tooltip. */
export function renderNote(feed, it, el) {
  clear(el).append(h('p', { class: 'muted plain', title: it.detail || undefined }, it.message || it.kind));
}

/** Notes on the session itself: a resumed conversation, follow-ups queued or dropped. */
function applySessionOther(feed, { ev, d }) {
  if (toAgent(ev, d, 'session/load')) { feed.replaying = true; feed.replayCount = 0; }
}

function applySessionLifecycle(feed, { d, seq }) {
  if (d.phase === 'session_loaded' || d.phase === 'closed') {
    if (feed.replaying && feed.replayCount) feed.addItem({ kind: 'note', seq, message: 'The agent picked up the earlier conversation.' });
    feed.replaying = false;
  }
  if (d.phase === 'prompt_queued') feed.addItem({ kind: 'note', seq, message: `Follow-up queued, sent when this turn ends: ${d.detail ?? ''}` });
  if (d.phase === 'queue_dropped') feed.addItem({ kind: 'note', seq, message: `Queued follow-ups dropped: ${d.detail ?? ''}` });
}

/** The agent's program went away. */
function applyClosed(feed, { d, seq }) {
  if (d.phase !== 'closed') return;
  feed.sawEnd = true;
  feed.closeOpen();
  feed.addItem({ kind: 'lifecycle', seq, message: exitWords(d.detail), detail: d.detail || '' });
}

/** Every kind of feed item: the events it comes from, and how it shows. */
export const KINDS = Object.freeze({
  message: { on: { message_chunk: chunk('message') }, render: renderMessage },
  thought: { on: { thought_chunk: chunk('thought') }, render: renderThought },
  prompt: { on: { other: applyPrompt }, render: renderPrompt },
  tool_call: { on: { tool_call: applyTool, tool_call_update: applyTool }, render: renderTool },
  plan: { on: { plan: applyPlan }, render: renderPlanItem },
  permission_request: {
    on: { permission_request: applyQuestion, permission_response: applyAnswer, other: applyWrite },
    render: renderQuestion,
  },
  turn_end: { on: { turn_end: applyTurnEnd }, render: renderTurnEnd },
  protocol_error: {
    on: { protocol_error: (feed, { d, seq }) => feed.addItem({ kind: 'protocol_error', seq, message: d.message || 'protocol error', code: d.code }) },
    render: renderError,
  },
  progress: {
    on: { progress: (feed, { d, seq }) => feed.addItem({ kind: 'progress', seq, message: `${d.percent != null ? `${d.percent}% ` : ''}${d.message || ''}`.trim() || 'progress' }) },
    render: renderNote,
  },
  mode_change: {
    on: { mode_change: (feed, { d, seq }) => feed.addItem({ kind: 'mode_change', seq, message: `Mode: ${d.mode_id}` }) },
    render: renderNote,
  },
  note: { on: { other: applySessionOther, lifecycle: applySessionLifecycle }, render: renderNote },
  lifecycle: { on: { lifecycle: applyClosed }, render: renderNote },
  // A control frame's error, or a local notice (Feed.pushNotice).
  error: { render: renderError },
});

/** The handlers of each event kind, in the table's order (usage, log, ... have none: shown elsewhere). */
export const HANDLERS = Object.freeze(Object.entries(KINDS).reduce((by, [, kind]) => {
  for (const [event, fn] of Object.entries(kind.on || {})) (by[event] ||= []).push(fn);
  return by;
}, {}));
