// Thin JSON client for the gateway's /api/v1. Keeps the bearer token for the
// tab's lifetime (sessionStorage) and turns error bodies into ApiError.

import { STATE_LABELS } from './states.js';

const TOKEN_KEY = 'kandev.token';
const USER_KEY = 'kandev.user';
export const API = '/api/v1';

/** Server text with raw task-state names (IN_PROGRESS) as their labels. */
export function humanizeStates(text) {
  return String(text).replace(/\b(?:TASK_STATE_)?([A-Z][A-Z_]+[A-Z])\b/g, (m, name) => {
    const label = STATE_LABELS[name];
    return label ? `“${label}”` : m;
  });
}

export class ApiError extends Error {
  constructor(status, body) {
    const msg = (body && (body.message || body.error)) || `HTTP ${status}`;
    super(humanizeStates(msg));
    this.raw = msg;
    this.status = status;
    this.code = body && body.error;
    this.details = body && body.details;
  }
}

export const auth = {
  get token() { return sessionStorage.getItem(TOKEN_KEY); },
  get user() { return sessionStorage.getItem(USER_KEY) || ''; },
  set(token, user) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(USER_KEY, user || '');
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(USER_KEY);
  },
};

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

export async function request(method, path, body, { signal } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const token = auth.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(API + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = { message: text }; }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && !path.startsWith('/auth/login')) onUnauthorized(err);
    throw err;
  }
  for (const fn of observers) {
    try { fn(method, path, data); } catch (e) { console.error(e); }
  }
  return data;
}

// Observers of successful answers (the notifier follows task states through
// whatever the views fetch, without polling on its own).
const observers = new Set();
export function observe(fn) { observers.add(fn); return () => observers.delete(fn); }

export const get = (p, o) => request('GET', p, undefined, o);
export const post = (p, b, o) => request('POST', p, b === undefined ? {} : b, o);
export const patch = (p, b, o) => request('PATCH', p, b, o);
export const del = (p, o) => request('DELETE', p, undefined, o);

// The gateway's lists are objects with one named array ({boards: [...]},
// {tasks: [...]}, as in docs/openapi.yaml); anything else is a broken
// contract, reported, never guessed around.
export function asList(data, key) {
  if (data && Array.isArray(data[key])) return data[key];
  throw new ApiError(0, { message: `unexpected answer: no "${key}" list` });
}

export const enc = encodeURIComponent;

export const api = {
  login: (username, password) => post('/auth/login', { username, password }),
  me: () => get('/auth/me'),
  boards: async () => asList(await get('/boards'), 'boards'),
  board: (id) => get(`/boards/${enc(id)}`),
  createBoard: (b) => post('/boards', b),
  updateBoard: (id, b) => patch(`/boards/${enc(id)}`, b),
  deleteBoard: (id) => del(`/boards/${enc(id)}`),
  tasks: async (boardId, opts) => {
    const all = [];
    let token = '';
    for (let page = 0; page < 20; page++) {
      const data = await get(`/boards/${enc(boardId)}/tasks?page_size=500${token ? `&page_token=${enc(token)}` : ''}`, opts);
      all.push(...asList(data, 'tasks'));
      token = data && data.next_page_token;
      if (!token) break;
    }
    return all;
  },
  createTask: (boardId, t) => post(`/boards/${enc(boardId)}/tasks`, t),
  task: (id, opts) => get(`/tasks/${enc(id)}`, opts),
  updateTask: (id, t) => patch(`/tasks/${enc(id)}`, t),
  deleteTask: (id) => del(`/tasks/${enc(id)}`),
  setState: (id, state) => patch(`/tasks/${enc(id)}/state`, { state }),
  moveTask: (id, columnId, version) => post(`/tasks/${enc(id)}/move`, { column_id: columnId, version }),
  taskEvents: async (id) => asList(await get(`/tasks/${enc(id)}/events`), 'events'),
  changes: (id) => get(`/tasks/${enc(id)}/changes`),
  fileDiff: (id, path) => get(`/tasks/${enc(id)}/changes/diff?path=${enc(path)}`),
  review: (id, body) => post(`/tasks/${enc(id)}/review`, body),
  reviewComments: (id) => get(`/tasks/${enc(id)}/review/comments`),
  resolveComment: (id, commentId, resolved) => patch(`/tasks/${enc(id)}/review/comments/${enc(commentId)}`, { resolved }),
  agentTypes: async ({ includeDisabled = false } = {}) =>
    asList(await get(`/agent-types${includeDisabled ? '?include_disabled=true' : ''}`), 'agent_types'),
  createAgentType: (t) => post('/agent-types', t),
  replaceAgentType: (id, t) => request('PUT', `/agent-types/${enc(id)}`, t),
  patchAgentType: (id, t) => patch(`/agent-types/${enc(id)}`, t),
  disableAgentType: (id) => post(`/agent-types/${enc(id)}/disable`),
  secrets: async () => asList(await get('/users/me/secrets'), 'secrets'),
  setSecret: (name, value) => request('PUT', `/users/me/secrets/${enc(name)}`, { value }),
  deleteSecret: (name) => del(`/users/me/secrets/${enc(name)}`),
  logs: (instanceId, tail = 500) => get(`/agents/${enc(instanceId)}/logs?tail=${tail}`),
  start: (taskId, body) => post(`/orchestrator/tasks/${enc(taskId)}/start`, body),
  stop: (taskId, body) => post(`/orchestrator/tasks/${enc(taskId)}/stop`, body),
  status: (taskId, opts) => get(`/orchestrator/tasks/${enc(taskId)}/status`, opts),
};

// Task object helpers, tolerant of small naming differences.
// The task's state: one of STATES (js/states.js), as the API sends it.
export function taskState(t) { return t.state; }
