// A self-contained SVG chart a person can open in a browser: retention and TTFT p50 against
// the load point, one line per adapter mix (LoRA off dashed); over several rounds a bar through
// each retention point spans its rounds' own. Hand-written: no dependencies.
import { retentionRange, type CellReport } from './cell.js';
import { describeLoad, type LoadShape } from './load.js';
import { formatMs, formatRetention } from './table.js';

const WIDTH = 980;
const HEIGHT = 440;
const PANEL = { width: 400, height: 280, top: 70, left: [70, 560] };
const COLORS: Record<string, string> = { base: '#1f77b4', one: '#ff7f0e', churn: '#2ca02c', mixed: '#d62728', 'lora-off': '#555555' };

interface Series {
  name: string;
  color: string;
  dashed: boolean;
  points: { x: number; y: number | null; label: string; range?: [number, number] }[];
}

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Load points in order: closed-loop concurrencies ascending, then Poisson rates ascending. */
function loadPoints(cells: readonly CellReport[]): LoadShape[] {
  const seen = new Map<string, LoadShape>();
  for (const c of cells) seen.set(describeLoad(c.load), c.load);
  const key = (l: LoadShape): number => (l.kind === 'closed' ? l.concurrency : 1e9 + l.rate);
  return [...seen.values()].sort((a, b) => key(a) - key(b));
}

/** range: the low and high of a point's rounds, where it has them. */
function seriesOf(
  cells: readonly CellReport[], xs: LoadShape[], value: (c: CellReport) => number | null, label: (c: CellReport) => string,
  range: (c: CellReport) => [number, number] | undefined = () => undefined,
): Series[] {
  const groups = new Map<string, CellReport[]>();
  for (const c of cells) {
    const name = c.engine === 'lora-off' ? 'lora-off' : c.mix;
    groups.set(name, [...(groups.get(name) ?? []), c]);
  }
  return [...groups].map(([name, group]) => ({
    name,
    color: COLORS[name] ?? '#000000',
    dashed: name === 'lora-off',
    points: xs.map((x, i) => {
      const cell = group.find((c) => describeLoad(c.load) === describeLoad(x));
      const y = cell === undefined ? null : value(cell);
      return { x: i, y, label: `${name} ${describeLoad(x)}: ${cell === undefined ? '-' : label(cell)}`, range: cell && range(cell) };
    }),
  }));
}

/** A round axis maximum and tick step covering `max`. */
function niceScale(max: number): { top: number; step: number } {
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const rough = max / 4;
  const mag = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= rough)!;
  return { top: Math.ceil(max / step) * step, step };
}

function panel(
  index: number, title: string, xs: LoadShape[], series: Series[], yFormat: (v: number, step: number) => string, floor?: number,
): string {
  const left = PANEL.left[index], top = PANEL.top, w = PANEL.width, h = PANEL.height;
  const values = series.flatMap((s) => s.points.flatMap((p) => [p.y, p.range?.[1] ?? null])).filter((v): v is number => v !== null);
  const { top: yTop, step } = niceScale(Math.max(floor ?? 0, ...values) * 1.05);
  // Categorical x: load points evenly spaced, half a step in from each edge.
  const px = (i: number): number => left + ((i + 0.5) / xs.length) * w;
  const py = (v: number): number => top + h - (v / yTop) * h;
  const out: string[] = [`<g class="panel">`, `<text x="${left + w / 2}" y="${top - 20}" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(title)}</text>`];
  out.push(`<rect x="${left}" y="${top}" width="${w}" height="${h}" fill="none" stroke="#999"/>`);
  for (let v = 0; v <= yTop + step / 1e6; v += step) {
    out.push(`<line x1="${left}" x2="${left + w}" y1="${py(v).toFixed(1)}" y2="${py(v).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${left - 6}" y="${(py(v) + 4).toFixed(1)}" text-anchor="end" font-size="11">${escapeXml(yFormat(v, step))}</text>`);
  }
  const axis = xs.every((x) => x.kind === 'closed') ? 'concurrent requests (closed loop)'
    : xs.every((x) => x.kind === 'poisson') ? 'arrival rate (Poisson)' : 'load';
  out.push(`<text x="${left + w / 2}" y="${top + h + 38}" text-anchor="middle" font-size="12" fill="#444">${axis}</text>`);
  xs.forEach((x, i) => out.push(`<text x="${px(i).toFixed(1)}" y="${top + h + 18}" text-anchor="middle" font-size="11">${escapeXml(describeLoad(x))}</text>`));
  for (const s of series) {
    const pts = s.points.filter((p) => p.y !== null);
    out.push(`<g class="series" data-name="${escapeXml(s.name)}">`);
    // Closed-loop and Poisson points are different experiments: no line joins one to the other.
    for (const kind of ['closed', 'poisson']) {
      const run = pts.filter((p) => xs[p.x].kind === kind);
      const path = run.map((p) => `${px(p.x).toFixed(1)},${py(p.y!).toFixed(1)}`).join(' ');
      if (run.length > 1) out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''} points="${path}"/>`);
    }
    for (const p of pts.filter((q) => q.range !== undefined)) {
      const [low, high] = p.range!;
      out.push(`<line class="range" x1="${px(p.x).toFixed(1)}" x2="${px(p.x).toFixed(1)}" y1="${py(low).toFixed(1)}" y2="${py(high).toFixed(1)}" stroke="${s.color}" stroke-width="1.5"/>`);
    }
    for (const p of pts) out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y!).toFixed(1)}" r="3.5" fill="${s.color}"><title>${escapeXml(p.label)}</title></circle>`);
    out.push('</g>');
  }
  out.push('</g>');
  return out.join('\n');
}

function legend(series: Series[]): string {
  const out = ['<g class="legend">'];
  series.forEach((s, i) => {
    const x = PANEL.left[0] + i * 130, y = HEIGHT - 22;
    out.push(`<line x1="${x}" x2="${x + 24}" y1="${y}" y2="${y}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    out.push(`<text x="${x + 30}" y="${y + 4}" font-size="12">${escapeXml(s.name)}</text>`);
  });
  out.push('</g>');
  return out.join('\n');
}

/** `cells`: LoRA-on cells of every mix plus the LoRA-off baseline cells. */
export function chartSvg(cells: readonly CellReport[], title: string): string {
  const xs = loadPoints(cells);
  const retention = seriesOf(cells, xs, (c) => c.retention, formatRetention, retentionRange);
  const ttft = seriesOf(cells, xs, (c) => c.ttftMs.p50, (c) => (c.ttftMs.p50 === null ? '-' : `${formatMs(c.ttftMs.p50)} ms`));
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    `<text x="${WIDTH / 2}" y="26" text-anchor="middle" font-size="16">${escapeXml(title)}</text>`,
    panel(0, 'Retention (tok/s ÷ LoRA off)', xs, retention, (v) => `${Math.round(v * 100)}%`, 1),
    panel(1, 'TTFT p50 (ms)', xs, ttft, (v, step) => v.toFixed(Math.max(0, -Math.floor(Math.log10(step))))),
    legend(retention.length >= ttft.length ? retention : ttft),
    '</svg>',
    '',
  ].join('\n');
}
