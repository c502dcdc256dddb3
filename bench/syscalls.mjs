#!/usr/bin/env node
// Do the C floor and the lease make the same system calls? Runs 4 warm acquire+release cycles of
// each under strace (over 4 ids, as the cycle benchmark does), keeps the calls on lease files,
// names every path and descriptor by its role (LOCK, RECORD, TEMP, LIVE, DIR), and compares the
// two sequences call for call. Needs strace.
//
//   node bench/syscalls.mjs [dir root, default /dev/shm]   → prints both sequences and a verdict;
//                                                              exit 1 if they differ
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildFloor, FLOOR_BIN } from './lib/c-floor.mjs';

const root = process.argv[2] ?? '/dev/shm';
const here = dirname(fileURLToPath(import.meta.url));
const CYCLES = 4;
const WARM = 8;
const TRACED =
  'openat,newfstatat,fstat,statx,flock,read,write,fsync,fdatasync,close,rename,renameat,renameat2,unlink,unlinkat,access,faccessat,faccessat2';

function role(path, dir) {
  if (path === dir) return 'DIR';
  if (!path.startsWith(`${dir}/`)) return undefined;
  if (path.endsWith('.tmp')) return 'TEMP';
  if (path.endsWith('.lease.json')) return 'RECORD';
  if (path.endsWith('.lock')) return 'LOCK';
  if (path.endsWith('.live')) return 'LIVE';
  return 'OTHER';
}

/** The lease-file calls of an strace -f log, between the MARK-start and MARK-end markers if any. */
function normalize(log, dir) {
  const lines = log.split('\n');
  let on = !log.includes('MARK-start');
  const fds = new Map();
  const calls = [];
  const unfinished = new Map(); // pid → the first half of a call another thread's call interrupted
  for (const raw of lines) {
    const pid = /^(\d+)\s+/.exec(raw)?.[1] ?? '';
    let line = raw.replace(/^\d+\s+/, '');
    if (line.endsWith('<unfinished ...>')) {
      unfinished.set(pid, line.slice(0, -'<unfinished ...>'.length).trimEnd());
      continue;
    }
    const resumed = /^<\.\.\. \w+ resumed>\s?(.*)$/.exec(line);
    if (resumed) {
      line = `${unfinished.get(pid) ?? ''}${resumed[1]}`;
      unfinished.delete(pid);
    }
    if (line.includes('MARK-start')) on = true;
    if (line.includes('MARK-end')) on = false;
    const m = /^(\w+)\((.*)\)\s+=\s+(-?\d+)/.exec(line);
    if (!m) continue;
    const [, name, argsText, result] = m;
    const paths = [...argsText.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((p) => p[1]);
    const fdArg = /^(\d+)/.exec(argsText)?.[1];
    let who;
    if (name === 'openat') {
      who = role(paths[0], dir);
      if (who && Number(result) >= 0) fds.set(result, who);
    } else if (
      /^(newfstatat|statx|rename|renameat2?|unlink|unlinkat|access|faccessat2?)$/.test(name) &&
      paths[0] !== ''
    ) {
      who =
        paths
          .map((p) => role(p, dir))
          .filter(Boolean)
          .join('→') || undefined;
    } else if (fdArg !== undefined) {
      who = fds.get(fdArg);
      if (name === 'close') fds.delete(fdArg);
    }
    if (!on || who === undefined) continue;
    const flags = name === 'flock' ? ` ${argsText.split(', ')[1]}` : '';
    const failed = Number(result) < 0 ? ` = ${/= -1 (\w+)/.exec(line)?.[1] ?? 'error'}` : '';
    calls.push(`${name} ${who}${flags}${failed}`);
  }
  return calls;
}

function strace(args, out) {
  execFileSync('strace', ['-f', '-qq', '-e', `trace=${TRACED}`, '-o', out, ...args], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return readFileSync(out, 'utf8');
}

buildFloor();
const work = mkdtempSync(join(root, 'flocklease-syscalls-'));
try {
  const floorDir = join(work, 'floor');
  const leaseDir = join(work, 'lease');
  mkdirSync(floorDir);
  execFileSync(FLOOR_BIN, [floorDir, String(WARM), '1', '4'], { stdio: 'ignore' }); // warm: the records exist
  const floorCalls = normalize(
    strace([FLOOR_BIN, floorDir, String(CYCLES), '1', '4'], join(work, 'floor.trace')),
    floorDir,
  );
  const program = `
    import { accessSync } from 'node:fs';
    import { Lease } from ${JSON.stringify(join(here, '..', 'dist', 'index.js'))};
    const lease = new Lease(${JSON.stringify(leaseDir)});
    const cycle = async (i) => { const g = await lease.acquire('id-' + (i % 4), 'me'); await lease.release(g); };
    for (let i = 0; i < ${WARM}; i++) await cycle(i);
    try { accessSync('/MARK-start'); } catch {}
    for (let i = 0; i < ${CYCLES}; i++) await cycle(i);
    try { accessSync('/MARK-end'); } catch {}`;
  const leaseCalls = normalize(
    strace([process.execPath, '--input-type=module', '-e', program], join(work, 'lease.trace')),
    leaseDir,
  );

  const width = Math.max(...floorCalls.map((c) => c.length), 10);
  console.log(`${'C floor'.padEnd(width)}   Lease`);
  const n = Math.max(floorCalls.length, leaseCalls.length);
  let differences = 0;
  for (let i = 0; i < n; i++) {
    const same = floorCalls[i] === leaseCalls[i];
    if (!same) differences++;
    console.log(`${(floorCalls[i] ?? '').padEnd(width)} ${same ? ' ' : '≠'} ${leaseCalls[i] ?? ''}`);
  }
  console.log(
    `\n${CYCLES} cycles: C floor ${floorCalls.length} calls (${floorCalls.length / CYCLES} a cycle), Lease ${leaseCalls.length} (${leaseCalls.length / CYCLES} a cycle); ` +
      (differences === 0 ? 'identical, call for call.' : `${differences} positions differ.`),
  );
  process.exitCode = differences === 0 ? 0 : 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
