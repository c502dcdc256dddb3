/**
 * The deadlines of many waits, on one Node timer. Most waits end before their deadline (a release
 * wakes them), and a setTimeout and a clearTimeout per wait would allocate a timer and a timer list
 * each time, on every contended cycle. So clearing an alarm
 * only marks it: the timer stays armed for the earliest deadline it was set for, and when it fires
 * it calls what is due and arms itself for the next alarm still set. Like a wait's own timer, it
 * keeps the process running only while some alarm is set.
 */
import { timerDelay } from '../kernel/timers.js';

export interface Alarm {
  /** The `performance.now()` at which it is due. */
  readonly at: number;
  /** What it calls when due; `undefined` once called or cleared. */
  call: (() => void) | undefined;
}

/** The alarms by `at`, earliest first (a binary min-heap). A cleared one stays until it reaches
 * the top, or until cleared ones outnumber set ones and the heap is rebuilt. */
let heap: Alarm[] = [];
/** Alarms set and not yet called or cleared. */
let pending = 0;
let timer: NodeJS.Timeout | undefined;
/** When `timer` fires (Infinity: no timer). */
let armedAt = Infinity;

/** Calls `call` once `ms` have passed (capped as setTimeout caps it), unless cleared first. */
export function setAlarm(ms: number, call: () => void): Alarm {
  const alarm: Alarm = { at: performance.now() + timerDelay(ms), call };
  push(alarm);
  if (++pending === 1) timer?.ref();
  if (alarm.at < armedAt) arm(alarm.at);
  return alarm;
}

/** Stops `alarm` from being called; nothing if it was called or cleared already. */
export function clearAlarm(alarm: Alarm): void {
  if (alarm.call === undefined) return;
  alarm.call = undefined;
  if (--pending === 0) {
    heap.length = 0; // all cleared: the armed timer finds nothing when it fires
    timer?.unref();
  } else if (heap.length > 2 * pending + 32) {
    heap = heap.filter((a) => a.call !== undefined);
    for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(i);
  }
}

function arm(at: number): void {
  if (timer !== undefined) clearTimeout(timer);
  armedAt = at;
  timer = setTimeout(fire, Math.max(0, at - performance.now()));
  if (pending === 0) timer.unref();
}

function fire(): void {
  timer = undefined;
  armedAt = Infinity;
  const now = performance.now();
  while (heap.length > 0) {
    const top = heap[0]!;
    const call = top.call;
    // Node may fire a fraction of a millisecond before `at`: that alarm waits for the next timer.
    if (call !== undefined && top.at > now) break;
    pop();
    if (call === undefined) continue;
    top.call = undefined;
    pending--;
    call(); // settles a promise: what it wakes runs after this loop
  }
  if (pending === 0) heap.length = 0;
  const next = heap[0];
  if (next !== undefined && next.at < armedAt) arm(next.at);
}

function push(alarm: Alarm): void {
  heap.push(alarm);
  for (let i = heap.length - 1; i > 0;) {
    const parent = (i - 1) >> 1;
    if (heap[parent]!.at <= alarm.at) break;
    heap[i] = heap[parent]!;
    heap[parent] = alarm;
    i = parent;
  }
}

function pop(): void {
  const last = heap.pop()!;
  if (heap.length === 0) return;
  heap[0] = last;
  siftDown(0);
}

function siftDown(from: number): void {
  const alarm = heap[from]!;
  for (let i = from; ;) {
    let least = i;
    const left = 2 * i + 1;
    if (left < heap.length && heap[left]!.at < heap[least]!.at) least = left;
    if (left + 1 < heap.length && heap[left + 1]!.at < heap[least]!.at) least = left + 1;
    if (least === i) return;
    heap[i] = heap[least]!;
    heap[least] = alarm;
    i = least;
  }
}
