/**
 * The node panel: role, leader (a link to the leader's console on a follower), etcd, connections,
 * keys, and requests per second with a small chart of the last minutes.
 */
import type { NodeView } from './wire.js';

const SVG = 'http://www.w3.org/2000/svg';
const CHART_WIDTH = 300;
const CHART_HEIGHT = 40;

const ROLES: Readonly<Record<NodeView['role'], string>> = {
  single: 'single',
  leader: 'leader',
  'catching-up': 'leader (catching up)',
  follower: 'follower',
};

function byId<T extends HTMLElement | SVGElement>(id: string): T {
  const found = document.getElementById(id);
  if (found === null) throw new Error(`the page has no #${id}`);
  return found as T;
}

export class NodePanel {
  readonly #role = byId<HTMLElement>('node-role');
  readonly #leader = byId<HTMLElement>('node-leader');
  readonly #etcd = byId<HTMLElement>('node-etcd');
  readonly #connections = byId<HTMLElement>('node-connections');
  readonly #keys = byId<HTMLElement>('node-keys');
  readonly #rps = byId<HTMLElement>('node-rps');
  readonly #chart = byId<SVGSVGElement>('rps-chart');
  readonly #note = byId<HTMLElement>('follower-note');

  show(node: NodeView): void {
    this.#role.textContent = ROLES[node.role] + (node.ready ? '' : ` – not ready: ${node.reason ?? 'unknown'}`);
    this.#leader.replaceChildren(this.#leaderText(node));
    this.#etcd.textContent = node.etcd ?? 'not used (single mode)';
    this.#connections.textContent = String(node.connections);
    this.#keys.textContent = `${node.keys} registered, ${node.waiters} waiting`;
    const history = node.requestsPerSecond;
    this.#rps.textContent = String(history[history.length - 1] ?? 0);
    this.#drawChart(history);
    const follows = node.role === 'follower' && node.leader !== undefined;
    this.#note.hidden = !follows;
    if (follows) {
      this.#note.replaceChildren(
        `This node follows: the lock table is served by the leader, ${node.leader}. `,
        this.#leaderLink(node, 'Open the leader’s console'),
      );
    }
  }

  #leaderText(node: NodeView): Node {
    if (node.role === 'single') return document.createTextNode('– (single mode)');
    if (node.leader === undefined) return document.createTextNode('none known');
    if (node.leader === node.self) return document.createTextNode(`${node.leader} (this node)`);
    return this.#leaderLink(node, node.leader);
  }

  #leaderLink(node: NodeView, text: string): Node {
    if (node.leaderConsole === undefined) return document.createTextNode(text);
    const link = document.createElement('a');
    link.href = node.leaderConsole;
    link.rel = 'noreferrer';
    link.textContent = text;
    return link;
  }

  #drawChart(history: readonly number[]): void {
    const peak = Math.max(1, ...history);
    const step = CHART_WIDTH / Math.max(1, history.length - 1);
    const points = history
      .map((value, i) => `${(i * step).toFixed(1)},${(CHART_HEIGHT - (value / peak) * (CHART_HEIGHT - 2)).toFixed(1)}`)
      .join(' ');
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', points);
    this.#chart.replaceChildren(line);
    this.#chart.setAttribute(
      'aria-label',
      `Requests per second over the last ${Math.round(history.length / 60)} minutes, at most ${peak}`,
    );
  }
}
