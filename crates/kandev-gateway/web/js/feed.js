// The live agent feed: a model of normalized ACP events plus a renderer that
// batches DOM work per animation frame and keeps the DOM bounded. What each
// kind of item is made of and how it shows: feeditems.js.
//
// - Frames are deduped by their per-task `seq`: anything <= the last seq
//   seen is ignored (counted in `duplicatesIgnored`).
// - Consecutive message chunks (same role, same message id) merge into one
//   message; thoughts likewise into one collapsed <details>.
// - Tool calls are cards keyed by tool_call_id, patched by tool_call_update.
// - Only the last `windowSize` items are in the DOM; "show earlier" (or
//   scrolling to the top) widens it, then loads earlier pages (feedpages.js).

import { h, clear, timeEl } from './dom.js';
import { KINDS, HANDLERS, renderNote } from './feeditems.js';

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
    // A page's message item stands for `span` frames.
    const span = frame.span || 1;
    this.applied += span;
    this.curTs = ev.timestamp || frame.timestamp || null;
    this.noteRun(frame, seq);
    const event = { ev, d: ev.data || {}, seq, span };
    for (const on of HANDLERS[ev.kind] || []) on(this, event);
    this.onEvent(ev, frame);
  }

  // Each agent run (a retry, a rerun) is its own instance: number them,
  // so the attempts of a failing task are told apart.
  noteRun(frame, seq) {
    if (!frame.instance_id || frame.instance_id === this.instance) return;
    this.runs = (this.runs || 0) + 1;
    if (this.runs > 1) {
      this.closeOpen();
      const which = this.olderUnknown ? 'Another run' : `Run ${this.runs}`;
      this.addItem({ kind: 'note', seq, testid: 'run-start', message: `${which}: a new agent container.` });
    }
    this.instance = frame.instance_id;
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
    (KINDS[it.kind]?.render || renderNote)(this, it, it.el);
    // When it happened: the frame's own timestamp, as local time.
    if (it.ts && it.tsEl !== null) {
      if (!it.tsEl) it.tsEl = timeEl(it.ts, 'feed-time');
      if (it.tsEl && it.tsEl.parentNode !== it.el) it.el.prepend(it.tsEl);
    }
  }
}
