export const DOCS: string[];
export function render(kind: 'summary' | 'targets', file: string): string;
export function benchBlocks(doc: string): Array<{ kind: string; file: string; shown: string; actual: string }>;
