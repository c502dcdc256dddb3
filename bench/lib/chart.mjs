// The SVG chart, hand-written (no dependency): two panels.
//   1. acquire + release cycle p50 per implementation (bars, with p99 whiskers), disk and tmpfs
//      side by side, on a log axis (MemoryLease's ~1 µs and a durable disk cycle's ~1 ms on one
//      chart);
//   2. crash takeover (SIGKILL → a waiting acquire has it) p50 with p99 whiskers, Lease vs
//      proper-lockfile vs lockfile, on a log axis (ms vs s).
import { IMPLS } from './impls.mjs';
import { fmt } from './report.mjs';

const COLORS = { disk: '#3b6ea8', tmpfs: '#e08a2c' };
/** Group labels, one array entry a line. */
const SHORT = {
  'floor-durable': ['C floor', '(durable)'],
  floor: ['C floor', '(no fsync)'],
  'node-floor': ['Node floor', '(durable)'],
  lease: ['flocklease', 'Lease'],
  memory: ['flocklease', 'MemoryLease'],
  'proper-lockfile': ['proper-lockfile', '(default)'],
  'proper-lockfile-norealpath': ['proper-lockfile', '(realpath: false)'],
  lockfile: ['lockfile'],
  'floor-crash': ['C floor', '(C holder)'],
  'node-floor-takeover': ['Node floor', '(takeover)'],
};
const shortName = (key) => SHORT[key] ?? [IMPLS[key]?.short ?? key];

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A log10 axis from `lo` to `hi` (powers of ten) mapped onto [y0 (bottom), y1 (top)]. */
function logAxis(values, y0, y1) {
  const finite = values.filter((v) => Number.isFinite(v) && v > 0);
  const lo = 10 ** Math.floor(Math.log10(Math.min(...finite, 1)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...finite, 10)));
  const y = (v) =>
    y0 - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (y0 - y1);
  const ticks = [];
  for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  return { y, ticks };
}

function panel({ x, y, width, height, title, unit, tickLabel, groups, fsList }) {
  // groups: [{ name, values: { [fs]: { p50, p99 } } }]
  const parts = [];
  const left = x + 72;
  const right = x + width - 10;
  const top = y + 34;
  const bottom = y + height - 78;
  const all = groups.flatMap((g) => fsList.flatMap((fs) => [g.values[fs]?.p50, g.values[fs]?.p99]));
  const axis = logAxis(all, bottom, top);
  parts.push(
    `<text x="${x + width / 2}" y="${y + 18}" text-anchor="middle" font-size="14" font-weight="bold">${esc(title)}</text>`,
  );
  for (const t of axis.ticks) {
    const ty = axis.y(t);
    parts.push(`<line x1="${left}" y1="${ty}" x2="${right}" y2="${ty}" stroke="#ddd"/>`);
    parts.push(`<text x="${left - 6}" y="${ty + 4}" text-anchor="end" font-size="11">${esc(tickLabel(t))}</text>`);
  }
  parts.push(
    `<text x="${x + 14}" y="${(top + bottom) / 2}" transform="rotate(-90 ${x + 14} ${(top + bottom) / 2})" text-anchor="middle" font-size="11">${esc(unit)} (log scale)</text>`,
  );
  parts.push(`<line x1="${left}" y1="${bottom}" x2="${right}" y2="${bottom}" stroke="#333"/>`);
  const slot = (right - left) / groups.length;
  const barWidth = Math.min(28, (slot - 12) / fsList.length);
  groups.forEach((g, i) => {
    const cx = left + slot * i + slot / 2;
    fsList.forEach((fs, j) => {
      const v = g.values[fs];
      if (!v || !Number.isFinite(v.p50)) return;
      const bx = cx - (barWidth * fsList.length) / 2 + j * barWidth;
      const by = axis.y(v.p50);
      parts.push(
        `<rect x="${bx + 1}" y="${by}" width="${barWidth - 2}" height="${Math.max(0, bottom - by)}" fill="${COLORS[fs]}"><title>${esc(`${g.name.join(' ')}, ${fs}: p50 ${fmt(v.p50)} ${unit}, p99 ${fmt(v.p99)} ${unit}`)}</title></rect>`,
      );
      if (Number.isFinite(v.p99)) {
        const wy = axis.y(v.p99);
        const wx = bx + barWidth / 2;
        parts.push(
          `<line x1="${wx}" y1="${by}" x2="${wx}" y2="${wy}" stroke="#222"/><line x1="${wx - 4}" y1="${wy}" x2="${wx + 4}" y2="${wy}" stroke="#222"/>`,
        );
      }
      // A white halo keeps the value readable across the whisker.
      parts.push(
        `<text x="${bx + barWidth / 2}" y="${by - 3}" text-anchor="middle" font-size="9" stroke="#fff" stroke-width="3" paint-order="stroke">${esc(fmt(v.p50))}</text>`,
      );
    });
    g.name.forEach((w, k) =>
      parts.push(`<text x="${cx}" y="${bottom + 14 + k * 12}" text-anchor="middle" font-size="11">${esc(w)}</text>`),
    );
  });
  return parts.join('\n');
}

export function chartSvg(results) {
  const { figures: f } = results;
  const width = 980;
  const fsList = ['disk', 'tmpfs'].filter((fs) => f.cycle?.[fs] || f.crash?.[fs]);
  const cycleKeys = Object.keys(f.cycle?.tmpfs ?? f.cycle?.disk ?? {});
  const cycleGroups = cycleKeys.map((k) => ({
    name: shortName(k),
    values: Object.fromEntries(fsList.map((fs) => [fs, f.cycle?.[fs]?.[k]])),
  }));
  const crashKeys = Object.keys(f.crash?.tmpfs ?? f.crash?.disk ?? {});
  const crashGroups = crashKeys.map((k) => ({
    name: shortName(k),
    values: Object.fromEntries(fsList.map((fs) => [fs, f.crash?.[fs]?.[k]])),
  }));
  const us = (t) => (t >= 1000 ? `${t / 1000} ms` : `${t} µs`);
  const ms = (t) => (t >= 1000 ? `${t / 1000} s` : `${t} ms`);
  const h1 = 360;
  const h2 = 300;
  const legendY = h1 + h2 + 10;
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${legendY + 40}" viewBox="0 0 ${width} ${legendY + 40}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    panel({
      x: 0,
      y: 0,
      width,
      height: h1,
      title: 'Acquire + release cycle, p50 (bar) and p99 (whisker)',
      unit: 'µs',
      tickLabel: us,
      groups: cycleGroups,
      fsList,
    }),
    panel({
      x: 0,
      y: h1,
      width: width * 0.62,
      height: h2,
      title: 'Crash takeover: SIGKILL → waiting acquire has it',
      unit: 'ms',
      tickLabel: ms,
      groups: crashGroups,
      fsList,
    }),
  ];
  const nx = width * 0.64;
  const note = [
    `${results.mode === 'quick' ? 'QUICK MODE: tiny counts, not meaningful' : 'Full run'} · ${results.startedAt.slice(0, 10)}`,
    `${results.machine.cpu}`,
    `${results.machine.cores} cores · ${results.machine.kernel} · Node ${results.machine.node}`,
    `disk = ${results.machine.dirs.disk?.fsType ?? '?'}, tmpfs = ${results.machine.dirs.tmpfs?.fsType ?? '?'}`,
    `load average at start: ${results.load.start.join(' ')}`,
    `peers wait by polling every ${results.config.peers.pollMs} ms;`,
    `proper-lockfile stale = ${results.config.peers.staleMs} ms (its minimum),`,
    `lockfile stale = ${results.config.peers.staleMs} ms`,
    `flocklease: the kernel drops a dead holder's flock`,
  ];
  note.forEach((line, i) => svg.push(`<text x="${nx}" y="${h1 + 50 + i * 18}" font-size="12">${esc(line)}</text>`));
  fsList.forEach((fs, i) => {
    svg.push(`<rect x="${60 + i * 120}" y="${legendY + 8}" width="14" height="14" fill="${COLORS[fs]}"/>`);
    svg.push(
      `<text x="${80 + i * 120}" y="${legendY + 20}" font-size="12">${fs} (${esc(results.machine.dirs[fs]?.fsType ?? '')})</text>`,
    );
  });
  svg.push(`<text x="${320}" y="${legendY + 20}" font-size="12">bars: p50 · whiskers: p99 · log axes</text>`);
  svg.push('</svg>');
  return `${svg.join('\n')}\n`;
}
