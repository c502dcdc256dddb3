/**
 * A real browser for the console's tests: Debian's chromium (scripts/setup.sh installs it),
 * driven by playwright-core, which downloads no browser of its own. Every page is watched: each
 * request it makes (one for another origin is refused and recorded) and each console error.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/** Why the browser tests cannot run here (one line), or undefined. */
export const browserMissing: string | undefined = existsSync(CHROMIUM)
  ? undefined
  : `browser tests skipped: ${CHROMIUM} is missing (sh scripts/setup.sh installs it)`;

export function launchBrowser(): Promise<Browser> {
  // As root, chromium runs only without its sandbox.
  const args = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
  return chromium.launch({ executablePath: CHROMIUM, args, timeout: 30_000 });
}

export interface WatchedPage {
  readonly page: Page;
  /** Every URL the page requested. */
  readonly requests: string[];
  /** Requests for another origin than `origin` (refused). */
  readonly foreign: string[];
  /** Console errors and uncaught exceptions. */
  readonly errors: string[];
  close(): Promise<void>;
}

/** A page in a fresh context that may talk to `origin` only. */
export async function watchedPage(
  browser: Browser,
  origin: string,
  options: { ignoreHTTPSErrors?: boolean } = {},
): Promise<WatchedPage> {
  const context = await browser.newContext({ ...options, viewport: { width: 1200, height: 800 } });
  context.setDefaultTimeout(10_000);
  context.setDefaultNavigationTimeout(10_000);
  const requests: string[] = [];
  const foreign: string[] = [];
  const errors: string[] = [];
  await context.route('**/*', (route) => {
    const url = route.request().url();
    requests.push(url);
    if (new URL(url).origin !== origin) {
      foreign.push(url);
      return route.abort('blockedbyclient');
    }
    return route.continue();
  });
  const page = await context.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(`uncaught: ${error.message}`));
  return { page, requests, foreign, errors, close: () => context.close() };
}

const require = createRequire(import.meta.url);
const AXE_SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

export interface AxeViolation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly nodes: ReadonlyArray<{ readonly target: unknown }>;
}

/** Runs axe-core in the page (its source evaluated there): how many rules passed, and the
 * violations that are serious or critical. */
export async function axeCheck(page: Page): Promise<{ passed: number; serious: AxeViolation[] }> {
  await page.evaluate(AXE_SOURCE);
  const { passed, violations } = await page.evaluate(async () => {
    type Results = { passes: unknown[]; violations: AxeViolation[] };
    const axe = (globalThis as unknown as { axe: { run(): Promise<Results> } }).axe;
    const results = await axe.run();
    return {
      passed: results.passes.length,
      violations: results.violations.map(({ id, impact, help, nodes }) => ({
        id,
        impact,
        help,
        nodes: nodes.map((node) => ({ target: node.target })),
      })),
    };
  });
  return { passed, serious: violations.filter((v) => v.impact === 'serious' || v.impact === 'critical') };
}
