// Attention: while the page is open, a task that starts waiting for input,
// completes or fails bumps a count in the tab's title ("(2) Kandev") and,
// once the person opted in, raises a browser notification. Task states are
// followed through what the views already fetch (api.observe), so this adds
// no polling; opening a task clears its mark.

import { h } from './dom.js';
import { observe, taskState } from './api.js';
import { STATE, STATE_LABELS } from './common.js';

const ATTENTION = new Set([STATE.WAITING_FOR_INPUT, STATE.COMPLETED, STATE.FAILED]);
const known = new Map();  // task id -> last state seen
const marked = new Map(); // task id -> state that needs a look
let openTask = null;      // the task whose page is shown
let button = null;
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
  return `${name}: ${STATE_LABELS[state] || state}`;
}

function raise(task, state) {
  const N = notifications();
  if (!N || N.permission !== 'granted') return;
  try {
    const n = new N(message(task, state), { body: `Now ${STATE_LABELS[state] || state}`, tag: `kandev-${task.id}` });
    n.onclick = () => { window.focus(); location.hash = `#/tasks/${encodeURIComponent(task.id)}`; };
  } catch (e) { console.warn('notification refused', e); }
}

function seeTask(t) {
  if (!t || !t.id) return;
  const st = taskState(t);
  const before = known.get(t.id);
  known.set(t.id, st);
  if (!ATTENTION.has(st)) { marked.delete(t.id); return; }
  // A task first seen already there counts only when it was made while
  // this page was open (a launch can fail before the first poll sees TODO).
  if (before === st) return;
  if (before === undefined && !(Date.parse(t.created_at) >= startedAt)) return;
  // Nothing to point at when the person is looking at that very task.
  if (openTask === t.id && !document.hidden) return;
  marked.set(t.id, st);
  raise(t, st);
}

function onAnswer(method, path, data) {
  if (method !== 'GET' || !data) return;
  if (/^\/boards\/[^/]+\/tasks(\?|$)/.test(path)) {
    const list = Array.isArray(data) ? data : data.tasks || data.items || [];
    list.forEach(seeTask);
  } else if (/^\/boards\/[^/]+\/cards(\?|$)/.test(path)) {
    (Array.isArray(data.cards) ? data.cards : []).forEach((c) => seeTask(c && c.task));
  } else if (/^\/tasks\/[^/?]+$/.test(path)) seeTask(data);
  else return;
  syncTitle();
}

/** Forgets every task (logging out). */
export function forgetTasks() {
  known.clear();
  marked.clear();
  syncTitle();
}

/** The page of `taskId` is shown (null: some other page). */
export function viewing(taskId) {
  openTask = taskId;
  if (taskId && marked.delete(taskId)) syncTitle();
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
    : perm === 'granted' ? 'You are notified when a task needs input, completes or fails.'
      : 'Get a browser notification when a task needs input, completes or fails.';
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
  window.addEventListener('focus', renderButton);
  return { refresh: renderButton, get count() { return marked.size; } };
}
