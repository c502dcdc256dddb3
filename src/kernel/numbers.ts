/** Up-front checks of numeric options: one rule, one message, for every package. */

export interface NumberRule {
  /** Accept 0 as well (a count of waiters, a wait of 0 ms). */
  readonly zero?: boolean;
  readonly integer?: boolean;
  /** Inclusive upper bound. */
  readonly max?: number;
}

/**
 * A finite number > 0 (≥ 0 with `zero`), optionally an integer and at most `max`; otherwise a
 * TypeError (not a number) or RangeError naming `what`.
 */
export function checkNumber(value: unknown, what: string, rule: NumberRule = {}): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number, got ${typeof value}`);
  const low = rule.zero === true ? value >= 0 : value > 0;
  if (!Number.isFinite(value) || !low) {
    throw new RangeError(
      `${what} must be a finite ${rule.zero === true ? 'number, 0 or more' : 'positive number'}, got ${value}`,
    );
  }
  if (rule.integer === true && !Number.isInteger(value))
    throw new RangeError(`${what} must be an integer, got ${value}`);
  if (rule.max !== undefined && value > rule.max)
    throw new RangeError(`${what} must be at most ${rule.max}, got ${value}`);
  return value;
}

/** `checkNumber` for an optional option: `undefined` stays `undefined`. */
export function checkOptionalNumber(value: unknown, what: string, rule?: NumberRule): number | undefined {
  return value === undefined ? undefined : checkNumber(value, what, rule);
}
