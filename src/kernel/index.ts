/**
 * The shared kernel: what every flocklease package imports (the file lease and Ticketing alike).
 * It depends on nothing but Node.
 */
export { CodedError } from './errors.js';
export { checkNumber, checkOptionalNumber, type NumberRule } from './numbers.js';
export { MAX_TOKEN, TOKEN_RESERVE_MS, markAhead, nextToken, reservationLow } from './token.js';
export { MAX_TIMER_MS, RETRY_FIRST_MS, timerDelay } from './timers.js';
export { publish } from './events.js';
export { parseDuration } from './duration.js';
export { compact, displayText, relative, table } from './display.js';
export { EXIT_HELD, EXIT_LOST } from './exit.js';
export { describeEnd, EXIT_NOT_STARTED, exitStatus, Supervision } from './supervise.js';
