/**
 * The console page: sign-in (the secret, kept in memory only), then the node panel and the table
 * of held keys, kept current by the event stream. The filter narrows the table at once; when the
 * keys it needs are not all in the page, the stream starts over for the new prefix.
 */
import { NodePanel } from './node-panel.js';
import { LockEventStream, type StreamEvent } from './stream.js';
import { KeyStore } from './store.js';
import { KeyTable } from './table.js';
import type { KeysEvent, NodeView, SnapshotEvent } from './wire.js';

/** Rows drawn at most; the count says how many more match. */
const ROW_LIMIT = 200;
const FILTER_PAUSE_MS = 250;
const TICK_MS = 250;

function byId<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (found === null) throw new Error(`the page has no #${id}`);
  return found as T;
}

const signIn = byId<HTMLFormElement>('signin');
const secretInput = byId<HTMLInputElement>('secret');
const signInError = byId<HTMLElement>('signin-error');
const consoleView = byId<HTMLElement>('console');
const connection = byId<HTMLElement>('connection');
const filter = byId<HTMLInputElement>('filter');
const count = byId<HTMLElement>('count');

const store = new KeyStore();
const table = new KeyTable(byId<HTMLTableSectionElement>('rows'));
const panel = new NodePanel();
let secret: string | undefined;
let node: NodeView | undefined;
/** The prefix of the stream's keys, and whether it holds them all. */
let streamPrefix = '';
let truncated = false;
let renderQueued = false;
let firstRender = true;
let filterTimer: ReturnType<typeof setTimeout> | undefined;

const stream = new LockEventStream({
  onEvent: (event) => receive(event),
  onState: (state, why) => {
    connection.textContent = state === 'live' ? 'Live' : `Reconnecting… (${why ?? 'connection lost'})`;
    connection.className = `connection ${state}`;
  },
  onUnauthorized: () => {
    secret = undefined;
    showSignIn('The server refused the secret: sign in again.');
  },
});

function receive({ event, data }: StreamEvent): void {
  const now = performance.now();
  if (event === 'snapshot') {
    if (firstRender) performance.mark('console:first-snapshot');
    const snapshot = data as SnapshotEvent;
    store.replace(snapshot.keys, now);
    streamPrefix = snapshot.prefix;
    truncated = snapshot.truncated;
    showNode(snapshot.node);
  } else if (event === 'keys') {
    const change = data as KeysEvent;
    store.apply(change.upsert, change.remove, now);
    truncated = change.truncated;
  } else if (event === 'node') {
    showNode(data as NodeView);
  }
  queueRender();
}

function showNode(view: NodeView): void {
  node = view;
  panel.show(view);
}

function queueRender(): void {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    render();
  });
}

function render(): void {
  const now = performance.now();
  const prefix = filter.value;
  const view = store.view(prefix, ROW_LIMIT, now);
  table.render(view.rows, node?.leaseMs ?? 1, now);
  count.textContent = describe(view.rows.length, view.matching, prefix);
  if (firstRender && node !== undefined) {
    firstRender = false;
    performance.mark('console:first-render', { detail: { keys: store.size, rows: view.rows.length } });
  }
}

function describe(shown: number, matching: number, prefix: string): string {
  if (node?.role === 'follower' || node?.role === 'catching-up') return 'This node does not serve the lock table now.';
  const which = prefix === '' ? 'held keys' : `held keys starting with “${prefix}”`;
  if (matching === 0) return `No ${which}.`;
  const more = matching - shown;
  let text = `Showing ${shown.toLocaleString('en')} of ${matching.toLocaleString('en')} ${which}`;
  text += more > 0 ? `; ${more.toLocaleString('en')} more: narrow the prefix to see them.` : '.';
  if (truncated) text += ' The server sends at most 10,000 keys per view: a longer prefix shows the rest.';
  return text;
}

function showSignIn(message: string): void {
  stream.stop();
  consoleView.hidden = true;
  signIn.hidden = false;
  signInError.textContent = message;
  connection.textContent = 'Signed out';
  connection.className = 'connection';
  secretInput.focus();
}

function startConsole(): void {
  signIn.hidden = true;
  signInError.textContent = '';
  consoleView.hidden = false;
  stream.start(filter.value, secret);
}

/** Does the server let these credentials (none: undefined) see its locks? */
async function authorized(candidate: string | undefined): Promise<boolean> {
  const headers: Record<string, string> = candidate === undefined ? {} : { authorization: `Bearer ${candidate}` };
  const response = await fetch('/v1/auth', { headers, cache: 'no-store' });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return ((await response.json()) as { authorized: boolean }).authorized;
}

signIn.addEventListener('submit', (event) => {
  event.preventDefault();
  const candidate = secretInput.value;
  signInError.textContent = '';
  authorized(candidate).then(
    (ok) => {
      secretInput.value = '';
      if (!ok) {
        signInError.textContent = 'That is not the secret.';
        secretInput.focus();
        return;
      }
      secret = candidate;
      startConsole();
    },
    // A secret that cannot go into a header (not Latin-1) is not the secret either.
    () => (signInError.textContent = 'The server could not check that secret.'),
  );
});

filter.addEventListener('input', () => {
  queueRender();
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    const prefix = filter.value;
    // The page holds every key the new prefix needs: a narrower prefix of a complete view.
    if (prefix.startsWith(streamPrefix) && !truncated) return;
    stream.start(prefix, secret);
  }, FILTER_PAUSE_MS);
});

setInterval(() => {
  if (consoleView.hidden) return;
  const now = performance.now();
  if (now >= store.nextExpiry) render();
  else table.tick(now);
}, TICK_MS);

authorized(undefined).then(
  (ok) => (ok ? startConsole() : showSignIn('')),
  () => showSignIn('The server did not answer; reload the page to try again.'),
);
