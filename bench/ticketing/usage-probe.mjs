/**
 * Preloaded into a benchmarked server (`node --import usage-probe.mjs …`, processes.mjs's
 * startProbedTicketing): answers each `usage` message on its IPC channel with the process's own
 * CPU and memory, which only the process itself can read (the heap, the array buffers). The
 * channel is unref'd: it keeps nothing alive, and costs nothing between questions.
 */
if (process.send !== undefined) {
  process.on('message', (message) => {
    if (message === 'usage') process.send({ cpu: process.cpuUsage(), memory: process.memoryUsage() });
  });
  process.channel.unref(); // after the listener, which refs it
}
