/**
 * The table of keys: one row per key (its name, kind, holders, a bar per holder that counts its
 * lease down, and its waiters). Rows are made again only when their data changed; `tick` moves
 * the bars of the rows shown.
 */
import { leftMs, type StoredRow } from './store.js';

interface ShownRow {
  readonly stored: StoredRow;
  readonly tr: HTMLTableRowElement;
  readonly bars: ReadonlyArray<{ readonly progress: HTMLProgressElement; readonly text: HTMLElement }>;
}

export class KeyTable {
  readonly #body: HTMLTableSectionElement;
  #shown = new Map<string, ShownRow>();
  #leaseMs = 1;

  constructor(body: HTMLTableSectionElement) {
    this.#body = body;
  }

  render(rows: readonly StoredRow[], leaseMs: number, now: number): void {
    this.#leaseMs = Math.max(1, leaseMs);
    const shown = new Map<string, ShownRow>();
    for (const stored of rows) {
      const previous = this.#shown.get(stored.row.key);
      shown.set(stored.row.key, previous?.stored === stored ? previous : this.#make(stored));
    }
    this.#shown = shown;
    this.#body.replaceChildren(...[...shown.values()].map((row) => row.tr));
    this.tick(now);
  }

  /** Moves the lease bars of the rows shown to `now`. */
  tick(now: number): void {
    for (const { stored, bars } of this.#shown.values()) {
      const left = leftMs(stored, now);
      bars.forEach(({ progress, text }, i) => {
        const ms = left[i] ?? 0;
        progress.max = Math.max(this.#leaseMs, stored.row.holders[i]?.expiresInMs ?? 0);
        progress.value = ms;
        text.textContent = ms > 0 ? formatMs(ms) : 'expired';
      });
    }
  }

  #make(stored: StoredRow): ShownRow {
    const { row } = stored;
    const tr = document.createElement('tr');
    const keyCell = element('th', row.key, 'key');
    keyCell.scope = 'row';
    const holders = document.createElement('td');
    const leases = document.createElement('td');
    const bars = row.holders.map((holder) => {
      const line = element('div', '', 'holder');
      line.append(element('span', holder.owner, 'owner'), ' ', element('span', `#${holder.token}`, 'token'));
      if (holder.value !== undefined) line.append(' ', element('span', holder.value, 'value'));
      holders.append(line);
      const lease = element('div', '', 'lease');
      const progress = document.createElement('progress');
      progress.setAttribute('aria-label', `Lease left of ${holder.owner} on ${row.key}`);
      const text = element('span', '', 'left');
      lease.append(progress, text);
      leases.append(lease);
      return { progress, text };
    });
    if (row.holders.length === 0) holders.textContent = '–';
    const waiters = element('td', String(row.waiters), 'waiters');
    if (row.queue.length > 0) {
      const more = row.waiters > row.queue.length ? ', …' : '';
      waiters.append(' ', element('span', `(${row.queue.join(', ')}${more})`, 'queue'));
    }
    tr.append(keyCell, element('td', row.kind, 'kind'), holders, leases, waiters);
    return { stored, tr, bars };
  }
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  text: string,
  className: string,
): HTMLElementTagNameMap[K] {
  const made = document.createElement(tag);
  made.className = className;
  made.textContent = text;
  return made;
}

/** `9.4 s`, `42.0 s`, `3 min 05 s`. */
function formatMs(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.floor(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, '0')} s`;
}
