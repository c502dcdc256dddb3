// The waits' shared timer (src/flock/alarm.ts): alarms are called in deadline order, a cleared one
// never, an earlier one set after a later one is not held up by it, and the process is kept
// running exactly while some alarm is set (as each wait's own setTimeout did).
import { spawnSync } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { clearAlarm, setAlarm, type Alarm } from '../src/flock/alarm.js';

/** When (`performance.now()`) each named alarm was called, in the order they were. */
function record(): { calls: Map<string, number>; call: (name: string) => () => void } {
  const calls = new Map<string, number>();
  return { calls, call: (name) => () => calls.set(name, performance.now()) };
}

const settle = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('alarms on one timer', () => {
  test('are called in deadline order, each no sooner than its delay; a cleared one never', async () => {
    const { calls, call } = record();
    const start = performance.now();
    setAlarm(60, call('60'));
    const cleared = setAlarm(20, call('cleared'));
    setAlarm(40, call('40'));
    setAlarm(10, call('10'));
    clearAlarm(cleared);
    clearAlarm(cleared); // twice: nothing more
    await settle(150);
    expect([...calls.keys()]).toEqual(['10', '40', '60']);
    for (const [name, at] of calls) expect(at - start).toBeGreaterThanOrEqual(Number(name) - 1);
  });

  test('an alarm set after a later one is called at its own time, not the later one’s', async () => {
    const { calls, call } = record();
    const start = performance.now();
    const late = setAlarm(5_000, call('late'));
    setAlarm(15, call('soon'));
    await settle(400);
    expect(calls.has('soon')).toBe(true);
    expect(calls.get('soon')! - start).toBeLessThan(300);
    expect(calls.has('late')).toBe(false);
    clearAlarm(late);
  });

  test('clearing thousands leaves the ones still set working (the heap is rebuilt)', async () => {
    const { calls, call } = record();
    const kept = [];
    for (let i = 0; i < 3_000; i++) {
      const alarm = setAlarm(10 + (i % 50), call(`a${i}`));
      if (i % 1_000 === 999) kept.push(`a${i}`);
      else clearAlarm(alarm);
    }
    await settle(200);
    expect([...calls.keys()].sort()).toEqual(kept.sort());
    // And an alarm set afterwards still comes.
    const { calls: after, call: callAfter } = record();
    setAlarm(5, callAfter('after'));
    await settle(100);
    expect(after.has('after')).toBe(true);
  });

  test('an alarm called or cleared during the calls of others is handled in the same pass', async () => {
    const { calls, call } = record();
    const later: Alarm[] = [];
    setAlarm(10, () => {
      call('first')();
      clearAlarm(later[0]!);
      setAlarm(10, call('set-in-call'));
    });
    later.push(setAlarm(10, call('second')));
    await settle(150);
    expect([...calls.keys()]).toEqual(['first', 'set-in-call']);
  });
});

describe('an alarm keeps the process running only while it is set', () => {
  const moduleUrl = new URL('../dist/flock/alarm.js', import.meta.url).href;
  /** Runs `body` in a fresh Node process (the built module): its wall time and stdout. */
  const run = (body: string): { ms: number; out: string } => {
    const started = performance.now();
    const child = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', `import { setAlarm, clearAlarm } from ${JSON.stringify(moduleUrl)};\n${body}`],
      { encoding: 'utf8', timeout: 20_000 },
    );
    expect(child.status, child.stderr).toBe(0);
    return { ms: performance.now() - started, out: child.stdout };
  };

  test('a set alarm holds the process until it is called', () => {
    const { ms, out } = run(`setAlarm(1500, () => console.log('called'));`);
    expect(out.trim()).toBe('called');
    expect(ms).toBeGreaterThanOrEqual(1_400);
  });

  test('once every alarm is cleared the process ends, though the timer was armed for 10 s', () => {
    const { ms, out } = run(`
      const a = setAlarm(10_000, () => console.log('never'));
      const b = setAlarm(20_000, () => console.log('never'));
      setTimeout(() => { clearAlarm(a); clearAlarm(b); console.log('cleared'); }, 50);`);
    expect(out.trim()).toBe('cleared');
    expect(ms).toBeLessThan(8_000);
  });

  test('a new alarm after all were cleared holds the process again', () => {
    const { ms, out } = run(`
      clearAlarm(setAlarm(10_000, () => console.log('never')));
      setAlarm(1200, () => console.log('called'));`);
    expect(out.trim()).toBe('called');
    expect(ms).toBeGreaterThanOrEqual(1_100);
  });
});
