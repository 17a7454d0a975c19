// Search and filters of the board: the title (words, in any case), the
// state, the agent type and the creator. Cards that do not match are
// hidden, never removed, so live updates keep them current; the choice is
// kept per board for the session (sessionStorage).

import { h } from './dom.js';
import { STATES, STATE_LABELS } from './common.js';
import { taskState } from './api.js';

const ANY = '';
// A card without an agent type (or creator): no id starts with a space.
const NONE = ' none';

function key(boardId) { return `kandev.boardFilter.${boardId}`; }

function loadSaved(boardId) {
  try {
    const v = JSON.parse(sessionStorage.getItem(key(boardId)) || 'null');
    return v && typeof v === 'object' ? v : {};
  } catch { return {}; }
}

/**
 * The filter bar of board `boardId`; `onChange` runs when the person
 * changes a filter. `matches(task)` says whether a card shows;
 * `options(tasks)` refreshes the agent and creator choices.
 */
export function boardFilter(boardId, onChange) {
  const saved = loadSaved(boardId);
  const search = h('input', { type: 'search', class: 'filter-search', testid: 'board-search', placeholder: 'Search titles',
    'aria-label': 'Search the cards by title', value: saved.q || '' });
  const state = h('select', { testid: 'board-filter-state', 'aria-label': 'Filter by state' },
    h('option', { value: ANY }, 'Any state'), STATES.map((s) => h('option', { value: s }, STATE_LABELS[s])));
  const agent = h('select', { testid: 'board-filter-agent', 'aria-label': 'Filter by agent type' });
  const creator = h('select', { testid: 'board-filter-creator', 'aria-label': 'Filter by creator' });
  const clearBtn = h('button', { type: 'button', class: 'btn btn-small btn-ghost', testid: 'board-filter-clear' }, 'Clear');
  const shown = h('span', { class: 'muted small', testid: 'board-filter-shown', 'aria-live': 'polite' });
  state.value = STATES.includes(saved.state) ? saved.state : ANY;
  let wanted = { agent: saved.agent || ANY, creator: saved.creator || ANY };

  function fill(select, values, anyLabel, current) {
    const list = [...values].sort((a, b) => a.localeCompare(b));
    if (current && !list.includes(current)) list.unshift(current);
    const same = select.options.length === list.length + 1 && list.every((v, i) => select.options[i + 1].value === v);
    if (!same) {
      select.replaceChildren(h('option', { value: ANY }, anyLabel), ...list.map((v) => h('option', { value: v }, v === NONE ? '(none)' : v)));
    }
    select.value = current;
  }

  function save() {
    try {
      sessionStorage.setItem(key(boardId), JSON.stringify({ q: search.value, state: state.value, agent: agent.value, creator: creator.value }));
    } catch { /* private mode */ }
  }

  function changed() {
    wanted = { agent: agent.value, creator: creator.value };
    save();
    onChange();
  }
  search.addEventListener('input', changed);
  for (const s of [state, agent, creator]) s.addEventListener('change', changed);
  clearBtn.addEventListener('click', () => {
    search.value = '';
    state.value = ANY; agent.value = ANY; creator.value = ANY;
    changed();
    search.focus();
  });

  const el = h('div', { class: 'board-filter', role: 'search', testid: 'board-filter' },
    search, state, agent, creator, clearBtn, shown);

  return {
    el,
    get active() { return !!(search.value.trim() || state.value || agent.value || creator.value); },
    options(tasks) {
      fill(agent, new Set(tasks.map((t) => t.agent_type || NONE)), 'Any agent', wanted.agent);
      fill(creator, new Set(tasks.map((t) => t.created_by || NONE)), 'Anyone', wanted.creator);
    },
    matches(t) {
      const words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
      const title = String(t.title || '').toLowerCase();
      if (words.some((w) => !title.includes(w))) return false;
      if (state.value && taskState(t) !== state.value) return false;
      if (agent.value !== ANY && (t.agent_type || NONE) !== agent.value) return false;
      if (creator.value !== ANY && (t.created_by || NONE) !== creator.value) return false;
      return true;
    },
    /** Says how many cards show. */
    report(visible, total) {
      shown.textContent = this.active ? `${visible} of ${total} cards` : '';
    },
  };
}
