export interface Target {
  id: string;
  figure: string;
  measured: number | null;
  target: string;
  met: boolean | null;
  detail: string | undefined;
}
export function targets(figures: unknown, options?: { busy?: boolean }): Target[];
