// A tiny, safe markdown renderer for untrusted agent output.
//
// Safety model: the source is HTML-escaped FIRST; only then are a few
// constructs turned into tags that this file writes itself. Link targets
// must be http(s) URLs, and every attribute value is escaped text, so agent
// output can never inject markup, scripts or javascript: URLs.
// Supported: ``` code fences, `inline code`, **bold**, *italic* / _italic_,
// [links](https://...), bare https:// URLs, - / * / 1. lists, # headings,
// > quotes, paragraphs.

export function escapeHtml(s) {
  return String(s)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const PH = '\u0000';

// Inline formatting on an already-escaped line.
function inline(escaped) {
  const stash = [];
  const keep = (html) => `${PH}${stash.push(html) - 1}${PH}`;
  let s = escaped;
  // inline code first: its content is final
  s = s.replace(/`([^`]+)`/g, (_, c) => keep(`<code>${c}</code>`));
  // [text](http(s)://url) — url is escaped text; quotes are &quot; already
  s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()<>]+)\)/g, (_, text, url) =>
    keep(`<a href="${url}" target="_blank" rel="noopener noreferrer nofollow">${text}</a>`));
  // bare URLs
  s = s.replace(/\bhttps?:\/\/(?:(?!&quot;|&lt;|&gt;|&#39;)[^\s<>()])+/g, (m) => {
    const url = m.replace(/[.,;:!?]+$/, '');
    return keep(`<a href="${url}" target="_blank" rel="noopener noreferrer nofollow">${url}</a>`) + m.slice(url.length);
  });
  s = s.replace(/\*\*([^*\n]+?)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/__([^_\n]+?)__/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\w)/g, '$1<em>$2</em>');
  s = s.replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?!\w)/g, '$1<em>$2</em>');
  return s.replace(new RegExp(`${PH}(\\d+)${PH}`, 'g'), (_, i) => stash[Number(i)]);
}

export function renderMarkdown(src) {
  const text = String(src ?? '').replace(/\u0000/g, '').replace(/\r\n?/g, '\n');
  const lines = text.split('\n');
  const out = [];
  let para = [];
  let list = null; // {tag, items}
  let quote = [];

  const flushPara = () => {
    if (para.length) out.push(`<p>${para.map((l) => inline(escapeHtml(l))).join('<br>')}</p>`);
    para = [];
  };
  const flushList = () => {
    if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(escapeHtml(i))}</li>`).join('')}</${list.tag}>`);
    list = null;
  };
  const flushQuote = () => {
    if (quote.length) out.push(`<blockquote>${quote.map((l) => inline(escapeHtml(l))).join('<br>')}</blockquote>`);
    quote = [];
  };
  const flushAll = () => { flushPara(); flushList(); flushQuote(); };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+.#-]*)\s*$/.exec(line);
    if (fence) {
      flushAll();
      const marker = fence[1];
      const lang = fence[2];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(marker)) body.push(lines[i++]);
      const cls = lang ? ` class="lang-${escapeHtml(lang)}"` : '';
      out.push(`<pre><code${cls}>${escapeHtml(body.join('\n'))}</code></pre>`);
      continue;
    }
    if (!line.trim()) { flushAll(); continue; }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    if (h) {
      flushAll();
      const level = Math.min(6, h[1].length + 2); // keep headings below the page's own
      out.push(`<h${level} class="md-h">${inline(escapeHtml(h[2]))}</h${level}>`);
      continue;
    }
    const ul = /^\s*[-*+]\s+(.*)$/.exec(line);
    const ol = /^\s*\d+[.)]\s+(.*)$/.exec(line);
    if (ul || ol) {
      flushPara(); flushQuote();
      const tag = ul ? 'ul' : 'ol';
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, items: [] };
      list.items.push((ul || ol)[1]);
      continue;
    }
    const q = /^\s*>\s?(.*)$/.exec(line);
    if (q) { flushPara(); flushList(); quote.push(q[1]); continue; }
    if (list && /^\s{2,}\S/.test(line)) { list.items[list.items.length - 1] += ' ' + line.trim(); continue; }
    flushList(); flushQuote();
    para.push(line);
  }
  flushAll();
  return out.join('');
}
