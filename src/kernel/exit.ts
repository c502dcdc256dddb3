/**
 * The exit codes a `run` command (`flocklease run`, `ticketing run`) gives beyond the command's own
 * status; what they mean is documented once, in docs/cli.md "Exit codes".
 */
/** The lock is held by someone else and was not obtained in time (sysexits EX_TEMPFAIL). */
export const EXIT_HELD = 75;
/** The lock was lost while the command ran; the command was terminated. Outside sysexits (64–78)
 * and the shell's 126, 127 and 128+n, so it collides with none of the codes a shell gives a meaning. */
export const EXIT_LOST = 79;
