// Attention: while the page is open, a task that finishes a run (ready for
// review, completed, failed) or starts waiting for input bumps a count in
// the tab's title ("(2) Kandev") and, once the person opted in, raises a
// browser notification. Task states are followed through what the views
// fetch anyway (api.observe), the cards the open board's live stream
// pushes (seeCards; that board is never polled) and, for the boards no
// view shows, through a slow poll of the person's boards (GET /boards, then
// each board's cards, every BOARDS_POLL_MS, the list itself at most once a
// minute; a board a view fetched recently is skipped). Looking at a task
// (its page shown in a focused window) clears its mark.
//
// "Needs you" (needs.js) is what of all that waits for a person: a
// permission or question pending, a review waiting, a failure
// (needsYou(), onNeedsChange()).

import { h } from './dom.js';
import { api, auth, get, enc, observe, taskState } from './api.js';
import { STATE, STATE_LABELS } from './common.js';

const ATTENTION = new Set([STATE.WAITING_FOR_INPUT, STATE.REVIEW, STATE.COMPLETED, STATE.FAILED]);
// The boards of other views are followed this often (and at most this many);
// the list of boards itself is asked for once a minute.
const BOARDS_POLL_MS = 10_000;
const BOARD_LIST_MS = 60_000;
const MAX_BOARDS = 50;
const known = new Map();  // task id -> last state seen
const marked = new Map(); // task id -> state that needs a look
const boardSeen = new Map(); // board id -> when its cards were last fetched
const followed = new Map();  // board id -> open live streams of it
const latest = new Map();    // task id -> { task, execution } last seen
const needsWatchers = new Set();
/** Task states that wait for a person. */
export const NEEDS = [STATE.WAITING_FOR_INPUT, STATE.REVIEW, STATE.FAILED];
let openTask = null;      // the task whose page is shown
let button = null;
let pollTimer = null;
let boardList = { at: 0, boards: [] };
const startedAt = Date.now() - 2000;

function notifications() { return typeof window.Notification === 'function' ? window.Notification : null; }

function titleWithCount(title) {
  const bare = title.replace(/^\(\d+\) /, '');
  return marked.size ? `(${marked.size}) ${bare}` : bare;
}

function syncTitle() {
  const want = titleWithCount(document.title);
  if (document.title !== want) document.title = want;
}

function message(task, state) {
  const name = task.title || 'A task';
  if (state === STATE.WAITING_FOR_INPUT) return `${name} needs your input`;
  if (state === STATE.FAILED) return `${name} failed`;
  if (state === STATE.REVIEW) return `${name} is ready for review`;
  if (state === STATE.COMPLETED) return `${name} completed`;
  return `${name}: ${STATE_LABELS[state] || state}`;
}

/** Whether the person is looking at the page of `taskId` right now. */
function looking(taskId) {
  return openTask === taskId && !document.hidden && document.hasFocus();
}

function raise(task, state) {
  const N = notifications();
  if (!N || N.permission !== 'granted') return;
  try {
    const n = new N(message(task, state), { body: `Now ${STATE_LABELS[state] || state}`, tag: `kandev-${task.id}` });
    n.onclick = () => { window.focus(); location.hash = `#/tasks/${encodeURIComponent(task.id)}`; };
  } catch (e) { console.warn('notification refused', e); }
}

function seeTask(t, execution) {
  if (!t || !t.id) return;
  const before = latest.get(t.id);
  latest.set(t.id, { task: t, execution: execution === undefined ? before && before.execution : execution });
  const st = taskState(t);
  const was = known.get(t.id);
  known.set(t.id, st);
  if (!ATTENTION.has(st)) { marked.delete(t.id); return; }
  // A task first seen already there counts only when it got there while
  // this page was open (a launch can fail before the first poll sees TODO).
  if (was === st) return;
  if (was === undefined && !(Date.parse(t.updated_at || t.created_at) >= startedAt)) return;
  // Nothing to point at when the person is looking at that very task.
  if (looking(t.id)) return;
  marked.set(t.id, st);
  raise(t, st);
}

function onAnswer(method, path, data) {
  if (method !== 'GET' || !data) return;
  if (path === '/boards' && Array.isArray(data.boards)) {
    boardList = { at: Date.now(), boards: data.boards.slice(0, MAX_BOARDS) };
    // The tasks of a board that is gone (or no longer the person's) go too.
    const ids = new Set(data.boards.map((b) => b.id));
    for (const [id, v] of latest) if (!ids.has(v.task.board_id)) latest.delete(id);
    changed();
    return;
  }
  if (/^\/boards\/[^/]+\/tasks(\?|$)/.test(path)) {
    const list = Array.isArray(data) ? data : data.tasks || data.items || [];
    list.forEach((t) => seeTask(t));
  } else if (/^\/boards\/[^/]+\/cards(\?|$)/.test(path)) {
    const boardId = decodeURIComponent(path.split('/')[2]);
    boardSeen.set(boardId, Date.now());
    const cards = Array.isArray(data.cards) ? data.cards : [];
    // A board's full list: its tasks not in it are gone.
    const ids = new Set(cards.map((c) => c && c.task && c.task.id));
    for (const [id, v] of latest) if (v.task.board_id === boardId && !ids.has(id)) latest.delete(id);
    cards.forEach((c) => c && seeTask(c.task, c.execution));
  } else if (/^\/tasks\/[^/?]+$/.test(path)) seeTask(data);
  else return;
  changed();
}

function changed() {
  syncTitle();
  for (const fn of needsWatchers) { try { fn(); } catch (e) { console.error(e); } }
}

/** Cards pushed by board `boardId`'s live stream (board.js). */
export function seeCards(boardId, cards) {
  boardSeen.set(boardId, Date.now());
  for (const c of cards) if (c && c.task) seeTask(c.task, c.execution);
  changed();
}

/**
 * Board `boardId` is followed live while the page shows it: the slow poll
 * leaves it alone. Returns the function that stops following it.
 */
export function followBoard(boardId) {
  followed.set(boardId, (followed.get(boardId) || 0) + 1);
  return () => {
    const n = (followed.get(boardId) || 1) - 1;
    if (n > 0) followed.set(boardId, n); else followed.delete(boardId);
  };
}

/** The tasks waiting for a person, newest change first: [{task, execution}]. */
export function needsYou() {
  return [...latest.values()]
    .filter((v) => NEEDS.includes(taskState(v.task)))
    .sort((a, b) => String(b.task.updated_at).localeCompare(String(a.task.updated_at)));
}

/** Runs `fn` whenever what needs the person may have changed. */
export function onNeedsChange(fn) {
  needsWatchers.add(fn);
  return () => needsWatchers.delete(fn);
}

/** Forgets every task (logging out). */
export function forgetTasks() {
  known.clear();
  marked.clear();
  latest.clear();
  boardSeen.clear();
  boardList = { at: 0, boards: [] };
  changed();
}

/** The page of `taskId` is shown (null: some other page). */
export function viewing(taskId) {
  openTask = taskId;
  looked();
}

/** The person looks (again): the task whose page is shown needs no mark. */
function looked() {
  if (openTask && looking(openTask) && marked.delete(openTask)) syncTitle();
}

/**
 * Fetches the cards of every board of the person that no view fetched in
 * the last poll period; what comes back goes through `onAnswer` like any
 * view's answer. One board failing does not stop the others.
 */
async function pollBoards() {
  clearTimeout(pollTimer);
  if (auth.token) {
    try {
      if (Date.now() - boardList.at >= BOARD_LIST_MS) boardList = { at: Date.now(), boards: (await api.boards()).slice(0, MAX_BOARDS) };
      const due = boardList.boards.filter((b) => !followed.has(b.id) && !(Date.now() - (boardSeen.get(b.id) || 0) < BOARDS_POLL_MS));
      await Promise.all(due.map((b) => get(`/boards/${enc(b.id)}/cards`).catch(() => null)));
    } catch { /* offline or logged out: the next poll tries again */ }
  }
  pollTimer = setTimeout(pollBoards, BOARDS_POLL_MS);
}

function renderButton() {
  if (!button) return;
  const N = notifications();
  const perm = N ? N.permission : 'unsupported';
  button.hidden = perm === 'unsupported';
  button.dataset.permission = perm;
  button.disabled = perm === 'granted';
  button.textContent = perm === 'granted' ? 'Notifications on' : perm === 'denied' ? 'Notifications blocked' : 'Notify me';
  button.title = perm === 'denied'
    ? 'The browser blocks notifications for this site; allow them in its site settings.'
    : perm === 'granted' ? 'You are notified when a task needs input, is ready for review, completes or fails.'
      : 'Get a browser notification when a task needs input, is ready for review, completes or fails.';
}

async function ask() {
  const N = notifications();
  if (!N) return;
  try {
    // Older browsers take a callback instead of returning a promise.
    await new Promise((resolve) => { const p = N.requestPermission(resolve); if (p && p.then) p.then(resolve, resolve); });
  } catch (e) { console.warn(e); }
  renderButton();
}

/** Wires the opt-in button into `slot` and starts following task states. */
export function installNotifier(slot) {
  button = h('button', { type: 'button', class: 'btn btn-ghost btn-small', testid: 'notify-optin', onclick: ask });
  slot.append(button);
  renderButton();
  observe(onAnswer);
  // Views set document.title; keep the count in front of whatever they set.
  const titleEl = document.querySelector('title');
  if (titleEl) new MutationObserver(syncTitle).observe(titleEl, { childList: true, characterData: true, subtree: true });
  window.addEventListener('focus', () => { renderButton(); looked(); });
  document.addEventListener('visibilitychange', looked);
  pollTimer = setTimeout(pollBoards, BOARDS_POLL_MS);
  return {
    refresh: renderButton,
    get count() { return marked.size; },
    /** Polls the boards now (tests; a person never needs to). */
    poll: pollBoards,
  };
}
