/**
 * The console's page: the files the build puts in dist/console (ticketing/console/: the HTML,
 * the stylesheet, the icon, and the scripts compiled from console/src), read once when the
 * endpoint is made and served from memory. Nothing is fetched from anywhere else at run time.
 *
 * Every file is served with a Content-Security-Policy that allows only this origin's scripts,
 * styles, images and connections (no inline script or style, no frames, no form posts).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** From src/observe and from dist/observe alike: the package's dist/console. */
const ASSET_DIR = fileURLToPath(new URL('../../dist/console/', import.meta.url));

const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Readonly<Record<string, string>> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  svg: 'image/svg+xml',
};

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

export interface Asset {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * The page's files by URL path: `/` is index.html, every other file is `/console/<name>`. When
 * the console was not built (dist/console missing: running from source), `/` says so.
 */
export function loadAssets(dir = ASSET_DIR): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    const body = `the console is not built (${dir} is missing): run npm run build\n`;
    assets.set('/', { status: 503, body, headers: { 'content-type': 'text/plain; charset=utf-8' } });
    return assets;
  }
  for (const name of names) {
    const type = TYPES[/\.(\w+)$/.exec(name)?.[1] ?? ''];
    if (type === undefined || !/^[\w.-]+$/.test(name)) continue;
    const path = name === 'index.html' ? '/' : `/console/${name}`;
    const body = readFileSync(`${dir}${name}`, 'utf8');
    assets.set(path, { status: 200, body, headers: { 'content-type': type, ...SECURITY_HEADERS } });
  }
  return assets;
}
