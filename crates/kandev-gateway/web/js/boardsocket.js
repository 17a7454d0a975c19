// A board's live stream (GET /boards/{id}/stream): one WebSocket per open
// board that reconnects by itself with backoff. Each connection starts
// with a `snapshot` of every card, then `card` and `removed` messages as
// they happen, so a reconnect misses nothing. The token travels as a
// subprotocol: ["kandev.bearer", token].

import { auth, API } from './api.js';

export class BoardSocket {
  constructor(boardId, { onMessage, onStatus }) {
    this.boardId = boardId;
    this.onMessage = onMessage;
    this.onStatus = onStatus || (() => {});
    this.ws = null;
    this.closed = false;
    this.attempt = 0;
    this.connections = 0;
    this.timer = null;
    this.status = 'idle';
  }

  url() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    return `${proto}//${location.host}${API}/boards/${encodeURIComponent(this.boardId)}/stream`;
  }

  setStatus(s) { this.status = s; this.onStatus(s, this); }

  open() {
    if (this.closed) return;
    clearTimeout(this.timer);
    const token = auth.token;
    let ws;
    try {
      ws = new WebSocket(this.url(), token ? ['kandev.bearer', token] : undefined);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.setStatus(this.connections ? 'reconnecting' : 'connecting');
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.attempt = 0;
      this.connections++;
      this.setStatus('open');
    };
    ws.onmessage = (m) => {
      if (this.ws !== ws) return;
      let msg;
      try { msg = JSON.parse(m.data); } catch { return; }
      if (msg && typeof msg.type === 'string') this.onMessage(msg);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) { this.setStatus('closed'); return; }
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
    this.timer = setTimeout(() => this.open(), delay);
  }

  /** Cut the socket as a network failure would (tests use this). */
  drop() {
    if (this.ws) { try { this.ws.close(4000, 'debug drop'); } catch { /* ignore */ } }
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) { const ws = this.ws; this.ws = null; try { ws.close(1000, 'leaving'); } catch { /* ignore */ } }
    this.setStatus('closed');
  }
}
