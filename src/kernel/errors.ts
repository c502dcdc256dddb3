/**
 * The one coded-error base of every flocklease package (the lease, the operator, Ticketing).
 * Match on `code`, not on the message. `instanceof` works across two installed copies of the
 * package (as undici's errors do): it checks a brand registered with `Symbol.for`, not the
 * prototype chain, so an error thrown by one copy is still an instance of the other copy's class.
 */

const kBrands = Symbol.for('flocklease.error.brands');

/** The brand of a class: its name under a registry-wide prefix, the same in every copy. */
function brandOf(errorClass: abstract new (...args: never[]) => unknown): string {
  return `flocklease.${errorClass.name}`;
}

export abstract class CodedError extends Error {
  abstract readonly code: string;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    // Every class from new.target up to this one: `instanceof` any of them holds.
    const brands = new Set<string>();
    for (let c: unknown = new.target; c !== Error && typeof c === 'function'; c = Object.getPrototypeOf(c)) {
      brands.add(brandOf(c as abstract new (...args: never[]) => unknown));
    }
    Object.defineProperty(this, kBrands, { value: brands, enumerable: false });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (typeof value !== 'object' || value === null) return false;
    const brands = (value as { [kBrands]?: unknown })[kBrands];
    return brands instanceof Set && brands.has(brandOf(this));
  }
}
