// A Node child process run to its end, its stdout collected: the wake-up figure's two processes
// taking turns (bench/figures/takeover.mjs).
import { spawn } from 'node:child_process';

/**
 * Runs `node <args>`: its stdout, and its stderr if `pipeStderr` (else it goes to ours). Rejects
 * if it exits other than 0, or is still running after `timeoutMs` (then it is killed).
 */
function runNode(args, { env, pipeStderr = false, timeoutMs = 600_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', pipeStderr ? 'pipe' : 'inherit'],
      env,
      timeout: timeoutMs,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.stderr?.on('data', (chunk) => (err += chunk));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code === 0) resolve({ out, err });
      else reject(new Error(`${describe(args)} exited with ${code ?? signal}${err === '' ? '' : `: ${err}`}`));
    });
  });
}

/** The command line for an error, a long argument (a data: URL) cut short. */
const describe = (args) => ['node', ...args.map((a) => (a.length > 80 ? `${a.slice(0, 77)}...` : a))].join(' ');

/** runNode, its stdout read as one JSON value. */
export async function nodeJson(args, options) {
  return JSON.parse((await runNode(args, options)).out);
}
