export const DOCS: string[];
export function helpOf(commandLine: string): string;
export function helpBlocks(doc: string): Array<{ commandLine: string; shown: string; actual: string }>;
