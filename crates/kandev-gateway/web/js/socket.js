// The task stream: a WebSocket that reconnects by itself with backoff and
// resumes with ?after=<last seq>. The token travels as a subprotocol:
// ["kandev.bearer", token].

import { auth, API } from './api.js';

export class TaskSocket {
  constructor(taskId, { lastSeq, onFrame, onControl, onStatus }) {
    this.taskId = taskId;
    this.lastSeq = lastSeq;       // () => number
    this.onFrame = onFrame;
    this.onControl = onControl || (() => {});
    this.onStatus = onStatus || (() => {});
    this.ws = null;
    this.closed = false;
    this.attempt = 0;
    this.reconnects = 0;
    this.timer = null;
    this.status = 'idle';
    this.pending = new Map();
    this.seqNo = 0;
  }

  url() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    return `${proto}//${location.host}${API}/orchestrator/tasks/${encodeURIComponent(this.taskId)}/stream?after=${this.lastSeq()}`;
  }

  setStatus(s) { this.status = s; this.onStatus(s, this); }

  open() {
    if (this.closed) return;
    clearTimeout(this.timer);
    const token = auth.token;
    let ws;
    try {
      ws = new WebSocket(this.url(), token ? ['kandev.bearer', token] : undefined);
    } catch (e) {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.setStatus(this.reconnects || this.attempt ? 'reconnecting' : 'connecting');
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.attempt = 0;
      this.setStatus('open');
    };
    ws.onmessage = (m) => {
      if (this.ws !== ws) return;
      let f;
      try { f = JSON.parse(m.data); } catch { return; }
      if (f && f.seq != null && f.event) this.onFrame(f);
      else if (f) {
        const waiter = f.id != null && this.pending.get(String(f.id));
        if (waiter) {
          this.pending.delete(String(f.id));
          clearTimeout(waiter.timer);
          if (f.type === 'error') waiter.reject(Object.assign(new Error(f.message || f.error || 'command failed'), { frame: f }));
          else waiter.resolve(f);
          return;
        }
        this.onControl(f);
        // the server dropped us behind: resume from what we have
        if (f.type === 'lagging' || f.type === 'resync') this.reconnectNow();
      }
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) { this.setStatus('closed'); return; }
      this.failPending('connection lost');
      if (e.code === 1008 && /^lagging/i.test(e.reason || '')) {
        // too slow for the live stream: resume at once from our last seq
        this.onControl({ type: 'lagging', message: e.reason });
        this.attempt = 0;
      } else if (e.code === 4401 || e.code === 1008) this.onControl({ type: 'error', message: e.reason || 'unauthorized' });
      this.scheduleReconnect();
    };
    ws.onerror = () => {}; // onclose follows
  }

  scheduleReconnect() {
    if (this.closed) return;
    this.setStatus('reconnecting');
    const base = Math.min(10_000, 300 * 2 ** this.attempt);
    const delay = base / 2 + Math.random() * base / 2;
    this.attempt++;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.reconnects++; this.open(); }, delay);
  }

  reconnectNow() {
    if (this.ws) { const ws = this.ws; this.ws = null; try { ws.close(4000, 'resync'); } catch { /* ignore */ } }
    this.scheduleReconnect();
  }

  /** Cut the socket as a network failure would (tests use this). */
  drop() {
    if (this.ws) { try { this.ws.close(4000, 'debug drop'); } catch { /* ignore */ } }
  }

  send(obj) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  /** Sends a command and resolves with its `ack` (rejects on `error`). */
  command(obj, timeoutMs = 20_000) {
    const id = `c${++this.seqNo}`;
    return new Promise((resolve, reject) => {
      if (!this.send({ ...obj, id })) { reject(new Error('not connected')); return; }
      const timer = setTimeout(() => { this.pending.delete(id); reject(new Error('no answer from the server')); }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
    });
  }

  failPending(msg) {
    for (const [, w] of this.pending) { clearTimeout(w.timer); w.reject(new Error(msg)); }
    this.pending.clear();
  }

  get isOpen() { return !!this.ws && this.ws.readyState === WebSocket.OPEN; }

  close() {
    this.closed = true;
    this.failPending('closed');
    clearTimeout(this.timer);
    if (this.ws) { const ws = this.ws; this.ws = null; try { ws.close(1000, 'leaving'); } catch { /* ignore */ } }
    this.setStatus('closed');
  }
}
