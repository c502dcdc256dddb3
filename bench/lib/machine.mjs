// What the numbers were measured on.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import os from 'node:os';

/** The file system type of the mount `dir` is on (findmnt: "ext4"; stat -f says "ext2/ext3"). */
function fsType(dir) {
  for (const [command, args] of [
    ['findmnt', ['-n', '-o', 'FSTYPE', '-T', dir]],
    ['stat', ['-f', '-c', '%T', dir]],
  ]) {
    try {
      const type = execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
        .trim()
        .split('\n')[0];
      if (type) return type;
    } catch {
      // try the next way
    }
  }
  return 'unknown';
}

function cpuModel() {
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('model name'));
    return line ? line.split(':')[1].trim() : os.cpus()[0]?.model;
  } catch {
    return os.cpus()[0]?.model;
  }
}

function gitCommit() {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return undefined;
  }
}

export function machineInfo(dirs) {
  return {
    cpu: cpuModel(),
    cores: os.cpus().length,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
    dirs: Object.fromEntries(Object.entries(dirs).map(([name, dir]) => [name, { dir, fsType: fsType(dir) }])),
    commit: gitCommit(),
  };
}

export function loadAverage() {
  return os.loadavg().map((x) => Math.round(x * 100) / 100);
}

/** "0-2,5" → [0, 1, 2, 5]. */
function cpuList(text) {
  return text.split(',').flatMap((part) => {
    const [from, to = from] = part.split('-').map(Number);
    return Array.from({ length: to - from + 1 }, (_, i) => from + i);
  });
}

/**
 * Pins the main thread to one vCPU at a time, so that both sides of a comparison run on the same
 * one: this VM's vCPUs are not equally fast. A child process inherits
 * the affinity of the thread that spawns it, so the C floor run next is pinned too; threads made
 * before (libuv's pool, started here first) stay free, as they are for a user. `mode` 'all' pins
 * every thread of the process instead (a process confined to one vCPU); 'none' pins nothing.
 * `undefined` where taskset is missing, the process may use one vCPU only, or mode is 'none'.
 */
export async function mainThreadPinning(mode) {
  if (mode === 'none') return undefined;
  const taskset = (...args) =>
    execFileSync('taskset', [...(mode === 'all' ? ['-a'] : []), '-c', '-p', ...args, String(process.pid)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
  let cpus;
  try {
    const out = taskset();
    cpus = cpuList(out.slice(out.lastIndexOf(':') + 1).trim());
  } catch {
    return undefined;
  }
  if (cpus.length < 2) return undefined;
  await stat('.'); // starts libuv's pool before any pinning
  return { mode, cpus, pin: (cpu) => void taskset(String(cpu)), unpin: () => void taskset(cpus.join(',')) };
}
