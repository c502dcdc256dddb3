export const DOCS: string[];
export interface SnippetBlock {
  doc: string;
  line: number;
  lang: string;
  code: string;
  /** `doc:line`, for messages. */
  where: string;
  run?: { kind: 'sh' | 'server' | 'node' | 'promtool'; group: string };
  skip?: string;
  problem?: string;
}
export function snippetBlocks(doc: string): SnippetBlock[];
export function groups(): Map<string, SnippetBlock[]>;
