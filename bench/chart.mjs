#!/usr/bin/env node
// Redraws a chart.svg from a results.json (the chart is a pure function of the results):
//   node bench/chart.mjs [results.json] [chart.svg]   (default: bench/results.json → bench/chart.svg)
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chartSvg } from './lib/chart.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const [from = join(here, 'results.json'), to = join(here, 'chart.svg')] = process.argv.slice(2);
writeFileSync(to, chartSvg(JSON.parse(readFileSync(from, 'utf8'))));
console.log(`wrote ${to}`);
