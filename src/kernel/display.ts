/** Text for a terminal: fields any process chose, escaped, and tables of them. */

/**
 * A field from a record, a file name or a server, safe to print on a terminal (any process chooses
 * its owner name, and the Go original writes whatever it is given). One scheme, as `git` and GNU
 * `ls --quoting-style=escape` do it: `\\` for a backslash; `\e`, `\n`, `\r`, `\t` for their
 * controls; `\xHH` for every other C0 or C1 control and DEL; `\uHHHH` for the line and paragraph
 * separators and the bidirectional overrides and isolates (they reorder what follows them). Then at
 * most `max` characters, the rest shown as `…`. Only table output uses this: JSON keeps exact strings.
 */
export function displayText(text: string, max = DISPLAY_MAX): string {
  const escaped = text.replace(UNSAFE, (c) => {
    const named = NAMED_ESCAPES[c];
    if (named !== undefined) return named;
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${hex(code, 2)}` : `\\u${hex(code, 4)}`;
  });
  const chars = [...escaped];
  return chars.length <= max ? escaped : `${chars.slice(0, max - 1).join('')}…`;
}

/** The widest an id, owner or file name is shown in a table. */
const DISPLAY_MAX = 64;
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\\\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED_ESCAPES: Record<string, string> = { '\\': '\\\\', '\u001b': '\\e', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function hex(code: number, digits: number): string {
  return code.toString(16).padStart(digits, '0');
}

/** Columns padded to their widest cell (cells already escaped); the last column is not padded. */
export function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>, indent = ''): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    indent +
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** `in 25s`, `3m12s ago`, `400ms ago`, `now`: how far `at` is from `now`. */
export function relative(atMs: number, nowMs: number): string {
  const delta = atMs - nowMs;
  if (Math.round(delta) === 0) return 'now';
  const span = compact(Math.abs(delta));
  return delta > 0 ? `in ${span}` : `${span} ago`;
}

/** 300ms, 25s, 3m12s, 2h05m, 3d4h (rounded to the unit shown). */
export function compact(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h`;
}

function pad(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}
