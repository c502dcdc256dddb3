/**
 * Access control's rules (docs/ticketing-access.md): the identities of an `--acl-file`, who a
 * connection is (a client certificate's CN, or the `H` secret against SHA-256 hashes in constant
 * time), and which verbs an identity has on a key. Pure: it parses text and answers questions; the
 * server's access part (authorizer.ts) applies the answers, and cli/serve.ts reads the file.
 *
 * A rule grants its verbs on every key that starts with its prefix. Per identity and verb the
 * prefixes are kept sorted and without any that a shorter one covers, so the one prefix that can
 * match a key is the greatest one not above it: a binary search, whatever the number of rules. The
 * prefix that matched last is tried first (a client's keys mostly share one).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { isName } from '../protocol.js';

/** What a rule grants: `lock` (A, R, K, and P when the server has it), `observe` (O), `read` (the
 * rows of /v1/locks). */
const VERBS = ['lock', 'observe', 'read'] as const;
export type Verb = (typeof VERBS)[number];

/** One verb's prefixes of an identity (sorted, none covered by another), and the last that matched. */
interface VerbPrefixes {
  readonly sorted: readonly string[];
  last: string | undefined;
}

/** One identity of the file, its rules precomputed. */
export class Identity {
  readonly #lock: VerbPrefixes;
  readonly #observe: VerbPrefixes;
  readonly #read: VerbPrefixes;

  constructor(
    readonly name: string,
    /** SHA-256 of its secret, or undefined (certificate only). */
    readonly secretDigest: Buffer | undefined,
    /** Its client certificate's subject CN, or undefined (secret only). */
    readonly cn: string | undefined,
    rules: ReadonlyArray<{ readonly prefix: string; readonly verbs: readonly Verb[] }>,
    /** Grants it may hold and requests it may have queued (Infinity: no quota). */
    readonly maxHeld: number,
    readonly maxWaiting: number,
  ) {
    const prefixes = { lock: [] as string[], observe: [] as string[], read: [] as string[] };
    for (const rule of rules) for (const verb of rule.verbs) prefixes[verb].push(rule.prefix);
    this.#lock = { sorted: minimal(prefixes.lock), last: undefined };
    this.#observe = { sorted: minimal(prefixes.observe), last: undefined };
    this.#read = { sorted: minimal(prefixes.read), last: undefined };
  }

  /** Whether the identity has `verb` on `key`. */
  may(verb: Verb, key: string): boolean {
    const rules = this.#of(verb);
    const last = rules.last;
    if (last !== undefined && key.startsWith(last)) return true;
    // The greatest prefix that is not above the key: the only one that can be a prefix of it.
    const prefixes = rules.sorted;
    let low = 0;
    let high = prefixes.length - 1;
    while (low <= high) {
      const mid = (low + high) >>> 1;
      if (prefixes[mid]! <= key) low = mid + 1;
      else high = mid - 1;
    }
    if (high < 0 || !key.startsWith(prefixes[high]!)) return false;
    rules.last = prefixes[high];
    return true;
  }

  /** The prefixes it has `verb` on (sorted, none covered by another). */
  prefixes(verb: Verb): readonly string[] {
    return this.#of(verb).sorted;
  }

  #of(verb: Verb): VerbPrefixes {
    return verb === 'lock' ? this.#lock : verb === 'observe' ? this.#observe : this.#read;
  }
}

/** Sorted, with every prefix that a shorter one in the list covers left out ("" covers all). */
function minimal(prefixes: string[]): string[] {
  const sorted = [...new Set(prefixes)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const out: string[] = [];
  // A prefix's extensions sort right after it, so only the last one kept can cover the next.
  for (const prefix of sorted) if (out.length === 0 || !prefix.startsWith(out[out.length - 1]!)) out.push(prefix);
  return out;
}

/** The identities of one `--acl-file`. */
export class AccessRules {
  readonly #byName = new Map<string, Identity>();
  readonly #byCn = new Map<string, Identity>();
  readonly #bySecret: Identity[] = [];

  constructor(readonly identities: readonly Identity[]) {
    for (const identity of identities) {
      this.#byName.set(identity.name, identity);
      if (identity.cn !== undefined) this.#byCn.set(identity.cn, identity);
      if (identity.secretDigest !== undefined) this.#bySecret.push(identity);
    }
  }

  /** Parses an ACL file's text; throws an AccessFileError that says where and why. */
  static parse(text: string): AccessRules {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new AccessFileError(`not JSON: ${(error as Error).message}`);
    }
    return new AccessRules(parseIdentities(value));
  }

  byName(name: string): Identity | undefined {
    return this.#byName.get(name);
  }

  /** The identity whose `cn` is the certificate's subject CN. */
  byCertificate(cn: string | undefined): Identity | undefined {
    return cn === undefined ? undefined : this.#byCn.get(cn);
  }

  /** The identity whose secret this is: its SHA-256 compared with every identity's, in constant
   * time (every hash is compared, whichever matches). */
  bySecret(secret: string): Identity | undefined {
    return this.byDigest(secretDigest(secret));
  }

  byDigest(digest: Buffer): Identity | undefined {
    let found: Identity | undefined;
    for (const identity of this.#bySecret) if (timingSafeEqual(digest, identity.secretDigest!)) found ??= identity;
    return found;
  }
}

export function secretDigest(secret: string): Buffer {
  return createHash('sha256').update(secret, 'latin1').digest();
}

/** An ACL file that cannot be used: `message` says where in it and why. */
export class AccessFileError extends Error {
  override name = 'AccessFileError';
}

const IDENTITY_FIELDS = new Set(['name', 'secretSha256', 'cn', 'allow', 'maxHeld', 'maxWaiting']);
const RULE_FIELDS = new Set(['prefix', 'verbs']);
const NAME = /^[A-Za-z0-9_.@-]{1,64}$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
/** A quota's largest value: more than any server limit. */
const MAX_QUOTA = 1_000_000_000;

function parseIdentities(value: unknown): Identity[] {
  const file = object(value, 'the file');
  for (const field of Object.keys(file)) if (field !== 'identities') throw fail('', `unknown field "${field}"`);
  if (!Array.isArray(file.identities)) throw fail('identities', 'must be an array');
  const names = new Set<string>();
  const cns = new Set<string>();
  const digests = new Set<string>();
  return file.identities.map((item: unknown, i) => {
    const at = `identities[${i}]`;
    const entry = object(item, at);
    for (const field of Object.keys(entry)) {
      if (!IDENTITY_FIELDS.has(field)) throw fail(at, `unknown field "${field}"`);
    }
    const { name, secretSha256, cn, allow } = entry;
    if (typeof name !== 'string' || !NAME.test(name))
      throw fail(`${at}.name`, 'must be 1-64 characters of A-Z a-z 0-9 _ . @ -');
    if (names.has(name)) throw fail(`${at}.name`, `"${name}" is already the name of another identity`);
    names.add(name);
    if (secretSha256 !== undefined && (typeof secretSha256 !== 'string' || !SHA256_HEX.test(secretSha256)))
      throw fail(`${at}.secretSha256`, 'must be 64 hex digits (the SHA-256 of the secret)');
    if (cn !== undefined && (typeof cn !== 'string' || cn.length === 0 || cn.length > 256))
      throw fail(`${at}.cn`, 'must be a certificate subject CN (1-256 characters)');
    if (secretSha256 === undefined && cn === undefined)
      throw fail(at, `"${name}" needs secretSha256 or cn (or both): nothing could identify it`);
    const digest = secretSha256?.toLowerCase();
    if (digest !== undefined && digests.has(digest))
      throw fail(`${at}.secretSha256`, 'is the hash of another identity: a secret must name one identity');
    if (digest !== undefined) digests.add(digest);
    if (cn !== undefined && cns.has(cn)) throw fail(`${at}.cn`, `"${cn}" is the cn of another identity`);
    if (cn !== undefined) cns.add(cn);
    if (!Array.isArray(allow)) throw fail(`${at}.allow`, 'must be an array of rules');
    const rules = allow.map((rule: unknown, j) => parseRule(rule, `${at}.allow[${j}]`));
    return new Identity(
      name,
      digest === undefined ? undefined : Buffer.from(digest, 'hex'),
      cn,
      rules,
      quota(entry.maxHeld, `${at}.maxHeld`),
      quota(entry.maxWaiting, `${at}.maxWaiting`),
    );
  });
}

function parseRule(value: unknown, at: string): { prefix: string; verbs: Verb[] } {
  const rule = object(value, at);
  for (const field of Object.keys(rule)) if (!RULE_FIELDS.has(field)) throw fail(at, `unknown field "${field}"`);
  const { prefix, verbs } = rule;
  if (typeof prefix !== 'string' || (prefix !== '' && !isName(prefix)))
    throw fail(`${at}.prefix`, 'must be "" (every key) or a key prefix: 1-256 bytes of printable ASCII, no spaces');
  if (!Array.isArray(verbs) || verbs.length === 0) throw fail(`${at}.verbs`, `must list verbs (${VERBS.join(', ')})`);
  for (const [k, verb] of verbs.entries()) {
    if (!(VERBS as readonly unknown[]).includes(verb))
      throw fail(`${at}.verbs[${k}]`, `unknown verb ${JSON.stringify(verb)} (the verbs: ${VERBS.join(', ')})`);
  }
  return { prefix, verbs: verbs as Verb[] };
}

function quota(value: unknown, at: string): number {
  if (value === undefined) return Infinity;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_QUOTA)
    throw fail(at, `must be an integer in 0..${MAX_QUOTA} (leave it out for no quota)`);
  return value;
}

function object(value: unknown, at: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw fail(at, 'must be a JSON object');
  return value as Record<string, unknown>;
}

function fail(at: string, why: string): AccessFileError {
  return new AccessFileError(at === '' ? why : `${at}: ${why}`);
}
