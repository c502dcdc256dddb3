/**
 * TLS material from files: a certificate, its key and optionally a CA (with a CA, clients must
 * present a certificate it signed: mutual TLS). Loaded and checked up front, reloaded on demand
 * (SIGHUP) without disturbing open connections: whoever serves with it (the lock server, an
 * HTTPS endpoint) takes `secureContextOptions` again on the `'reload'` event and passes them to
 * `tls.Server#setSecureContext`. A reload that fails keeps the previous material in force.
 */
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { createPrivateKey } from 'node:crypto';
import tls from 'node:tls';
import { TicketError } from '../errors.js';
import { channels, publish } from '../events.js';

export interface TlsFiles {
  /** PEM certificate (chain) file. */
  readonly cert: string;
  /** PEM private key file of the certificate. */
  readonly key: string;
  /** PEM CA file: client certificates are required and verified against it. */
  readonly ca?: string | undefined;
}

/** TLS files that could not be read or do not fit together. */
export class TlsMaterialError extends TicketError {
  readonly code = 'ETICKETTLSFILES';
}

/** The least TLS version served. */
export const TLS_MIN_VERSION = 'TLSv1.2';

interface Loaded {
  readonly options: tls.SecureContextOptions;
}

/** Emits `'reload'` after a successful reload and `'reload-failed'` (error) after a failed one. */
export class TlsMaterial extends EventEmitter {
  readonly files: TlsFiles;
  #loaded: Loaded;

  private constructor(files: TlsFiles, loaded: Loaded) {
    super();
    this.files = files;
    this.#loaded = loaded;
  }

  /** Reads and checks the files. Throws a TlsMaterialError that names the file and the fault. */
  static load(files: TlsFiles): TlsMaterial {
    const checked = { cert: files.cert, key: files.key, ca: files.ca };
    return new TlsMaterial(checked, loadFiles(checked));
  }

  /** Client certificates are required (a CA was given). */
  get mutual(): boolean {
    return this.files.ca !== undefined;
  }

  /** For `tls.createSecureContext` and `tls.Server#setSecureContext`: the current material. */
  get secureContextOptions(): tls.SecureContextOptions {
    return this.#loaded.options;
  }

  /** Options for `tls.createServer` or `https.createServer`. `requestClientCert` (default: when a
   * CA was given) asks for and verifies client certificates. */
  serverOptions(requestClientCert = this.mutual): tls.TlsOptions {
    return { ...this.#loaded.options, requestCert: requestClientCert, rejectUnauthorized: requestClientCert };
  }

  /** Reads the files again. On success the new material is in force (`'reload'`); on failure the
   * old one stays (`'reload-failed'`) and the error is returned. Never throws. */
  reload(): TlsMaterialError | undefined {
    let error: TlsMaterialError | undefined;
    try {
      this.#loaded = loadFiles(this.files);
    } catch (caught) {
      error = caught as TlsMaterialError;
    }
    publish(channels.tlsReload, () => ({ material: this, files: this.files, error }));
    if (error === undefined) this.emit('reload');
    else this.emit('reload-failed', error);
    return error;
  }
}

function loadFiles(files: TlsFiles): Loaded {
  const cert = read(files.cert, 'certificate');
  const key = read(files.key, 'key');
  const ca = files.ca === undefined ? undefined : read(files.ca, 'CA');
  check(() => tls.createSecureContext({ cert }), `TLS certificate ${files.cert}: not a PEM certificate`);
  check(() => createPrivateKey(key), `TLS key ${files.key}: not a PEM private key`);
  if (ca !== undefined) check(() => tls.createSecureContext({ ca }), `TLS CA ${files.ca}: not a PEM certificate`);
  const options: tls.SecureContextOptions = { cert, key, ca, minVersion: TLS_MIN_VERSION };
  check(() => tls.createSecureContext(options), `TLS key ${files.key} does not match certificate ${files.cert}`);
  return { options };
}

function read(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new TlsMaterialError(`TLS ${what} ${path}: cannot be read (${code ?? (error as Error).message})`, {
      cause: error,
    });
  }
}

function check(attempt: () => unknown, message: string): void {
  try {
    attempt();
  } catch (error) {
    throw new TlsMaterialError(`${message} (${(error as Error).message})`, { cause: error });
  }
}
