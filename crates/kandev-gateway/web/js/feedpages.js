// Opening a task without replaying every frame: the newest page of the
// compacted feed (GET /orchestrator/tasks/{id}/feed: one item per message,
// thought or other event), then the stream after the page's `covers_to`;
// earlier pages as the reader scrolls up. A page's message stands for the
// chunks it covers, so opening a long session costs its messages.
//
// - The newest page goes through the feed's queue like frames, and the
//   stream's frames after it continue its last message exactly.
// - An earlier page is built as a model of its own, then put before the
//   loaded items: an update on a later page made its tool call's card, so
//   the call's older card only gives what that card lacks; an answer on a
//   later page answers its question; a question left open before a turn
//   ended has expired; a message cut by the page boundary is one message.

import { request } from './api.js';
import { Feed } from './feed.js';
import { clipText } from './feeditems.js';

/** Items a page asks for (the server also bounds a page's bytes). */
const PAGE_ITEMS = 50;
/** Tool call fields an older card gives the card of its later update. */
const TOOL_FIELDS = ['title', 'toolKind', 'status', 'rawInput', 'rawOutput'];

/** The frame an item stands for: a message's chunks as one chunk. */
export function frameOf(item) {
  const base = { seq: item.first_seq, instance_id: item.instance_id, span: item.last_seq - item.first_seq + 1 };
  if (item.kind === 'event') return { ...base, event: item.event };
  const kind = item.kind === 'thought' ? 'thought_chunk' : 'message_chunk';
  return { ...base, event: { kind, timestamp: item.timestamp,
    data: { role: item.role, text: item.text, message_id: item.message_id } } };
}

function blank(v) { return v == null || v === '' || (Array.isArray(v) && v.length === 0); }

function sameMessage(a, b) {
  return a && b && (a.kind === 'message' || a.kind === 'thought') && a.kind === b.kind && a.role === b.role
    && !a.closed && (a.messageId == null || b.messageId == null || a.messageId === b.messageId);
}

export class FeedPager {
  constructor(feed, taskId) {
    this.feed = feed;
    this.taskId = taskId;
    this.earliest = null;
    this.hasMore = false;
    this.loading = null;
    feed.pager = this;
  }

  path(before) {
    const id = encodeURIComponent(this.taskId);
    return `/orchestrator/tasks/${id}/feed?limit=${PAGE_ITEMS}${before ? `&before=${before}` : ''}`;
  }

  /**
   * Loads the newest page into the empty feed; the stream then asks for
   * the frames after it. When the page cannot be read the feed stays
   * empty and the stream replays it from the start.
   */
  async openNewest() {
    let page;
    try { page = await request('GET', this.path()); } catch (e) {
      console.warn('feed: no compacted page; the stream replays the feed', e);
      return;
    }
    const feed = this.feed;
    if (feed.lastSeq !== 0 || !page || !Array.isArray(page.items)) return;
    this.take(page);
    feed.olderUnknown = this.hasMore;
    for (const item of page.items) feed.queue.push(frameOf(item));
    feed.lastSeq = Number(page.covers_to) || 0;
    feed.schedule();
    // A newest page shorter than the feed's box cannot be scrolled up:
    // the page before comes by itself.
    requestAnimationFrame(() => {
      const box = feed.root;
      if (this.hasMore && box.clientHeight > 0 && box.scrollHeight <= box.clientHeight + 120) this.loadOlder();
    });
  }

  take(page) {
    this.hasMore = !!page.has_more && page.earliest != null;
    this.earliest = page.earliest;
  }

  /** Loads the page before the loaded items (once at a time). */
  loadOlder() {
    if (!this.hasMore) return Promise.resolve();
    if (this.loading) return this.loading;
    this.loading = request('GET', this.path(this.earliest))
      .then((page) => this.prepend(page))
      .catch((e) => this.feed.pushNotice('error', `Earlier messages could not be loaded: ${e.message}`))
      .finally(() => { this.loading = null; });
    return this.loading;
  }

  prepend(page) {
    const feed = this.feed;
    const older = Object.create(Feed.prototype);
    older.initModel();
    older.onEvent = () => {};
    older.policy = feed.policy;
    older.olderUnknown = !!page.has_more;
    for (const item of page.items) {
      const frame = frameOf(item);
      older.curTs = frame.event.timestamp || null;
      older.apply(frame);
    }
    const items = mergeBefore(feed, older);
    this.take(page);
    feed.olderUnknown = this.hasMore;
    feed.windowSize += items;
    feed.render(true);
    // Still at the top (the page joined a message that shows no taller, or
    // the feed is not yet taller than its box): no scroll event comes, so
    // the next page is asked for here.
    if (this.hasMore && feed.root.scrollTop < 120 && feed.root.clientHeight > 0) setTimeout(() => feed.showEarlier(), 0);
  }
}

/** Puts `older`'s items before `feed`'s; how many were added. */
function mergeBefore(feed, older) {
  const keep = [];
  for (const it of older.items) {
    const later = it.kind === 'tool_call' && feed.tools.get(it.toolCallId);
    if (later) {
      for (const k of TOOL_FIELDS) if (blank(later[k]) && !blank(it[k])) later[k] = it[k];
      feed.dirty.add(later);
    } else if (!(it.kind === 'plan' && feed.plan)) keep.push(it);
  }
  for (const [id, it] of older.tools) if (!feed.tools.has(id)) feed.tools.set(id, it);
  if (!feed.plan && older.plan) feed.plan = older.plan;
  mergeQuestions(feed, older);
  for (const [id, w] of older.writes) if (!feed.writes.has(id)) feed.writes.set(id, w);
  const first = feed.items[0];
  const last = keep[keep.length - 1];
  if (sameMessage(last, first)) {
    keep.pop();
    // Where the kept head ends: the older part's cut, else the later's
    // (both cut: clipText cuts the joined text again).
    if (last.elided) first.cut = last.cut;
    else if (first.elided) first.cut += last.text.length;
    first.elided = (first.elided || 0) + (last.elided || 0);
    first.text = last.text + first.text;
    clipText(first);
    first.nseq += last.nseq;
    first.seq = last.seq;
    if (first.el) first.el.dataset.seq = String(first.seq);
    feed.dirty.add(first);
  }
  feed.applied += older.applied;
  feed.items = keep.concat(feed.items);
  feed.items.forEach((it, i) => { it.index = i; });
  feed.renderedStart += keep.length;
  feed.renderedEnd += keep.length;
  return keep.length;
}

function mergeQuestions(feed, older) {
  for (const [rid, p] of older.perms) {
    const answer = feed.orphanAnswers.get(rid);
    if (answer) { p.answered = answer; feed.orphanAnswers.delete(rid); } else if (!p.answered && feed.sawEnd) p.expired = true;
    if (!feed.perms.has(rid)) feed.perms.set(rid, p);
  }
  for (const [rid, a] of older.orphanAnswers) feed.orphanAnswers.set(rid, a);
  feed.sawEnd ||= older.sawEnd;
}
