// What the numbers were measured on.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';

/** The file system type of the mount `dir` is on (findmnt: "ext4"; stat -f says "ext2/ext3"). */
export function fsType(dir) {
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
