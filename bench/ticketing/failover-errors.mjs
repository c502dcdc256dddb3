/** The cluster benchmark's failover: what its loops met, per kill. */
/** Each kill's errors: those from its kill to the next kill (the last: to the end of the run).
 * Indeterminate ones apart: only requests in flight to the killed leader should be among them. */
export function countErrorsPerKill(kills, errorLog) {
  kills.forEach((kill, k) => {
    const end = kills[k + 1]?.killedAt ?? Infinity;
    const mine = errorLog.filter(([at]) => at >= kill.killedAt && at < end);
    kill.indeterminate = mine.filter(([, code]) => code === 'ETICKETINDETERMINATE').length;
    kill.otherErrors = mine.length - kill.indeterminate;
    console.error(
      `failover ${k + 1}: ${kill.indeterminate} Indeterminate (${kill.inFlight} requests in flight at the kill), ` +
        `${kill.otherErrors} other errors`,
    );
  });
}
