/**
 * Preloaded into each Ticketing node by the cluster benchmark (`node --import`): counts the
 * group-commit batches the node publishes on `ticketing:cluster:commit` and keeps histograms of
 * their sizes and of their commit time (send to etcd's answer, as the node saw it; in 0.1 ms bins) in `<TICKETING_COMMIT_STATS>/<pid>.json` (a directory; the file is rewritten at most
 * every 100 ms, by rename, so a reader never sees half of it). Observes only: changes nothing.
 */
import { subscribe } from 'node:diagnostics_channel';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.TICKETING_COMMIT_STATS;
if (dir) {
  const file = join(dir, `${process.pid}.json`);
  const stats = {
    batches: 0,
    txns: 0,
    writes: 0,
    replies: 0,
    writesHistogram: {},
    repliesHistogram: {},
    commitTenthsMs: {},
  };
  let dirty = false;
  subscribe('ticketing:cluster:commit', ({ writes, replies, txns, seconds }) => {
    stats.batches++;
    stats.txns += txns;
    stats.writes += writes;
    stats.replies += replies;
    stats.writesHistogram[writes] = (stats.writesHistogram[writes] ?? 0) + 1;
    stats.repliesHistogram[replies] = (stats.repliesHistogram[replies] ?? 0) + 1;
    const tenths = Math.round(seconds * 10_000);
    stats.commitTenthsMs[tenths] = (stats.commitTenthsMs[tenths] ?? 0) + 1;
    dirty = true;
  });
  const flush = () => {
    if (!dirty) return;
    dirty = false;
    writeFileSync(`${file}.tmp`, JSON.stringify(stats));
    renameSync(`${file}.tmp`, file);
  };
  setInterval(flush, 100).unref();
  process.on('exit', flush);
}
