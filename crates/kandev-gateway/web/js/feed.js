// The live agent feed: a model of normalized ACP events plus a renderer that
// batches DOM work per animation frame and keeps the DOM bounded.
//
// - Frames are deduped by their per-task `seq`: anything <= the last seq
//   seen is ignored (counted in `duplicatesIgnored`).
// - Consecutive message chunks (same role, same message id) merge into one
//   message; thoughts likewise into one collapsed <details>.
// - Tool calls are cards keyed by tool_call_id, patched by tool_call_update.
// - Only the last `windowSize` items are in the DOM; "show earlier" (or
//   scrolling to the top) widens it, then loads earlier pages (feedpages.js).

import { h, clear, timeEl } from './dom.js';
import { auth } from './api.js';
import { renderMarkdown } from './markdown.js';
import { lineDiff, hunks } from './diff.js';

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
// A permission prompt shows this much of the write it asks for.
const WRITE_PREVIEW_LINES = 12;
const WRITE_LINE_CHARS = 400;

/** What the feed says for each way a turn ends (docs/ui.md lists them). */
export const STOP_WORDS = Object.freeze({
  end_turn: 'Finished',
  cancelled: 'Cancelled by you',
  max_tokens: 'Stopped: the reply was too long',
  max_turn_requests: 'Stopped: too many steps in one turn',
  refusal: 'The agent refused',
});
export function stopWords(reason) { return STOP_WORDS[reason] || 'Ended'; }

// What the feed says when the agent's program goes away, by the reason the
// connection gives; the reason itself is the tooltip.
const EXIT_WORDS = [
  [/^agent closed its output/, 'The agent stopped running.'],
  [/^client shut down/, 'The agent was shut down.'],
  [/^reading from the agent failed/, 'Lost the connection to the agent.'],
];
export function exitWords(detail) {
  const hit = EXIT_WORDS.find(([re]) => re.test(String(detail || '')));
  return hit ? hit[1] : 'The agent stopped running.';
}

// A tool call's status, in words.
const TOOL_WORDS = { pending: 'Waiting', in_progress: 'Working', completed: 'Done', failed: 'Failed' };

export function requestIdText(id) {
  return typeof id === 'string' ? id : JSON.stringify(id);
}

function updateOf(ev) {
  const p = ev.raw && typeof ev.raw === 'object' ? ev.raw.params : null;
  if (!p || typeof p !== 'object') return {};
  return (p.update && typeof p.update === 'object' ? p.update : null)
    || (p.data && typeof p.data === 'object' ? p.data : null) || {};
}

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

/** The lines a write preview shows: a diff when the old text is known, else the new text. */
function writeLines(w) {
  if (w.oldText !== undefined) return hunks(lineDiff(w.oldText, w.newText));
  const text = String(w.newText).replace(/\n$/, '');
  return (text ? text.split('\n') : []).map((t, i) => ({ op: '+', text: t, oldNo: null, newNo: i + 1 }));
}

/** The write a permission prompt asks for: its path and its first lines, as text. */
function renderWrite(w) {
  w.lines = w.lines || writeLines(w);
  const shown = w.lines.slice(0, WRITE_PREVIEW_LINES);
  const body = h('div', { class: 'diff-body', role: 'table', 'aria-label': `What would be written to ${w.path}` });
  for (const l of shown) {
    const cls = l.op === '+' ? 'add' : l.op === '-' ? 'del' : l.op === '…' ? 'skip' : 'ctx';
    const text = l.text.length > WRITE_LINE_CHARS ? `${l.text.slice(0, WRITE_LINE_CHARS)}…` : l.text;
    body.append(cls === 'skip' ? h('div', { class: 'diff-line diff-skip' }, text)
      : h('div', { class: `diff-line diff-${cls}`, role: 'row', testid: 'permission-write-line', dataset: { op: l.op } },
        h('span', { class: 'ln', role: 'cell' }, l.oldNo ?? ''), h('span', { class: 'ln', role: 'cell' }, l.newNo ?? ''),
        h('span', { class: 'op', role: 'cell', 'aria-hidden': 'true' }, l.op), h('span', { class: 'code', role: 'cell' }, text)));
  }
  const more = w.lines.length - shown.length;
  if (more > 0) body.append(h('div', { class: 'diff-line diff-skip', testid: 'permission-write-more' }, `… ${more} more line${more === 1 ? '' : 's'}`));
  return h('div', { class: 'diff perm-write', testid: 'permission-write' },
    h('div', { class: 'diff-head' }, 'Writes', h('code', { testid: 'permission-write-path' }, w.path),
      w.oldText === null ? h('span', { class: 'badge' }, 'new file') : null),
    body);
}

function promptText(ev) {
  const p = ev.raw && ev.raw.params;
  if (!p) return '';
  if (Array.isArray(p.prompt)) {
    return p.prompt.map((b) => (b && b.type === 'text' ? b.text : b && b.uri ? `[${b.uri}]` : '')).filter(Boolean).join('\n');
  }
  return typeof p.message === 'string' ? p.message : '';
}

export class Feed {
  constructor(root, { onPermission, onEvent, windowSize = 300 } = {}) {
    this.onPermission = onPermission || (() => false);
    this.onEvent = onEvent || (() => {});
    this.windowSize = windowSize;
    this.initModel();

    this.root = root;
    this.earlier = h('button', { type: 'button', class: 'btn btn-small feed-earlier', testid: 'feed-show-earlier', hidden: true,
      onclick: () => this.showEarlier() });
    this.list = h('ol', { class: 'feed-list', testid: 'feed-list', 'aria-live': 'polite', 'aria-relevant': 'additions', 'aria-label': 'Agent feed' });
    this.empty = h('p', { class: 'feed-empty muted', testid: 'feed-empty' }, 'No agent activity yet.');
    this.jump = h('button', { type: 'button', class: 'btn btn-small feed-jump', testid: 'feed-jump', hidden: true,
      onclick: () => this.jumpToLatest() }, 'Jump to latest ↓');
    clear(root).append(this.earlier, this.empty, this.list, this.jump);
    // Follow the tail unless the user scrolled up (content-visibility makes
    // heights change after layout, so intent is tracked, not measured).
    this.stick = true;
    this.autoTop = 0;
    root.addEventListener('scroll', () => {
      const dist = root.scrollHeight - root.scrollTop - root.clientHeight;
      if (dist < 80) this.stick = true;
      // Up from where the tail was, or at the top of a feed taller than
      // the box (a render that followed the tail never leaves it there).
      else if (root.scrollTop < this.autoTop - 8 || root.scrollTop < 120) this.stick = false;
      // Scrolled up to the top: earlier history comes in by itself.
      if (!this.stick && root.scrollTop < 120) this.showEarlier();
      this.updateJump();
    }, { passive: true });
  }

  /** The model without its DOM (a feed's state, or an older page's being built). */
  initModel() {
    this.lastSeq = 0;
    this.duplicatesIgnored = 0;
    this.applied = 0;
    this.items = [];
    this.tools = new Map();
    this.perms = new Map();
    // The agent's fs/write_text_file requests by id: {path, newText}.
    this.writes = new Map();
    this.plan = null;
    this.replaying = false;
    this.replayCount = 0;
    this.queue = [];
    this.dirty = new Set();
    this.scheduled = false;
    this.renderedStart = 0;
    this.renderedEnd = 0;
    this.controlCounter = 0;
    this.curTs = null;
    this.newBelow = 0;
    // The task's agent type permission_policy, once known: answers that
    // nobody here gave came from it unless it is `ask`.
    this.policy = undefined;
    // Answers whose question is on a page not loaded yet, by request id,
    // and whether a turn ended on the pages loaded (older unanswered
    // questions then expired): see feedpages.js.
    this.orphanAnswers = new Map();
    this.sawEnd = false;
    // Whether runs before the loaded pages may exist (runs are then not numbered).
    this.olderUnknown = false;
  }

  /** Shows "Jump to latest" while the reader is scrolled up. */
  updateJump() {
    const sc = this.root;
    const away = !this.stick && sc.scrollHeight - sc.scrollTop - sc.clientHeight > 80;
    if (!away) this.newBelow = 0;
    this.jump.hidden = !away;
    this.jump.textContent = this.newBelow ? `Jump to latest (${this.newBelow} new) ↓` : 'Jump to latest ↓';
  }

  jumpToLatest() {
    this.stick = true;
    this.newBelow = 0;
    this.root.scrollTop = this.root.scrollHeight;
    this.autoTop = this.root.scrollTop;
    this.updateJump();
  }

  setPolicy(policy) {
    this.policy = policy;
    for (const p of this.perms.values()) if (p.answered) this.dirty.add(p);
    this.schedule();
  }

  // --- input -------------------------------------------------------------

  /** A feed frame {seq, event, ...}. Returns false if it was a duplicate. */
  push(frame) {
    const seq = Number(frame.seq);
    if (!Number.isFinite(seq) || seq <= this.lastSeq) { this.duplicatesIgnored++; return false; }
    this.lastSeq = seq;
    this.queue.push(frame);
    this.schedule();
    return true;
  }

  /** A control-frame error or a local notice (no seq). */
  pushNotice(kind, text) {
    this.queue.push({ notice: { kind, text } });
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const run = () => { if (this.scheduled) this.flush(); };
    requestAnimationFrame(run);
    setTimeout(run, 200); // rAF is paused in hidden tabs
  }

  flush() {
    this.scheduled = false;
    const q = this.queue;
    this.queue = [];
    for (const f of q) {
      try {
        this.curTs = f.notice ? new Date().toISOString() : null;
        if (f.notice) this.addItem({ kind: f.notice.kind === 'error' ? 'error' : 'note', seq: null, message: f.notice.text, local: true });
        else this.apply(f);
      } catch (e) { console.error('feed: bad frame', f, e); }
    }
    this.render();
  }

  // --- model -------------------------------------------------------------

  last() { return this.items[this.items.length - 1]; }

  addItem(item) {
    item.index = this.items.length;
    if (item.ts === undefined) item.ts = this.curTs;
    item.nseq = item.seq == null ? 0 : (item.span || 1);
    delete item.span;
    this.items.push(item);
    this.dirty.add(item);
    return item;
  }

  touch(item, seq, span = 1) {
    if (seq != null) item.nseq += span;
    this.dirty.add(item);
  }

  apply(frame) {
    const ev = frame.event || {};
    const seq = Number(frame.seq);
    const d = ev.data || {};
    // A page's message item stands for `span` frames.
    const span = frame.span || 1;
    this.applied += span;
    this.curTs = ev.timestamp || frame.timestamp || null;
    // Each agent run (a retry, a rerun) is its own instance: number them,
    // so the attempts of a failing task are told apart.
    if (frame.instance_id && frame.instance_id !== this.instance) {
      this.runs = (this.runs || 0) + 1;
      if (this.runs > 1) {
        this.closeOpen();
        const which = this.olderUnknown ? 'Another run' : `Run ${this.runs}`;
        this.addItem({ kind: 'note', seq, testid: 'run-start', message: `${which}: a new agent container.` });
      }
      this.instance = frame.instance_id;
    }
    switch (ev.kind) {
      case 'message_chunk':
      case 'thought_chunk': {
        if (this.replaying) { this.replayCount++; break; }
        const kind = ev.kind === 'message_chunk' ? 'message' : 'thought';
        const role = d.role || 'agent';
        const text = d.text != null ? d.text : d.content_type && d.content_type !== 'text' ? `[${d.content_type}]` : '';
        const last = this.last();
        if (last && last.kind === kind && last.role === role && !last.closed
            && (last.messageId == null || d.message_id == null || last.messageId === d.message_id)) {
          last.text += text;
          clipText(last);
          if (d.message_id != null) last.messageId = d.message_id;
          this.touch(last, seq, span);
        } else {
          this.addItem({ kind, seq, span, role, text, messageId: d.message_id ?? null });
        }
        break;
      }
      case 'tool_call':
      case 'tool_call_update': {
        const id = d.tool_call_id || `tool-${seq}`;
        const u = updateOf(ev);
        let item = this.tools.get(id);
        if (!item) {
          item = this.addItem({ kind: 'tool_call', seq, toolCallId: id, title: '', toolKind: '', status: '', locations: [], content: [] });
          this.tools.set(id, item);
        } else this.touch(item, seq);
        if (d.title != null) item.title = d.title;
        if (d.tool_kind != null) item.toolKind = d.tool_kind;
        if (d.status != null) item.status = d.status;
        if (Array.isArray(u.locations)) item.locations = u.locations;
        if (Array.isArray(u.content)) item.content = u.content;
        if (u.rawInput !== undefined) item.rawInput = u.rawInput;
        if (u.rawOutput !== undefined) item.rawOutput = u.rawOutput;
        break;
      }
      case 'plan': {
        const entries = Array.isArray(d.entries) ? d.entries : [];
        if (!this.plan) this.plan = this.addItem({ kind: 'plan', seq, entries });
        else { this.plan.entries = entries; this.touch(this.plan, seq); }
        break;
      }
      case 'permission_request': {
        const rid = requestIdText(d.request_id);
        const item = this.addItem({ kind: 'permission_request', seq, requestId: rid, toolCallId: d.tool_call_id,
          title: d.title || (this.tools.get(d.tool_call_id) || {}).title || d.tool_call_id || 'a tool call',
          options: Array.isArray(d.options) ? d.options : [], answered: null, sent: null, expired: false,
          write: writeOf(ev, d, this) });
        this.perms.set(rid, item);
        break;
      }
      case 'permission_response': {
        const rid = requestIdText(d.request_id);
        const answer = { outcome: d.outcome, optionId: d.option_id, by: d.answered_by || d.by || null };
        const item = this.perms.get(rid);
        if (item) { item.answered = answer; this.touch(item, seq); } else this.orphanAnswers.set(rid, answer);
        break;
      }
      case 'turn_end': {
        for (const p of this.perms.values()) if (!p.answered && !p.expired) { p.expired = true; this.dirty.add(p); }
        this.sawEnd = true;
        this.closeOpen();
        this.addItem({ kind: 'turn_end', seq, stopReason: d.stop_reason || 'unknown', message: d.message || '' });
        break;
      }
      case 'protocol_error':
        this.addItem({ kind: 'protocol_error', seq, message: d.message || 'protocol error', code: d.code });
        break;
      case 'progress':
        this.addItem({ kind: 'progress', seq, message: `${d.percent != null ? `${d.percent}% ` : ''}${d.message || ''}`.trim() || 'progress' });
        break;
      case 'mode_change':
        this.addItem({ kind: 'mode_change', seq, message: `Mode: ${d.mode_id}` });
        break;
      case 'other': {
        if (ev.direction === 'to_agent' && d.method === 'session/prompt') {
          const text = promptText(ev);
          this.closeOpen();
          if (text) this.addItem({ kind: 'prompt', seq, text });
        } else if (ev.direction === 'to_agent' && d.method === 'session/load') {
          this.replaying = true; this.replayCount = 0;
        } else if (ev.direction === 'from_agent' && d.method === 'fs/write_text_file' && d.id != null) {
          const p = ev.raw && ev.raw.params;
          if (p && typeof p.path === 'string' && typeof p.content === 'string') {
            this.writes.set(requestIdText(d.id), { path: p.path, oldText: undefined, newText: p.content });
          }
        }
        break;
      }
      case 'lifecycle': {
        if (d.phase === 'session_loaded' || d.phase === 'closed') {
          if (this.replaying && this.replayCount) this.addItem({ kind: 'note', seq, message: 'The agent picked up the earlier conversation.' });
          this.replaying = false;
        }
        if (d.phase === 'closed') { this.sawEnd = true; this.closeOpen(); this.addItem({ kind: 'lifecycle', seq, message: exitWords(d.detail), detail: d.detail || '' }); }
        if (d.phase === 'prompt_queued') this.addItem({ kind: 'note', seq, message: `Follow-up queued, sent when this turn ends: ${d.detail ?? ''}` });
        if (d.phase === 'queue_dropped') this.addItem({ kind: 'note', seq, message: `Queued follow-ups dropped: ${d.detail ?? ''}` });
        break;
      }
      default:
        break; // usage, log, config_change... are shown elsewhere
    }
    this.onEvent(ev, frame);
  }

  closeOpen() { const l = this.last(); if (l && (l.kind === 'message' || l.kind === 'thought')) l.closed = true; }

  hasPendingPermission() {
    for (const p of this.perms.values()) if (!p.answered && !p.expired) return true;
    return false;
  }

  // --- rendering ----------------------------------------------------------

  /** Widens the window over loaded items, or loads the page before them. */
  showEarlier() {
    if (this.renderedStart > 0) {
      this.windowSize += 300;
      this.render(true);
    } else if (this.pager) this.pager.loadOlder();
  }

  render(grow = false) {
    const items = this.items;
    const sc = this.root;
    const prevHeight = sc.scrollHeight;
    this.empty.hidden = items.length > 0;

    // new items
    const newCount = items.length - this.renderedEnd;
    const frag = document.createDocumentFragment();
    for (let i = this.renderedEnd; i < items.length; i++) {
      const it = items[i];
      this.renderItem(it);
      frag.appendChild(it.el);
      this.dirty.delete(it);
    }
    this.list.appendChild(frag);
    this.renderedEnd = items.length;

    // grow the window at the top
    const wantStart = Math.max(0, items.length - this.windowSize);
    if (grow && wantStart < this.renderedStart) {
      const top = document.createDocumentFragment();
      for (let i = wantStart; i < this.renderedStart; i++) { this.renderItem(items[i]); top.appendChild(items[i].el); this.dirty.delete(items[i]); }
      this.list.insertBefore(top, this.list.firstChild);
      this.renderedStart = wantStart;
    }
    // trim the window at the top
    while (this.renderedStart < wantStart) {
      const it = items[this.renderedStart++];
      if (it.el) { it.el.remove(); it.el = null; }
      this.dirty.delete(it);
    }
    // patch updated items that are on screen
    for (const it of this.dirty) if (it.el) this.renderItem(it);
    this.dirty.clear();

    if (!grow && !this.stick) { this.newBelow += newCount; }
    const hiddenCount = this.renderedStart;
    const older = !!(this.pager && this.pager.hasMore);
    this.earlier.hidden = hiddenCount === 0 && !older;
    this.earlier.textContent = hiddenCount ? `Show earlier (${hiddenCount} hidden)` : 'Show earlier messages';
    if (grow) sc.scrollTop += sc.scrollHeight - prevHeight;
    else if (this.stick) { sc.scrollTop = sc.scrollHeight; this.autoTop = sc.scrollTop; }
    this.updateJump();
    this.revealPending(false);
  }

  /** The feed is shown again (back on its tab): where it was, then the open question. */
  shown() {
    if (this.stick) { this.root.scrollTop = this.root.scrollHeight; this.autoTop = this.root.scrollTop; }
    this.revealPending(true);
  }

  /**
   * Brings the buttons of the permission request waiting for an answer
   * into view (the feed and the page scroll to it): once per request as it
   * shows, and again with `again` (back on the Feed tab). Nothing while the
   * feed is hidden: it is shown when the feed is.
   */
  revealPending(again) {
    let open = null;
    for (const p of this.perms.values()) if (!p.answered && !p.expired && !p.sent && p.el) open = p;
    if (!open || (open.revealed && !again) || this.root.offsetParent === null) return;
    open.revealed = true;
    const buttons = open.el.querySelector('.perm-options') || open.el;
    buttons.scrollIntoView({ block: 'center' });
    // Again once the page has laid out what came with it (the composer's
    // hint of a running turn shortens the feed on a phone).
    requestAnimationFrame(() => requestAnimationFrame(() => {
      if (!open.answered && !open.sent && this.root.offsetParent !== null) buttons.scrollIntoView({ block: 'center' });
    }));
  }

  renderItem(it) {
    if (!it.el) {
      it.el = h('li', { class: `feed-item feed-${it.kind}`, testid: 'feed-item', dataset: { kind: it.kind } });
      if (it.seq != null) it.el.dataset.seq = String(it.seq);
      else it.el.dataset.local = String(++this.controlCounter);
    }
    it.el.dataset.seqs = String(it.nseq);
    const fn = this[`render_${it.kind}`] || this.render_note;
    fn.call(this, it, it.el);
    // When it happened: the frame's own timestamp, as local time.
    if (it.ts && it.tsEl !== null) {
      if (!it.tsEl) it.tsEl = timeEl(it.ts, 'feed-time');
      if (it.tsEl && it.tsEl.parentNode !== it.el) it.el.prepend(it.tsEl);
    }
  }

  render_message(it, el) {
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
        el.insertBefore(h('button', { type: 'button', class: 'btn btn-small msg-expand', onclick: () => { it.expanded = true; el.querySelector('.msg-expand').remove(); this.dirty.add(it); this.schedule(); } },
          'Show the whole message'), body);
      }
    }
    if (text.length > MD_LIMIT) { body.classList.add('plain'); body.textContent = text; }
    else { body.classList.remove('plain'); body.innerHTML = renderMarkdown(text); } // escaped by renderMarkdown
  }

  render_prompt(it, el) {
    clear(el).append(h('div', { class: 'item-label' }, 'Prompt'), h('div', { class: 'msg-body plain' }, it.text));
  }

  render_thought(it, el) {
    let det = el.querySelector('details');
    if (!det) {
      det = h('details', { class: 'thought' }, h('summary', null, 'Thinking…'), h('div', { class: 'thought-body plain' }));
      el.append(det);
    }
    det.querySelector('.thought-body').textContent = it.text;
    det.querySelector('summary').textContent = 'Thinking';
  }

  render_tool_call(it, el) {
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
    for (const c of it.content) {
      if (!c || typeof c !== 'object') continue;
      if (c.type === 'diff') parts.push(renderDiff(c));
      else if (c.type === 'content' && c.content) {
        const t = c.content.type === 'text' ? c.content.text : `[${c.content.type}]`;
        if (t) parts.push(h('pre', { class: 'tool-output' }, t.length > 4000 ? `${t.slice(0, 4000)}\n… (${t.length - 4000} more characters)` : t));
      } else if (c.type === 'terminal') parts.push(h('p', { class: 'muted' }, `Terminal ${c.terminalId || ''}`));
    }
    if (it.rawInput !== undefined || it.rawOutput !== undefined) {
      const det = h('details', { class: 'tool-raw' }, h('summary', null, 'Input / output'),
        it.rawInput !== undefined ? h('pre', null, `input: ${safeJson(it.rawInput)}`) : null,
        it.rawOutput !== undefined ? h('pre', null, `output: ${safeJson(it.rawOutput)}`) : null);
      if (open) det.open = true;
      parts.push(det);
    }
    clear(el).append(...parts);
  }

  render_plan(it, el) {
    clear(el).append(h('div', { class: 'item-label' }, 'Plan'), renderPlan(it.entries));
  }

  render_permission_request(it, el) {
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
      onclick: () => this.answer(it, o.option_id),
    }, o.name || o.option_id));
    let status = '';
    let by = null;
    if (it.answered) {
      const opt = it.options.find((o) => o.option_id === it.answered.optionId);
      status = it.answered.outcome === 'selected' ? `Answered: ${opt ? opt.name : it.answered.optionId}` : 'Answered: cancelled';
      by = this.answeredBy(it);
      if (by) el.dataset.answeredBy = by.who;
    } else if (it.expired) status = 'No longer pending.';
    else if (it.sent) status = 'Answer sent…';
    else if (it.error) status = `Could not answer: ${it.error}`;
    clear(el).append(
      h('div', { class: 'item-label' }, 'Permission requested'),
      h('p', { class: 'perm-title' }, it.title),
      it.write ? renderWrite(it.write) : null,
      h('div', { class: 'perm-options', role: 'group', 'aria-label': 'Permission options' }, buttons),
      h('p', { class: 'perm-status', testid: 'permission-status', hidden: !status }, status,
        by ? h('span', { class: 'perm-by', testid: 'permission-by' }, ` — ${by.text}`) : null));
  }

  /**
   * Who answered a permission request: {who: you|person|policy|turn|unknown,
   * text}. The answer event names the person who answered (answered_by):
   * the logged-in user is "you", anyone else by name.
   */
  answeredBy(it) {
    const a = it.answered;
    if (a.by) return a.by === auth.user ? { who: 'you', text: 'by you' } : { who: 'person', text: `by ${a.by}` };
    if (it.sent) return { who: 'you', text: 'by you' };
    if (a.outcome !== 'selected') return { who: 'turn', text: 'the turn ended before an answer' };
    if (this.policy && this.policy !== 'ask') {
      const name = this.policy === 'auto_approve' ? 'auto-approve' : this.policy;
      return { who: 'policy', text: `automatically, by the agent type’s ${name} policy (nobody was asked)` };
    }
    if (this.policy === 'ask') return { who: 'unknown', text: 'by someone Kandev did not record' };
    return null;
  }

  answer(it, optionId) {
    if (it.answered || it.sent) return;
    it.sent = optionId;
    it.error = '';
    this.dirty.add(it);
    this.schedule();
    Promise.resolve(this.onPermission(it.requestId, optionId)).then((ok) => {
      if (ok === false) { it.sent = null; this.dirty.add(it); this.schedule(); }
    }, (e) => {
      it.sent = null;
      it.error = e && e.message ? e.message : String(e);
      this.dirty.add(it);
      this.schedule();
    });
  }

  render_turn_end(it, el) {
    el.dataset.stopReason = it.stopReason;
    clear(el).append(
      h('div', { class: 'item-label' }, 'End of the agent’s turn'),
      h('p', null, h('span', { class: `badge stop-${it.stopReason.replace(/\W/g, '')}`, testid: 'stop-reason', title: `Stop reason: ${it.stopReason}` }, stopWords(it.stopReason)),
        it.message ? ' ' : '', it.message ? h('span', { class: 'turn-message' }, it.message) : null));
  }

  render_protocol_error(it, el) {
    clear(el).append(h('div', { class: 'item-label' }, 'Error'),
      h('p', { class: 'plain', title: it.code != null ? `Error code ${it.code}` : undefined }, it.message));
  }

  render_error(it, el) { this.render_protocol_error(it, el); }

  render_note(it, el) { clear(el).append(h('p', { class: 'muted plain', title: it.detail || undefined }, it.message || it.kind)); }
}

function safeJson(v) {
  try {
    const s = JSON.stringify(v, null, 2);
    return s.length > 4000 ? `${s.slice(0, 4000)}…` : s;
  } catch { return String(v); }
}

export function renderPlan(entries) {
  return h('ul', { class: 'plan', testid: 'plan-list' }, entries.map((e) => {
    const st = e.status || 'pending';
    const box = h('input', { type: 'checkbox', disabled: true, 'aria-label': st });
    box.checked = st === 'completed';
    box.indeterminate = st === 'in_progress';
    return h('li', { class: `plan-entry plan-${st}`, testid: 'plan-entry', dataset: { status: st } },
      box, h('span', { class: 'plan-text' }, e.content), h('span', { class: `prio prio-${e.priority}` }, e.priority));
  }));
}

export function renderDiff(c) {
  const lines = hunks(lineDiff(c.oldText, c.newText));
  const added = lines.filter((l) => l.op === '+').length;
  const removed = lines.filter((l) => l.op === '-').length;
  const body = h('div', { class: 'diff-body', role: 'table', 'aria-label': `Diff of ${c.path || 'file'}` });
  const shown = lines.slice(0, 800);
  for (const l of shown) {
    const cls = l.op === '+' ? 'add' : l.op === '-' ? 'del' : l.op === '…' ? 'skip' : 'ctx';
    body.append(h('div', { class: `diff-line diff-${cls}`, role: 'row' },
      h('span', { class: 'ln', role: 'cell' }, l.oldNo ?? ''),
      h('span', { class: 'ln', role: 'cell' }, l.newNo ?? ''),
      h('span', { class: 'op', role: 'cell', 'aria-hidden': 'true' }, l.op === '…' ? '' : l.op),
      h('span', { class: 'code', role: 'cell' }, l.text)));
  }
  if (lines.length > shown.length) body.append(h('div', { class: 'diff-line diff-skip' }, `… ${lines.length - shown.length} more lines`));
  return h('div', { class: 'diff', testid: 'diff' },
    h('div', { class: 'diff-head' }, h('code', null, c.path || ''), c.oldText == null ? h('span', { class: 'badge' }, 'new file') : null,
      h('span', { class: 'diff-stat' }, h('span', { class: 'add' }, `+${added}`), ' ', h('span', { class: 'del' }, `−${removed}`))),
    body);
}
