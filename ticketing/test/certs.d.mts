/** Types of certs.mjs: a test CA and the certificates it issues, generated with openssl. */

export interface IssuedCertificate {
  readonly name: string;
  /** `<dir>/<name>.crt` and `<dir>/<name>.key`, PEM. */
  readonly certFile: string;
  readonly keyFile: string;
  /** The same, as PEM text. */
  readonly cert: string;
  readonly key: string;
}

export interface IssueOptions {
  /** File name (without extension) in the CA's dir: letters, digits, `.`, `_`, `-`. */
  name: string;
  /** The subject's CN. Default: `name`. `''`: a subject without a CN. (etcd takes a client
   * certificate's CN as its user, and refuses one on its HTTP gateway while auth is on.) */
  commonName?: string;
  /** Subject alternative names: IP addresses and DNS names. Default none. */
  hosts?: string[];
  /** Extended key usages. Default `['serverAuth', 'clientAuth']`. */
  usage?: Array<'serverAuth' | 'clientAuth'>;
  /** Validity from now, in days. Default 2. Negative: already expired. */
  days?: number;
}

export interface CertificateAuthority {
  readonly dir: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** The CA certificate, PEM. */
  readonly cert: string;
  issue(options: IssueOptions): Promise<IssuedCertificate>;
  /** Removes the dir if createCa made it (a given `dir` is the caller's to remove). */
  remove(): void;
}

export interface CreateCaOptions {
  /** Where the files go. Default: a new temp dir, removed by `remove()`. */
  dir?: string;
  /** File name of the CA's files. Default `ca`. */
  name?: string;
  commonName?: string;
  /** Default 2. */
  days?: number;
}

export declare function createCa(options?: CreateCaOptions): Promise<CertificateAuthority>;
