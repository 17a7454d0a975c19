// A board's live stream (GET /boards/{id}/stream): one WebSocket per open
// board that reconnects by itself with backoff (livesocket.js). Each
// connection starts with a `snapshot` of every card, then `card` and
// `removed` messages as they happen, so a reconnect misses nothing.

import { API } from './api.js';
import { LiveSocket } from './livesocket.js';

export class BoardSocket extends LiveSocket {
  constructor(boardId, { onMessage, onStatus }) {
    super(onStatus);
    this.boardId = boardId;
    this.onMessage = onMessage;
  }

  url() {
    return LiveSocket.wsUrl(`${API}/boards/${encodeURIComponent(this.boardId)}/stream`);
  }

  received(msg) {
    if (typeof msg.type === 'string') this.onMessage(msg);
  }
}
