/**
 * Does a peer speak TLS? Asked only after a plain-text connection failed without a word from the
 * peer (a TLS server closes on plain text, or waits for a handshake): one TLS handshake, trusting
 * nothing and sending nothing, tells a TLS peer from a dead or plain one, so the error can say
 * which option is missing.
 */
import net from 'node:net';
import tls from 'node:tls';

/** Resolves true once a TLS handshake with host:port got as far as the server's answer. */
export function speaksTls(host: string, port: number, timeoutMs = 2_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tls.connect({
      host,
      port,
      rejectUnauthorized: false,
      ...(net.isIP(host) === 0 ? { servername: host } : {}),
    });
    const finish = (answer: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.once('secureConnect', () => finish(true));
    // A handshake alert (the server wants a client certificate, …) is a TLS answer too; plain text,
    // a reset or a refusal is not.
    socket.once('error', (error: NodeJS.ErrnoException) => finish(/^ERR_SSL_\w*ALERT/.test(error.code ?? '')));
    socket.once('close', () => finish(false));
  });
}

/** The error of a TLS client whose peer answered in plain text (OpenSSL read no TLS record): by its
 * code, or (https, as `EPROTO`) by OpenSSL's reason in the message. */
export function isPlainTextPeer(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG') return true;
  return (
    code === 'EPROTO' && typeof message === 'string' && /wrong version number|packet length too long/.test(message)
  );
}
