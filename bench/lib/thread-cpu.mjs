// The CPU time of this process's main thread alone (process.cpuUsage counts every thread).
import { readFileSync } from 'node:fs';

/** µs of user + system time of the main thread so far, from /proc (Linux; 10 ms clock ticks). */
export function mainThreadCpu() {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields from the 3rd (state) on
  return (Number(fields[11]) + Number(fields[12])) * 10_000; // utime, stime: fields 14 and 15
}
